//! One request of a run, from its charge to its page on disk: charge and
//! send (retries and same-origin redirects charged like any call, the
//! upstream's own quota and a stop signal heeded), then write the page
//! under a free name. Apart from `mod.rs` so the run's state and loop read
//! on their own.

use std::borrow::Cow;

use tracing::{debug, info, warn};

use super::{JobRun, PageAnswer};
use crate::config::{Fill, Step, redact};
use crate::ledger::{Micros, Receipt, Remaining};
use crate::runner::Stop;
use crate::runner::lock::RunLock;
use crate::runner::meter::Charged;
use crate::sink::folder::{SecretOutsideStrings, mask_page};
use crate::sink::{OutputError, Outputs, Page, ResultsHeld, Wrote};
use crate::timefmt::rfc3339;
use crate::upstream::{self, AfterAttempt, Answer, Attempts, Reported};
use crate::{Error, Result};

/// What a page's request came to.
pub(super) enum Fetched {
    /// A page.
    Page(PageAnswer),
    /// The upstream refused this request for itself (`Some`: its status, 0 when
    /// none, and excerpt, as the table of answers says), or answered what can never be
    /// a page: why, the request named (redacted). Its region (or batch)
    /// ends; the others go on. `true`: the upstream's own trouble (a 5xx,
    /// 408 or network error past the retries) ended it.
    Refused(String, Option<(u16, String)>, bool),
    /// The run stopped cleanly.
    Stopped,
    /// 304 to a conditional request: the page is as it was.
    NotModified,
}

impl JobRun<'_> {
    /// Charge and send the page's request until it answers with a page
    /// (its body and next-page token): retries and same-origin redirects
    /// are charged like any call, as [`Attempts`] says. `given`: the
    /// request carries what the upstream gave (a page token, a next link,
    /// a fan-out batch) or its region, so a refusal of it for itself ends
    /// its region (or batch), not the job.
    pub(super) async fn request_page(
        &self,
        step: &Step,
        fill: &Fill<'_>,
        url: &reqwest::Url,
        given: bool,
    ) -> Result<Fetched> {
        let mut attempts = Attempts::new(step, fill, url, given, &self.ctx.config.http);
        let validators = self.validators(step, fill, url);
        loop {
            if self.halted() {
                return Ok(Fetched::Stopped);
            }
            // Built before its charge: a request that can never be sent
            // costs nothing.
            let mut request = build(self.ctx.client, &self.job.name, step, fill, &attempts)?;
            // (the validators are the page's own URL's: not a redirect hop's)
            if let Some(v) = validators.as_ref().filter(|_| attempts.target() == url) {
                ask_if_changed(&mut request, v);
            }
            let Some((at, receipt, remaining)) = self.charge_attempt(step).await? else {
                return Ok(Fetched::Stopped);
            };
            debug!(
                job = self.job.name,
                attempt = attempts.attempt(),
                "{} {}",
                attempts.method(),
                attempts.shown()
            );
            let Some((answer, headers)) = self
                .exchange(step, fill, request, (at, receipt.as_ref()), &remaining)
                .await
            else {
                return Ok(Fetched::Stopped);
            };
            match attempts.next(answer) {
                AfterAttempt::Page { body, found, link } => {
                    let fresh = validators_of(headers.as_ref());
                    return Ok(Fetched::Page(PageAnswer {
                        body,
                        found,
                        link,
                        fresh,
                    }));
                }
                AfterAttempt::NotModified => return Ok(Fetched::NotModified),
                AfterAttempt::QuotaSpent {
                    status,
                    reason,
                    retry_after,
                } => {
                    let until = (self.meter).block(status, &reason, retry_after, at).await;
                    // (after the store's word: a backoff's length is the store's)
                    warn!(
                        job = self.job.name,
                        "upstream answered {status} ({reason}): its own quota is spent; blocking credential {} until {}",
                        self.cred.name,
                        crate::timefmt::local_datetime(until)
                    );
                    self.report
                        .borrow_mut()
                        .stop_with(Stop::UpstreamExhausted { reason, until });
                    return Ok(Fetched::Stopped);
                }
                AfterAttempt::Follow { note } => info!(job = self.job.name, "{note}"),
                AfterAttempt::Retry { wait, note } => {
                    warn!(job = self.job.name, "{note}");
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = self.ctx.shutdown.wait() => {}
                    }
                }
                AfterAttempt::Refused {
                    why,
                    for_itself,
                    outage,
                } => return Ok(Fetched::Refused(why, for_itself, outage)),
                AfterAttempt::Fail(problem) => {
                    return Err(Error::Upstream {
                        job: self.job.name.clone(),
                        url: redact(url.as_str(), &[fill.secret]),
                        problem,
                    });
                }
            }
        }
    }

    /// Charge one attempt of `step`: when (the ledger's time), its receipt
    /// and what is left, each `None` unmetered; `None` when the run stops
    /// instead (the quota said no, or the store is gone and the policy
    /// says stop).
    ///
    /// A refusal whose units free up within the job's bound (`max_wait`,
    /// `run --wait`) is waited for and charged again ([`super::waiting`]):
    /// one request waits, those refused or charging meanwhile line up
    /// behind it.
    async fn charge_attempt(&self, step: &Step) -> Result<Option<Attempt>> {
        let mut turn = None;
        loop {
            if turn.is_none() && self.waiting.anyone() {
                turn = Some(self.waiting.turn().await);
                // (a stop may have come while in line)
                if self.halted() {
                    return Ok(None);
                }
            }
            let charged = self.meter.charge(step).await?;
            self.report.borrow_mut().count_charge(&charged);
            let stop = match charged {
                Charged::Go {
                    at,
                    receipt,
                    remaining,
                    ..
                } => return Ok(Some((Some(at), Some(receipt), remaining))),
                Charged::Unmetered => return Ok(Some((None, None, Vec::new()))),
                Charged::Stop(stop) => stop,
            };
            let now = chrono::Utc::now().timestamp_micros();
            let Some(pause) = self.waiting.pause(&stop, now) else {
                self.report.borrow_mut().stop_with(stop);
                return Ok(None);
            };
            if turn.is_none() {
                // Another request waits already: in line behind it, then
                // charge again (this refusal's time is stale by then).
                let behind = self.waiting.anyone();
                turn = Some(self.waiting.turn().await);
                if self.halted() {
                    return Ok(None);
                }
                if behind {
                    continue;
                }
            }
            let job = (self.job.name.as_str(), self.state());
            (self.waiting)
                .sit_out(job, &self.progress, self.ctx.shutdown, (step, &stop, pause))
                .await;
            if self.halted() {
                return Ok(None);
            }
        }
    }

    /// Send one charged request (charged at `at`, its `receipt`) and settle
    /// its charge; `None` when a stop signal abandoned it in flight (its
    /// estimates kept, the stop recorded).
    async fn exchange(
        &self,
        step: &Step,
        fill: &Fill<'_>,
        request: reqwest::Request,
        (at, receipt): (Option<Micros>, Option<&Receipt>),
        remaining: &[Remaining],
    ) -> Option<(Answer, Option<reqwest::header::HeaderMap>)> {
        self.report.borrow_mut().calls += 1;
        let mut reported = Reported::default();
        let max_body = self.ctx.config.http.max_body;
        let answer = tokio::select! {
            a = upstream::send(self.ctx.client, request, step, fill, max_body, &mut reported) => a,
            () = self.ctx.shutdown.wait() => {
                info!(job = self.job.name, "stop signal: abandoning the request in flight");
                if receipt.is_some() {
                    let kept = self.meter.keep_estimates(step, "the request was abandoned");
                    self.report.borrow_mut().estimates_kept += kept;
                }
                self.report.borrow_mut().stop_with(Stop::Signal);
                return None;
            }
        };
        let unchanged = matches!(answer, Answer::NotModified);
        if unchanged {
            self.report.borrow_mut().not_modified += 1;
        }
        if let Some(receipt) = receipt {
            match step.not_modified.filter(|_| unchanged) {
                Some(units) => {
                    let settled = self.meter.settle_to(step, receipt, units).await;
                    self.report.borrow_mut().count_not_modified(&settled);
                }
                None => {
                    let settled = self.meter.settle(step, receipt, &reported.actuals).await;
                    self.report.borrow_mut().count_settle(&settled);
                }
            }
            self.meter.upstream_counts(step, &reported, remaining).await;
        }
        // (a refusal blocks as its answer says: upstream_exhausted)
        if !matches!(answer, Answer::QuotaExhausted { .. }) {
            self.meter.upstream_spent(&reported, at).await;
        }
        Some((answer, reported.headers))
    }

    /// Whether the run stops before another request is charged: stopped
    /// already, a stop signal, or the run's lock lost (the stop recorded).
    fn halted(&self) -> bool {
        if self.report.borrow().stopping()
            || self.feed.borrow().as_ref().is_some_and(|f| f.stopping())
        {
            return true;
        }
        if self.ctx.shutdown.is_set() {
            self.report.borrow_mut().stop_with(Stop::Signal);
            return true;
        }
        if self.lock.as_ref().is_some_and(RunLock::is_lost) {
            self.report.borrow_mut().stop_with(Stop::LockLost);
            return true;
        }
        false
    }

    /// Write one page to the job's outputs, the secret masked if the
    /// upstream echoed it: its file under a name no earlier page has, its
    /// rows (a page of the last step) committed; its body back once
    /// written. On a blocking thread: its fsyncs must not hold up the other
    /// regions walked on this task.
    pub(super) async fn write_page(
        &self,
        fill: &Fill<'_>,
        name: &str,
        (key, step): (&str, usize),
        body: Vec<u8>,
    ) -> Result<Written> {
        let secret = fill.secret.clone();
        let outputs = self.outputs.clone();
        let to = PageTo {
            key: key.to_string(),
            file: name.to_string(),
            last_step: step + 1 == self.job.steps.len(),
            fetched_at: rfc3339(chrono::Utc::now().timestamp_micros()),
            run: self.feed.borrow().as_ref().map_or(0, |f| f.run),
        };
        let written =
            tokio::task::spawn_blocking(move || write_blocking(&outputs, to, &secret, body));
        let (written, masked, body) = written.await.unwrap_or_else(|e| {
            let e = std::io::Error::other(format!("the writer failed: {e}"));
            (Err(OutputError::File(e)), false, Vec::new())
        });
        if masked {
            warn!(
                job = self.job.name,
                "the page carries the credential's secret (the upstream echoed it): masked as *** in {name}"
            );
        }
        let config = &self.ctx.config.file;
        let Some(wrote) = written.map_err(|e| super::outputs::error(self.job, config, name, e))?
        else {
            // As a page the upstream refuses for itself: asking again at
            // once gets the same page, so its region (or batch) ends.
            return Ok(Written::Refused(
                "the page holds the credential's secret outside a JSON string (inside a number, say): \
                 not written, since *** there would leave a file that is not JSON"
                    .into(),
            ));
        };
        let mut report = self.report.borrow_mut();
        if let Some(rows) = wrote.rows {
            super::outputs::say_rows(self.job, key, name, &rows);
            if let Some(r) = report.rows.as_mut() {
                r.upserted += rows.rows;
                r.new += rows.new;
                r.without_key += rows.without_key;
                r.unfit.add(&rows.unfit);
            }
            report.pages_without_items += u64::from(rows.no_items);
        }
        report.pages += 1;
        for (sink, n) in &wrote.upserted {
            *report.upserted.entry(sink).or_default() += n;
        }
        drop(report);
        (self.progress).draw(&self.report.borrow(), &mut self.round.borrow_mut());
        if let Some(path) = &wrote.path {
            debug!(job = self.job.name, "wrote {}", path.display());
        }
        Ok(Written::Page(body, wrote.held))
    }
}

/// The request of the attempt `attempts` is at; an error when it can
/// never be sent (nor one whose URL the client cannot put on the wire:
/// longer than a request line's 65,534 bytes, say).
fn build(
    client: &reqwest::Client,
    job: &str,
    step: &Step,
    fill: &Fill<'_>,
    attempts: &Attempts<'_>,
) -> Result<reqwest::Request> {
    let (method, target) = (attempts.method(), attempts.target());
    upstream::request(client, step, fill, method, target)
        .and_then(|r| sendable(target).map(|()| r))
        .map_err(|problem| Error::Upstream {
            job: job.to_string(),
            url: crate::logging::cut(&attempts.shown(), 200),
            problem,
        })
}

/// A page to write, but for its body.
struct PageTo {
    key: String,
    file: String,
    last_step: bool,
    fetched_at: String,
    run: u64,
}

/// On the writer's thread: the page, its secret masked, to the outputs;
/// what was written (`None`: the secret outside a string, nothing
/// written) and whether the secret was masked, with the body back.
fn write_blocking(
    outputs: &Outputs,
    to: PageTo,
    secret: &crate::config::Secret,
    body: Vec<u8>,
) -> (Result<Option<Wrote>, OutputError>, bool, Vec<u8>) {
    // An upstream that echoes the key (in a next-page link, say) does
    // not get it into the page file: masked there like everywhere
    // else, inside strings only, so that the page stays JSON.
    let text = String::from_utf8_lossy(&body);
    let masked = match mask_page(&text, secret) {
        Ok(Cow::Borrowed(_)) => None,
        Ok(Cow::Owned(m)) => Some(m.into_bytes()),
        Err(SecretOutsideStrings) => return (Ok(None), false, Vec::new()),
    };
    let page = Page {
        key: &to.key,
        file: &to.file,
        body: masked.as_deref().unwrap_or(&body),
        last_step: to.last_step,
        fetched_at: &to.fetched_at,
        run: to.run,
    };
    let written = outputs.write(&page).map(Some);
    (written, masked.is_some(), body)
}

/// A charged attempt: the ledger's time, the receipt, what is left.
type Attempt = (
    Option<crate::ledger::Micros>,
    Option<Receipt>,
    Vec<Remaining>,
);

/// What became of a page sent to its file.
pub(super) enum Written {
    /// Written: its body, for what is read from it after, and where it is.
    Page(Vec<u8>, ResultsHeld),
    /// Not written, and never will be as it stands: why.
    Refused(String),
}

/// Whether the HTTP client can send a request to `url` (as `http::Uri`,
/// which reqwest turns it into at the last moment): else why not.
pub(super) fn sendable(url: &reqwest::Url) -> std::result::Result<(), String> {
    http::Uri::try_from(url.as_str()).map(|_| ()).map_err(|e| {
        format!(
            "the URL cannot be sent ({e}; {} bytes, a request line holds at most 65,534)",
            url.as_str().len()
        )
    })
}

impl JobRun<'_> {
    /// The validators the page's request sends (see
    /// [`Conditional::validators`](super::conditional::Conditional::validators));
    /// those whose page is gone are counted and said once.
    fn validators(
        &self,
        step: &Step,
        fill: &Fill<'_>,
        url: &reqwest::Url,
    ) -> Option<super::conditional::Validators> {
        use super::conditional::Lookup;
        match self
            .conditional
            .validators(step, fill, url, |held| self.outputs.holds(held))
        {
            Lookup::None => None,
            Lookup::Send(v) => Some(v),
            Lookup::Lost => {
                let mut report = self.report.borrow_mut();
                if report.validators_lost == 0 {
                    warn!(
                        job = self.job.name,
                        "what a page's kept validators stand for is gone (its page file deleted, its rows dropped or \
                         deleted, or another table named): such pages are asked in full, not conditionally"
                    );
                }
                report.validators_lost += 1;
                None
            }
        }
    }
}

/// Ask for the page only if it changed since the answer `v` came from.
fn ask_if_changed(request: &mut reqwest::Request, v: &super::conditional::Validators) {
    use reqwest::header::{HeaderValue, IF_MODIFIED_SINCE, IF_NONE_MATCH};
    let headers = request.headers_mut();
    if let Some(etag) = v
        .etag
        .as_deref()
        .and_then(|e| HeaderValue::from_str(e).ok())
    {
        headers.insert(IF_NONE_MATCH, etag);
    } else if let Some(m) = v
        .modified
        .as_deref()
        .and_then(|m| HeaderValue::from_str(m).ok())
    {
        // (RFC 9110 §13.1.3: ignored beside If-None-Match, so sent alone)
        headers.insert(IF_MODIFIED_SINCE, m);
    }
}

/// An answer's `ETag` and `Last-Modified`, as text.
fn validators_of(headers: Option<&reqwest::header::HeaderMap>) -> (Option<String>, Option<String>) {
    use reqwest::header::{ETAG, LAST_MODIFIED};
    let get = |name| {
        headers
            .and_then(|h| h.get(name))
            .and_then(|v: &reqwest::header::HeaderValue| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    (get(ETAG), get(LAST_MODIFIED))
}
