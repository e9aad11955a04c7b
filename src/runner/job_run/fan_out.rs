//! Fan-out steps (`for_each`): a step that runs once per batch of the
//! values the previous step's pages hold at a JSON pointer (`*` for every
//! element of an array), for the same region. It lives apart from the
//! page walk of `mod.rs` because its unit of work is a batch, not a page:
//!
//! * While the previous step walks its pages, each page written is read
//!   for the values ([`values_at`]); they are kept in order, duplicates
//!   dropped ([`Found`]), and saved in the cursor with every page, so a
//!   killed run does not lose the values of the pages it already wrote.
//! * When that step ends, the values become the fan-out's list of values
//!   to send, saved in the store once, apart ([`JobRun::keep_list`]),
//!   and emptied once the fan-out is done;
//!   after each batch the cursor keeps its position in them (`batch_at`),
//!   not the values not yet sent. A stop (a rejection, a signal) or a kill
//!   resumes at the batch in hand, from the store, on any host: no page
//!   already written is fetched again.
//!
//! Every batch is one request, charged and written as any page is. With
//! `concurrency` above 1 a region's batches go out side by side, within
//! the run's one limit of requests in flight; the cursor then also keeps
//! the batches written past the earliest one not yet written
//! ([`super::batches`]).
//!
//! A fan-out followed by another goes side by side too. Its batches'
//! pages are written in any order, but the next step must get their
//! values in page order, as one at a time would: each batch's values are
//! read from its page on their own, and join [`Found`] only once every
//! batch before it is written; until then they wait in [`Batches`], and in
//! the cursor saved with every batch (`found_ahead`), so a stop or a kill
//! loses none of them. The cursor, not the page files, because a run on
//! another host resumes from the store alone and the folder's pages may
//! be taken away once written.
//!
//! A page is read for values as [`page_scan`] reads any page: streaming,
//! only what the pointer names, so a page costs about its own size. A
//! value that cannot be read (a lone surrogate escape) is left out and
//! counted as lost ([`super::super::report::JobReport::values_lost`]): the
//! run does not end as "finished" with 0 having lost it.

use std::cell::RefCell;
use std::collections::HashSet;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tracing::{error, warn};

use super::batches::Batches;
use super::round::Slot;
use super::{JobRun, Position, Walk, Walker};
use crate::Result;
use crate::config::{ForEach, Step, redact};
use crate::ledger::JobStore;
use crate::page_scan;
use crate::runner::cursor::{Place, ValueList, values_key};
use crate::upstream::paginate::Next;

/// The values found so far for a fan-out step, in order, each once.
#[derive(Default)]
pub(super) struct Found {
    values: Vec<String>,
    seen: HashSet<String>,
}

/// The longest value a fan-out takes (bytes): an id, a name, a cursor, with
/// room to spare; one of tens of kilobytes is an upstream gone wrong.
const MAX_VALUE: usize = 8192;

impl Found {
    /// Start again from `values` (a cursor's, or none).
    pub(super) fn reset(&mut self, values: Vec<String>) {
        self.seen = values.iter().cloned().collect();
        self.values = values;
    }

    pub(super) fn values(&self) -> &[String] {
        &self.values
    }

    fn take(&mut self) -> Vec<String> {
        self.seen.clear();
        std::mem::take(&mut self.values)
    }

    /// Add `values` in order, each not yet kept, up to `max` in all; how
    /// many were left out for the limit.
    fn keep(&mut self, values: Vec<String>, max: u64) -> u64 {
        let mut left_out = 0;
        for v in values {
            if self.seen.contains(&v) {
                continue;
            }
            if self.values.len() as u64 >= max {
                left_out += 1;
            } else {
                self.seen.insert(v.clone());
                self.values.push(v);
            }
        }
        left_out
    }
}

/// The values at `pointer` in a JSON page: strings as they are, numbers as
/// the page writes them, in document order; `*` matches every element of an array. Other
/// kinds (objects, arrays, booleans, null) are not values and are skipped;
/// a value that cannot be read (a string with a lone surrogate escape) is
/// counted, apart. Streamed ([`page_scan::values`]): no tree of the page.
pub(super) fn values_at(body: &[u8], pointer: &str) -> serde_json::Result<(Vec<String>, u64)> {
    page_scan::values(body, pointer)
}

impl JobRun<'_> {
    /// The next step's `for_each`, when it fans out over this one's pages.
    fn next_for_each(&self, at: &Position<'_>) -> Option<&ForEach> {
        self.job
            .steps
            .get(at.step + 1)
            .and_then(|s| s.for_each.as_ref())
    }

    /// Keep the values of a page just written for the next step, if it
    /// fans out. A value that is empty, holds a control character (it
    /// could not go in a header), is `.` or `..` (in a URL's path it would
    /// move the request to another path) or carries the secret (it would
    /// reach the store) is left out, and so are those past the step's
    /// `max_values`; the run says how many.
    pub(super) fn collect_for_next(
        &self,
        found: &mut Found,
        at: &Position<'_>,
        page: u32,
        body: &[u8],
    ) {
        let Some(f) = self.next_for_each(at) else {
            return;
        };
        let values = match values_at(body, &f.from) {
            Ok((values, 0)) => values,
            Ok((values, lost)) => {
                self.report.borrow_mut().values_lost += lost;
                warn!(
                    job = self.job.name,
                    "{}: {lost} value(s) at {} cannot be read as text (a lone surrogate escape): \
                     LOST for the next step, the others are kept",
                    at.describe(page),
                    f.from
                );
                values
            }
            Err(e) => {
                // (the page check reads pages as this does: not reached
                // for a page that was written)
                self.report.borrow_mut().values_lost += 1;
                warn!(
                    job = self.job.name,
                    "{}: not JSON ({e}): no values for the next step, LOST",
                    at.describe(page)
                );
                return;
            }
        };
        let count = values.len();
        let usable: Vec<String> = values
            .into_iter()
            .filter(|v| {
                // (a value longer than MAX_VALUE could never go out in a
                // request line: its batch would stop the job every run)
                !v.is_empty()
                    && v.len() <= MAX_VALUE
                    && !v.chars().any(char::is_control)
                    && !matches!(v.as_str(), "." | "..")
                    && redact(v, &[&self.cred.secret]) == *v
            })
            .collect();
        let unusable = (count - usable.len()) as u64;
        self.keep_found(found, at, page, usable, unusable);
    }

    /// Keep what page `page` found for the next step, after those kept
    /// already; say how many values were left out (`unusable` of them
    /// before, and those past the step's `max_values`).
    fn keep_found(
        &self,
        found: &mut Found,
        at: &Position<'_>,
        page: u32,
        values: Vec<String>,
        unusable: u64,
    ) {
        let Some(f) = self.next_for_each(at) else {
            return;
        };
        let left_out = unusable + found.keep(values, f.max_values);
        if left_out > 0 {
            warn!(
                job = self.job.name,
                "{}: {left_out} value(s) at {} left out of the next step's fan-out \
                 (empty, a control character, `.` or `..`, over 8 KiB, the secret, or past its {} values: \
                 the previous step's most pages × for_each.per_page {})",
                at.describe(page),
                f.from,
                f.max_values,
                f.per_page
            );
        }
    }

    /// Where the next run starts once step `at.step` of `at.key` is
    /// done: the next step (with the values found for it, if it fans out)
    /// or, after the last step, the region served. The values also become
    /// the walk's [`Walker::pending`].
    pub(super) fn after_step(&self, w: &mut Walker, at: &Position<'_>) -> Slot {
        let values = w.found.take();
        match self.job.steps.get(at.step + 1) {
            Some(next) => {
                let mut c = at.cursor(Place {
                    step: at.step + 1,
                    ..Place::default()
                });
                if next.for_each.is_some() {
                    c.place.batch = Some(values.clone());
                    w.pending = Some(values);
                }
                Slot::At(Box::new(c))
            }
            None => Slot::Done,
        }
    }

    /// A fan-out step for one region (resumed at batch `page`): one
    /// request per batch of `plan` (`None` when the cursor that resumed it
    /// kept no values), the cursor saved after each. Up to `concurrency`
    /// batches go out side by side ([`Self::fan_out_side_by_side`]),
    /// whether or not a fan-out follows this one.
    pub(super) async fn fan_out(
        &self,
        w: &mut Walker,
        step: &Step,
        at: &Position<'_>,
        page: u32,
        plan: Option<Batches>,
    ) -> Result<Walk> {
        let f: &ForEach = step.for_each.as_ref().expect("a fan-out step");
        let Some(mut plan) = plan else {
            warn!(
                job = self.job.name,
                "{}: the saved cursor holds no values for this fan-out step (the file changed since it was saved?): \
                 it is skipped for this region this round",
                at.describe(page)
            );
            let resume = self.after_step(w, at);
            self.save(at.slot, resume).await;
            return Ok(Walk::Done);
        };
        let early = plan.take_early();
        if !early.is_empty() {
            self.keep_found(&mut w.found, at, page, early, 0);
        }
        self.keep_list(at, &mut plan, w.found.values()).await;
        if self.job.concurrency > 1 {
            return self.fan_out_side_by_side(w, step, f, at, plan).await;
        }
        for k in plan.todo() {
            let joined = plan.joined(k, &f.join);
            let _permit = self.permit().await;
            let fill = self.fill(at, k, &joined);
            // One at a time, batch `k` is the earliest not written: its
            // values go straight after those kept.
            match self
                .fetch_page(Some(&mut w.found), step, &fill, None, at, k)
                .await?
            {
                // Stopped: the cursor already points at this batch.
                None => return Ok(Walk::Stopped),
                Some(Next::Refused(why)) => return Ok(self.give_up(at, &why).await),
                Some(_) => {}
            }
            // Batches an earlier run wrote ahead of this one follow it.
            for (b, values) in plan.mark_written(k, Vec::new()) {
                self.keep_found(&mut w.found, at, b, values, 0);
            }
            if !plan.is_done() {
                let resume = plan.cursor(at, w.found.values());
                self.save(at.slot, Slot::At(Box::new(resume))).await;
            }
        }
        self.fan_out_done(w, at, plan.is_listed()).await
    }

    /// The fan-out at `at` is done: the cursor moves on, and then the list
    /// of its values (`listed`: it has one) is emptied, so the store keeps
    /// at most one list per region and fan-out step, and that one only
    /// while its walk is under way (or a run that stopped may resume it).
    /// Not while the saved cursor may still point into it.
    async fn fan_out_done(&self, w: &mut Walker, at: &Position<'_>, listed: bool) -> Result<Walk> {
        let resume = self.after_step(w, at);
        if self.save(at.slot, resume).await
            && listed
            && let Some(store) = self.meter.store()
        {
            let stored_as = values_key(&self.job.name, at.key, at.step);
            let ended = serde_json::to_string(&ValueList::<[String; 0]> {
                id: String::new(),
                values: [],
            })
            .expect("an empty list serializes");
            if let Err(e) = store.save_cursor(&stored_as, &ended).await {
                // (the next walk of this step takes its place)
                warn!(
                    job = self.job.name,
                    "{}: the fan-out's values stay in the store for now ({e})",
                    at.describe(0)
                );
            }
        }
        Ok(Walk::Done)
    }

    /// Keep the values `plan` has yet to send in the store, once, as the
    /// list its cursors then point into (`batch_at`): after each batch the
    /// cursor saves a position, not every value not yet sent. Only a plan
    /// whose cursor holds its values itself (a new walk, a cursor of an
    /// older build) or whose values were cut afresh gets a list. In the
    /// last case the saved cursor still points into the list under the
    /// same key, so a cursor holding the values is saved first: a kill
    /// between the list's write and the next batch's cursor would
    /// otherwise leave it pointing at a list that is gone, its values
    /// lost. Without a list (a store that did not take it, or that cursor)
    /// the cursor keeps the values, as it did. `found`: what the step's
    /// written pages hold for a fan-out after it.
    async fn keep_list(&self, at: &Position<'_>, plan: &mut Batches, found: &[String]) {
        let values = plan.unlisted().filter(|v| !v.is_empty());
        let (Some(store), Some(values)) = (self.meter.store(), values) else {
            return;
        };
        if plan.replaces_list()
            && !self
                .save(at.slot, Slot::At(Box::new(plan.cursor(at, found))))
                .await
        {
            return;
        }
        let id = format!("r{}.{:016x}", at.run, rand::random::<u64>());
        let text = serde_json::to_string(&ValueList {
            id: id.clone(),
            values,
        })
        .expect("strings always serialize");
        let stored_as = values_key(&self.job.name, at.key, at.step);
        match store.save_cursor(&stored_as, &text).await {
            Ok(()) => plan.listed(id),
            Err(e) => warn!(
                job = self.job.name,
                "{}: the fan-out's values were not kept apart ({e}): the cursor holds them",
                at.describe(0)
            ),
        }
    }

    /// The batches of `plan` up to `concurrency` at once (the run's one
    /// limit, shared with the other regions: [`Self::permit`]), each
    /// charged before it is sent and written under its own number. A stop
    /// sends no new batch; those in flight finish and are written. What
    /// the walk found so far for a fan-out after this one is shared with
    /// the batches in flight while they run.
    async fn fan_out_side_by_side(
        &self,
        w: &mut Walker,
        step: &Step,
        f: &ForEach,
        at: &Position<'_>,
        plan: Batches,
    ) -> Result<Walk> {
        let todo = plan.todo();
        let plan = RefCell::new(plan);
        let found = RefCell::new(std::mem::take(&mut w.found));
        let mut todo = todo.into_iter();
        let mut running = FuturesUnordered::new();
        // Why the rest of the fan-out is skipped, once it is: no batch is
        // sent after, those in flight finish.
        let mut given_up = None;
        loop {
            while running.len() < self.job.concurrency && !self.stopping() && given_up.is_none() {
                let Some(k) = todo.next() else { break };
                let joined = plan.borrow().joined(k, &f.join);
                running.push(self.send_batch(step, at, &plan, &found, k, joined));
            }
            // The first error ends the run at once (the batches in flight
            // are abandoned, their charges kept), as for regions.
            let Some(sent) = running.next().await else {
                break;
            };
            if let Some(why) = sent? {
                given_up.get_or_insert(why);
            }
        }
        drop(running);
        w.found = found.into_inner();
        if let Some(why) = given_up {
            return Ok(self.give_up(at, &why).await);
        }
        if !plan.borrow().is_done() {
            // Stopped: the cursor says the earliest batch not written and
            // those written after it (with what they found).
            return Ok(Walk::Stopped);
        }
        let listed = plan.borrow().is_listed();
        self.fan_out_done(w, at, listed).await
    }

    /// One batch of a fan-out side by side: wait for a place among the
    /// run's requests in flight, charge, send, write page `k`, then save
    /// the cursor with it (the place is held until then, so a kill redoes
    /// at most `concurrency` batches). What the page holds for a fan-out
    /// after this one joins `found` once the batches before it are all
    /// written (see [`Batches::mark_written`]). Why the rest of the
    /// fan-out is to be skipped, if it is.
    async fn send_batch(
        &self,
        step: &Step,
        at: &Position<'_>,
        plan: &RefCell<Batches>,
        found: &RefCell<Found>,
        k: u32,
        joined: String,
    ) -> Result<Option<String>> {
        let _permit = self.permit().await;
        let fill = self.fill(at, k, &joined);
        // This batch's own values, apart until their turn.
        let mut own = Found::default();
        match self
            .fetch_page(Some(&mut own), step, &fill, None, at, k)
            .await?
        {
            None => return Ok(None),
            Some(Next::Refused(why)) => return Ok(Some(why)),
            Some(_) => {}
        }
        let resume = {
            let mut plan = plan.borrow_mut();
            let mut found = found.borrow_mut();
            for (b, values) in plan.mark_written(k, own.take()) {
                self.keep_found(&mut found, at, b, values, 0);
            }
            (!plan.is_done()).then(|| plan.cursor(at, found.values()))
        };
        if let Some(resume) = resume {
            self.save(at.slot, Slot::At(Box::new(resume))).await;
        }
        Ok(None)
    }

    /// The rest of a region's fan-out skipped, its batches refused
    /// (`why`): one error naming it, the region ends (the cursor moves
    /// past it), and the next run starts it afresh.
    async fn give_up(&self, at: &Position<'_>, why: &str) -> Walk {
        let fan_out = match at.key {
            "" => format!("step {}", at.step),
            key => format!("region {key} step {}", at.step),
        };
        error!(
            job = self.job.name,
            "{why}: the rest of {fan_out}'s fan-out is skipped and the region ends here \
             (the next run starts it afresh), the others go on"
        );
        self.save(at.slot, Slot::Done).await;
        Walk::Refused
    }
}

#[cfg(test)]
mod tests {
    use super::values_at;

    #[test]
    fn stars_match_every_element_and_numbers_are_text() {
        let page = br#"{"items":[{"id":{"videoId":"a"}},{"id":{"videoId":7}},{"id":{}},
            {"id":{"videoId":["x"]}},{"id":{"videoId":1.5}}],"a/b":[["p","q"],["r"]]}"#;
        let at = |p: &str| values_at(page, p).unwrap().0;
        assert_eq!(at("/items/*/id/videoId"), ["a", "7", "1.5"]);
        assert_eq!(at("/items/1/id/videoId"), ["7"]);
        assert_eq!(at("/a~1b/*/*"), ["p", "q", "r"]);
        assert!(at("/items/*/nothing").is_empty());
        assert!(at("/items/9/id/videoId").is_empty());
        assert!(values_at(b"{", "/a").is_err());
    }
}
