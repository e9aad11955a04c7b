//! One request of a run, from its charge to its page on disk: charge and
//! send (retries and same-origin redirects charged like any call, the
//! upstream's own quota and a stop signal heeded), then write the page
//! under a free name. Apart from `mod.rs` so the run's state and loop read
//! on their own.

use std::borrow::Cow;
use std::time::Duration;

use tracing::{debug, info, warn};

use super::{Charged, JobRun, PageAnswer};
use crate::atomic_file::{file_mode, write_new};
use crate::config::{Fill, Step, redact};
use crate::runner::Stop;
use crate::runner::lock::RunLock;
use crate::runner::output::{SecretOutsideStrings, mask_page};
use crate::runner::upstream::{self, Answer, Reported};
use crate::{Error, Result};

/// What a page's request came to.
pub(super) enum Fetched {
    /// A page: its body, what it holds at the pagination's pointer, its `Link`.
    Page(PageAnswer),
    /// The upstream refused this request for itself (`true`: a 400, 404,
    /// 410 or 422), or answered what can never be a page: why, the request
    /// named (redacted). Its region (or batch) ends; the others go on.
    Refused(String, bool),
    /// The run stopped cleanly.
    Stopped,
}

impl JobRun<'_> {
    /// Charge and send the page's request until it answers with a page
    /// (its body and next-page token): retries and same-origin redirects
    /// are charged like any call. `given`: the request carries what the
    /// upstream gave (a page token, a next link, a fan-out batch) or its
    /// region, so a refusal of it for itself ends its region (or batch),
    /// not the job.
    pub(super) async fn request_page(
        &self,
        step: &Step,
        fill: &Fill<'_>,
        url: &reqwest::Url,
        given: bool,
    ) -> Result<Fetched> {
        let http = &self.ctx.config.http;
        let shown = redact(url.as_str(), &[fill.secret]);
        let mut attempt = 0;
        // The request in hand: the page's own, or a same-origin redirect's
        // target (each hop charged like any call), and how many hops led there.
        let (mut method, mut target, mut hops) = (step.method.clone(), url.clone(), 0u32);
        loop {
            if self.stopping() {
                return Ok(Fetched::Stopped);
            }
            if self.ctx.shutdown.is_set() {
                self.stop(Stop::Signal);
                return Ok(Fetched::Stopped);
            }
            if self.lock.as_ref().is_some_and(RunLock::is_lost) {
                self.stop(Stop::LockLost);
                return Ok(Fetched::Stopped);
            }
            let shown_target = redact(target.as_str(), &[fill.secret]);
            // Built before its charge: a request that can never be sent
            // costs nothing (nor one whose URL the client cannot put on
            // the wire: longer than a request line's 65,534 bytes, say).
            let request = upstream::request(self.ctx.client, step, fill, &method, &target)
                .and_then(|r| sendable(&target).map(|()| r))
                .map_err(|problem| Error::Upstream {
                    job: self.job.name.clone(),
                    url: crate::runner::report::cut(&shown_target, 200),
                    problem,
                })?;
            let (at, receipt, remaining) = match self.charge(step).await? {
                Charged::Go {
                    at,
                    receipt,
                    remaining,
                } => (at, receipt, remaining),
                Charged::Stop(stop) => {
                    self.stop(stop);
                    return Ok(Fetched::Stopped);
                }
            };
            debug!(job = self.job.name, attempt, "{method} {shown_target}");
            self.report.borrow_mut().calls += 1;
            let mut reported = Reported::default();
            let answer = tokio::select! {
                a = upstream::send(self.ctx.client, request, step, fill, http.max_body, &mut reported) => a,
                () = self.ctx.shutdown.wait() => {
                    info!(job = self.job.name, "stop signal: abandoning the request in flight");
                    if receipt.is_some() {
                        self.keep_estimates(step, "the request was abandoned");
                    }
                    self.stop(Stop::Signal);
                    return Ok(Fetched::Stopped);
                }
            };
            if let Some(receipt) = &receipt {
                self.settle(step, receipt, &reported.actuals).await;
                self.upstream_counts(step, &reported, &remaining).await;
            }
            match answer {
                Answer::Page { body, found, link } => {
                    return Ok(Fetched::Page((body, found, link)));
                }
                Answer::QuotaExhausted {
                    status,
                    reason,
                    retry_after,
                } => {
                    self.upstream_exhausted(status, reason, retry_after, at)
                        .await;
                    return Ok(Fetched::Stopped);
                }
                Answer::Redirect {
                    status,
                    to,
                    method: next,
                } if hops < upstream::MAX_REDIRECTS => {
                    hops += 1;
                    // The hop gets the key in its query as a next link
                    // does: a Location need not repeat the query.
                    let mut to = to;
                    crate::runner::paginate::put_back_secret(step, fill, &mut to);
                    info!(
                        job = self.job.name,
                        "{shown_target}: HTTP {status}, redirect {hops} of at most {} to {} (same origin, charged)",
                        upstream::MAX_REDIRECTS,
                        redact(to.as_str(), &[fill.secret])
                    );
                    (method, target) = (next, to);
                }
                Answer::Redirect { status, to, .. } => {
                    return Err(Error::Upstream {
                        job: self.job.name.clone(),
                        url: shown,
                        problem: format!(
                            "more than {} redirects (the last, HTTP {status}, to {}): not followed",
                            upstream::MAX_REDIRECTS,
                            redact(to.as_str(), &[fill.secret])
                        ),
                    });
                }
                Answer::Fatal(why) => {
                    return Err(Error::Upstream {
                        job: self.job.name.clone(),
                        url: shown,
                        problem: why,
                    });
                }
                Answer::Transient(why) if attempt < http.retries => {
                    let cap = http
                        .backoff
                        .saturating_mul(1 << attempt.min(16))
                        .min(Duration::from_secs(60));
                    // Full jitter: anywhere up to the cap, so hosts do not retry in step.
                    let wait = cap.mul_f64(rand::random_range(0.0..=1.0));
                    attempt += 1;
                    // A retry is the page's request again, from its own URL.
                    (method, target, hops) = (step.method.clone(), url.clone(), 0);
                    warn!(
                        job = self.job.name,
                        "{shown_target}: {why}; retry {attempt} of {} in {}",
                        http.retries,
                        crate::timefmt::fmt_wait(wait)
                    );
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = self.ctx.shutdown.wait() => {}
                    }
                }
                Answer::Transient(why) => {
                    return Err(Error::Upstream {
                        job: self.job.name.clone(),
                        url: shown,
                        problem: format!("{why}, after {} attempts", attempt + 1),
                    });
                }
                Answer::Unusable(why) => {
                    let shown = crate::runner::report::cut(&shown_target, 200);
                    return Ok(Fetched::Refused(format!("{shown}: {why}"), false));
                }
                Answer::Refused { status, excerpt }
                    if given && upstream::refused_for_itself(status) =>
                {
                    let shown = crate::runner::report::cut(&shown_target, 200);
                    return Ok(Fetched::Refused(
                        format!(
                            "{shown}: the upstream refused the request with HTTP {status}: {excerpt}; not retried"
                        ),
                        true,
                    ));
                }
                Answer::Refused { status, excerpt } => {
                    return Err(Error::Upstream {
                        job: self.job.name.clone(),
                        url: shown,
                        problem: format!(
                            "the upstream refused the request with HTTP {status}: {excerpt}"
                        ),
                    });
                }
            }
        }
    }

    /// Write one page file, the secret masked if the upstream echoed it,
    /// under a name no earlier page has; its body back once written. On a
    /// blocking thread: its fsyncs must not hold up the other regions
    /// walked on this task.
    pub(super) async fn write_page(
        &self,
        fill: &Fill<'_>,
        name: &str,
        body: Vec<u8>,
    ) -> Result<Written> {
        let mode = file_mode().map_err(Error::Usage)?;
        let (dir, job, file) = (
            self.job.output.clone(),
            self.job.name.clone(),
            name.to_string(),
        );
        let secret = fill.secret.clone();
        let written = tokio::task::spawn_blocking(move || {
            // An upstream that echoes the key (in a next-page link, say) does
            // not get it into the page file: masked there like everywhere
            // else, inside strings only, so that the page stays JSON.
            let text = String::from_utf8_lossy(&body);
            let masked = match mask_page(&text, &secret) {
                Ok(Cow::Borrowed(_)) => None,
                Ok(Cow::Owned(m)) => Some(m.into_bytes()),
                Err(SecretOutsideStrings) => return (Ok(None), false, Vec::new()),
            };
            let bytes = masked.as_deref().unwrap_or(&body);
            let written = write_new(&dir, &job, &file, bytes, mode).map(Some);
            (written, masked.is_some(), body)
        })
        .await;
        let (written, masked, body) = written.unwrap_or_else(|e| {
            (
                Err(std::io::Error::other(format!("the writer failed: {e}"))),
                false,
                Vec::new(),
            )
        });
        if masked {
            warn!(
                job = self.job.name,
                "the page carries the credential's secret (the upstream echoed it): masked as *** in {name}"
            );
        }
        let path = written.map_err(|source| {
            let path = self.job.output.join(name);
            if source.kind() == std::io::ErrorKind::AlreadyExists {
                Error::PageExists {
                    job: self.job.name.clone(),
                    path,
                }
            } else {
                Error::Io {
                    what: "write",
                    path,
                    source,
                }
            }
        })?;
        let Some(path) = path else {
            // As a page the upstream refuses for itself: asking again at
            // once gets the same page, so its region (or batch) ends.
            return Ok(Written::Refused(
                "the page holds the credential's secret outside a JSON string (inside a number, say): \
                 not written, since *** there would leave a file that is not JSON"
                    .into(),
            ));
        };
        self.report.borrow_mut().pages += 1;
        self.progress();
        debug!(job = self.job.name, "wrote {}", path.display());
        Ok(Written::Page(body))
    }
}

/// What became of a page sent to its file.
pub(super) enum Written {
    /// Written: its body, for what is read from it after.
    Page(Vec<u8>),
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
