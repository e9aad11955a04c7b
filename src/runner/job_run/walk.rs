//! One step's walk of one region's pages, in order: page k+1's request
//! needs page k's answer (its token), so a region's pages never overlap;
//! other regions run beside it (`keys.rs`). Per page: charge, call,
//! write, then the round's cursor is saved with this region's next page.

use std::collections::HashSet;

use reqwest::Url;
use tracing::{error, warn};

use super::found::FoundValues;
use super::refusals::BATCHES_REFUSED;
use super::request::{Fetched, Written};
use super::round::Slot;
use super::{JobRun, PageAnswer, Position, Walk, Walker};
use crate::config::{Credential, Fill, Job, PageKind, Step, redact};
use crate::runner::cursor::Place;
use crate::sink::folder::PageName;
use crate::upstream::paginate::{self, Next};
use crate::{Error, Result};

impl JobRun<'_> {
    /// One step's pages for one region, from `page` (whose token is
    /// `token`) on, the cursor saved after each.
    pub(super) async fn walk(
        &self,
        w: &mut Walker,
        step: &Step,
        at: &Position<'_>,
        mut page: u32,
        mut token: Option<String>,
    ) -> Result<Walk> {
        if !resumable((self.job, self.cred), step, at, page, token.as_deref()) {
            (page, token) = (0, None);
            // (a list begun from a later page is begun afresh)
            w.found.take();
            self.conditional.walk_starts(at, None);
        }
        // A cursor past the step's last page (`max_pages` lowered since):
        // the step is done, as the plan counts it; no page past the
        // maximum is fetched.
        if page >= step.max_pages() {
            warn!(
                job = self.job.name,
                "{}: the saved cursor is past this step's max_pages, {} (the file changed?): the step ends here",
                at.describe(page),
                step.max_pages()
            );
            self.step_done(w, at).await;
            return Ok(Walk::Done);
        }
        // The tokens this walk has followed: an upstream that hands one
        // out again is going in circles.
        let mut walked: HashSet<String> = token.iter().cloned().collect();
        loop {
            // A place among the run's requests in flight, held until the
            // cursor says this page is written.
            let _permit = self.permit().await;
            let fill = at.fill(self.cred, self.job, page, "");
            let Some(next) = self
                .fetch_page(Some(&mut w.found), step, &fill, token.as_deref(), at, page)
                .await?
            else {
                return Ok(Walk::Stopped);
            };
            // (the upstream's last page, or a 304 that ends the walk: not a
            // walk cut short, whose incremental value must not advance)
            let complete = matches!(next, Next::End(None));
            let next = match self.follow(step, at, page, next, &mut walked) {
                Ok(next) => next,
                Err(()) => {
                    self.save(at.slot, Slot::Done).await;
                    return Ok(Walk::Refused);
                }
            };
            // Where the next run starts if this one stops now.
            let Some(t) = next else {
                self.step_done(w, at).await;
                // (after the cursor: a kill between redoes the walk in
                // full, from the old value, never skips)
                (self.conditional)
                    .walk_complete(self.meter.store(), step, at, page, complete)
                    .await;
                return Ok(Walk::Done);
            };
            let resume = at.cursor(Place {
                step: at.step,
                page: page + 1,
                token: Some(t.clone()),
                found: w.found.held_values().to_vec(),
                found_in: w.found.found_in(),
                largest: self.conditional.walk_largest(at).map(Box::new),
                ..Place::default()
            });
            self.save(at.slot, Slot::At(Box::new(resume))).await;
            page += 1;
            token = Some(t);
        }
    }

    /// What the walk does after `page`: follow a token (`Some`), end the
    /// step (`None`: the last page, a page limit, a token going in circles),
    /// or give the region up (`Err`: a next page elsewhere was refused).
    fn follow(
        &self,
        step: &Step,
        at: &Position<'_>,
        page: u32,
        next: Next,
        walked: &mut HashSet<String>,
    ) -> std::result::Result<Option<String>, ()> {
        let job = self.job;
        let here = at.describe(page);
        Ok(match next {
            Next::Follow(_) if step.max_pages() <= page + 1 => {
                // (the upstream has more: said, never a silent truncation)
                warn!(
                    job = job.name,
                    "{here}: the upstream has more pages, but this step's max_pages ({}) is reached: the walk is cut here{}; raise max_pages to fetch the rest",
                    step.max_pages(),
                    if step.incremental.is_some() {
                        ", and its incremental value does not advance"
                    } else {
                        ""
                    }
                );
                self.report.borrow_mut().walks_cut += 1;
                None
            }
            Next::Follow(t) if !walked.insert(t.clone()) => {
                let shown = crate::logging::cut(&redact(&t, &[&self.cred.secret]), 80);
                let what = match step.paginate.as_ref().map(|p| &p.kind) {
                    Some(PageKind::Link | PageKind::NextUrl { .. }) => "URL",
                    _ => "token",
                };
                warn!(
                    job = job.name,
                    "{here}: the next page {what} (\"{shown}\") repeats one this walk already followed: \
                     the upstream is going in circles, so the walk ends here and the run moves on"
                );
                None
            }
            Next::Follow(t) => {
                // (a next page whose request cannot be sent ends the
                // region, as a next page elsewhere does: charged every
                // tick and never sent, it would hold the round for good)
                let fill = at.fill(self.cred, self.job, page + 1, "");
                let unsendable = match paginate::page_url(step, &fill, Some(&t)) {
                    Ok(url) => super::request::sendable(&url).err(),
                    Err(e) => Some(e.to_string()),
                };
                if let Some(why) = unsendable {
                    error!(
                        job = job.name,
                        "{here}: the next page's request cannot be made: {why}; the region ends here, the others go on"
                    );
                    return Err(());
                }
                Some(t)
            }
            Next::End(note) => {
                if let Some(note) = note {
                    warn!(job = job.name, "{here}: {note}");
                }
                None
            }
            Next::Refused(why) => {
                error!(
                    job = job.name,
                    "{here}: {why}; the region ends here, the others go on"
                );
                return Err(());
            }
            Next::Unreadable(why) => {
                warn!(job = job.name, "{here}: {why}");
                self.report.borrow_mut().unreadable_links += 1;
                None
            }
        })
    }

    /// Charge, call (retrying transient failures, each attempt charged) and
    /// write one page; what it says of the next. `None` when the run
    /// stopped cleanly instead, or the input failed (recorded, over). `keep` keeps the page's values for a
    /// fan-out after this step.
    pub(super) async fn fetch_page(
        &self,
        keep: Option<&mut FoundValues>,
        step: &Step,
        fill: &Fill<'_>,
        token: Option<&str>,
        at: &Position<'_>,
        page: u32,
    ) -> Result<Option<Next>> {
        let Some(url) = self.page_request_url(step, fill, token, at).await? else {
            return Ok(None);
        };
        let given =
            token.is_some() || step.for_each.is_some() || uses_key(step) || at.batch.is_some();
        let PageAnswer {
            body,
            found,
            link,
            fresh,
        } = match self.request_page(step, fill, &url, given).await? {
            Fetched::Page(page) => {
                // (answered: the key and the request are good, whether
                // or not the page can be written)
                self.refusals.answered();
                if let Some(feed) = self.feed.borrow_mut().as_mut() {
                    feed.answered();
                }
                if step.for_each.is_some() {
                    self.refusals.batch(at.key, at.step, true);
                }
                page
            }
            Fetched::Stopped => return Ok(None),
            Fetched::NotModified => {
                self.refusals.answered();
                if let Some(feed) = self.feed.borrow_mut().as_mut() {
                    feed.answered();
                }
                return Ok(Some(self.conditional.unchanged(step, fill)));
            }
            Fetched::Refused(why, for_itself, outage) => {
                let answer = for_itself.as_ref().map(|(s, e)| (*s, e.as_str(), outage));
                return self.refused(step, at, token, page, &why, answer).await;
            }
        };
        let name = PageName {
            job: &self.job.name,
            run: at.run,
            region: at.key,
            step: at.step,
            page,
        }
        .file_name();
        let (body, held) = match self
            .write_page(fill, &name, (at.key, at.step), body)
            .await?
        {
            Written::Page(body, held) => (body, held),
            // Refused as a 2xx that can never be a page is: the same
            // page again if asked again at once (not for itself: the
            // upstream took the key and the request)
            Written::Refused(why) => {
                let shown = crate::logging::cut(&redact(url.as_str(), &[fill.secret]), 200);
                let why = format!("{shown}: {why}");
                return self.refused(step, at, token, page, &why, None).await;
            }
        };
        // The values for a fan-out after this step, from a page written
        // (they are saved with the cursor after it).
        if let Some(keep) = keep {
            (self.lists)
                .collect_for_next(self.meter.store(), keep, at, page, &body)
                .await?;
        }
        self.conditional.saw(step, at, page, &body);
        let next = paginate::next(step, fill, &url, token, found, link.as_deref());
        let follow = match &next {
            Next::Follow(t) => Some(t.as_str()),
            _ => None,
        };
        (self.conditional).keep_validators(step, fill, &url, fresh, follow, held);
        Ok(Some(next))
    }

    /// The URL of the page's request, with the incremental value kept
    /// for it; `None` when an input's values make no request that can be
    /// sent (the input recorded as failed).
    async fn page_request_url(
        &self,
        step: &Step,
        fill: &Fill<'_>,
        token: Option<&str>,
        at: &Position<'_>,
    ) -> Result<Option<Url>> {
        let mut url = match paginate::page_url(step, fill, token) {
            Ok(url) => url,
            // (the file's templates were checked: an input's values made it)
            Err(Error::Http { message, .. }) if token.is_none() && self.feed.borrow().is_some() => {
                let why = format!("its request cannot be made ({message}), not sent");
                self.record_input_failed(at, &why, 0, &why).await;
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        if let Some((param, value)) = self.conditional.since(step, at.key, at.step) {
            with_param(&mut url, &param, &value);
        }
        Ok(Some(url))
    }

    /// A page (or batch) refused, by the upstream (`for_itself`: its
    /// status and excerpt, as the table of answers says) or as it came (it can
    /// never be a page, or be written): what the walk does next (`None`:
    /// the input failed, recorded and over, or the run stopped).
    async fn refused(
        &self,
        step: &Step,
        at: &Position<'_>,
        token: Option<&str>,
        page: u32,
        why: &str,
        for_itself: Option<(u16, &str, bool)>,
    ) -> Result<Option<Next>> {
        // A batch the upstream rejects is skipped, named: the fan-out
        // goes on with the next (it takes this one as done), unless
        // it refused the batches before it too and took none: then
        // the rest of the fan-out (`Next::Refused`) is skipped.
        if step.for_each.is_some() {
            let batch = match at.key {
                "" => format!("step {} batch {page}", at.step),
                key => format!("{key} step {} batch {page}", at.step),
            };
            self.report.borrow_mut().fail(at.key, batch.clone());
            if self.refusals.batch(at.key, at.step, false) {
                return Ok(Some(Next::Refused(format!(
                    "{batch}: {why}; {BATCHES_REFUSED} batches in a row refused and none taken in this run"
                ))));
            }
            error!(
                job = self.job.name,
                "{batch}: {why}; this batch is skipped, the others go on"
            );
            return Ok(Some(Next::End(None)));
        }
        // An input's page refused (its first for itself: one id the
        // upstream lacks, among many it has; or any page as it came, or a
        // later one): the input failed, recorded, so that `quota reset
        // --failed` does it again, never taken as done in silence.
        if self.feed.borrow().is_some() {
            let (status, excerpt, outage) = for_itself.unwrap_or((0, why, false));
            self.input_failed(at, why, (status, excerpt), outage)
                .await?;
            return Ok(None);
        }
        // A region's page: its region ends here (the walk saves it as
        // served). Its first page refused for itself (its URL, query,
        // headers or body use `{region}`, so the region may be what the
        // upstream refuses) ends only the region, unless the region before
        // it ended so too, no page written since: then the fault is likely
        // the file's or the key's, met by every region, and the job stops,
        // the cursor past both regions (the next run starts after them:
        // none starves, and a tick spends at most two refused calls).
        if for_itself.is_some()
            && token.is_none()
            && let Some(n) = self.refusals.first_page_refused()
        {
            self.save(at.slot, Slot::Done).await;
            return Err(crate::Error::Upstream {
                job: self.job.name.clone(),
                url: at.describe(0),
                problem: format!(
                    "{why}; the first page of {n} regions in a row was refused, so the job stops \
                     (check the file and the key); the next run starts after them"
                ),
            });
        }
        Ok(Some(Next::Refused(why.to_string())))
    }
}

/// Whether a walk can start at `page` with the cursor's `token`: one
/// that does not fit the step's pagination (see
/// [`paginate::token_fits`]) restarts the step, with a warning.
fn resumable(
    (job, cred): (&Job, &Credential),
    step: &Step,
    at: &Position<'_>,
    page: u32,
    token: Option<&str>,
) -> bool {
    let Some(t) = token else { return true };
    let fill = at.fill(cred, job, page, "");
    let fits = paginate::token_fits(step, &fill, t);
    if !fits {
        warn!(
            job = job.name,
            "{}: the saved cursor does not fit this step's pagination (the file changed?): the step starts again at its first page",
            at.describe(page)
        );
    }
    fits
}

/// Whether a step's request depends on its key (`{region}`, `{key}`, an
/// `{input.NAME}`: URL, query, headers, body): a refusal of its first page
/// may then be the key's alone.
fn uses_key(step: &Step) -> bool {
    step.uses_key()
}

/// `url` with `param=value` in its query, unless it names `param` already
/// (a next link the upstream gave carries it as it was sent).
fn with_param(url: &mut reqwest::Url, param: &str, value: &str) {
    if url.query_pairs().any(|(k, _)| k == param) {
        return;
    }
    url.query_pairs_mut().append_pair(param, value);
}
