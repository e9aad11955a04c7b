//! One page's request through its attempts: given what each attempt came
//! to (an [`Answer`]), what the runner does next. A transient failure is
//! sent again (charged) after a backoff, from the page's own URL; a
//! same-origin redirect is followed (charged) up to [`MAX_REDIRECTS`]
//! hops; anything else ends the request. No I/O here: the runner charges,
//! sends, waits and logs what [`AfterAttempt`] says, so this reads, and is tested,
//! on its own.

use std::time::Duration;

use super::Answer;
use super::answers::{self, Does};
use crate::config::{Fill, HttpSettings, Step, redact};
use crate::page_scan::Found;

/// Same-origin redirects followed for one page, at most (each one charged).
pub const MAX_REDIRECTS: u32 = 3;

/// The longest a retry waits, however many came before it.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// What comes after an attempt's answer.
#[derive(Debug)]
pub enum AfterAttempt {
    /// Charge and send the page's own request again once `wait` is over;
    /// `note` (a warning) says why and when.
    Retry { wait: Duration, note: String },
    /// Charge and send the redirect's target, now [`Attempts::target`];
    /// `note` says where.
    Follow { note: String },
    /// Done: the page, what it holds at the pagination's pointer, its `Link`.
    Page {
        body: Vec<u8>,
        found: Option<Found>,
        link: Option<String>,
    },
    /// The upstream's own quota is spent: the credential is to be blocked.
    QuotaSpent {
        status: u16,
        reason: String,
        retry_after: Option<Duration>,
    },
    /// This request ends, and with it only its region (or batch): why,
    /// naming the request (redacted). `for_itself`: the upstream refused
    /// it for itself (see [`refused_for_itself`]), with this status and
    /// excerpt of its answer (redacted).
    Refused {
        why: String,
        for_itself: Option<(u16, String)>,
        /// Ended by the upstream's own trouble (a 5xx, a 408, a network
        /// error past the retries), not by an answer about the request.
        outage: bool,
    },
    /// The job stops: the problem, said of the page's own URL.
    Fail(String),
    /// 304 to a conditional request: nothing new.
    NotModified,
}

/// The attempts of one page's request: the request in hand (the page's
/// own, or a redirect's target), the retries and hops spent, and the
/// backoff policy.
pub struct Attempts<'a> {
    step: &'a Step,
    fill: &'a Fill<'a>,
    url: &'a reqwest::Url,
    /// The request carries what the upstream gave (a page token, a next
    /// link, a fan-out batch) or its region: a refusal of it for itself
    /// ends its region (or batch), not the job.
    given: bool,
    retries: u32,
    backoff: Duration,
    /// A factor in 0..=1 for each wait (full jitter: hosts that failed
    /// together do not retry in step).
    jitter: fn() -> f64,
    method: reqwest::Method,
    target: reqwest::Url,
    attempt: u32,
    hops: u32,
}

impl<'a> Attempts<'a> {
    /// The first attempt of the page's request, `url` with the step's method.
    pub fn new(
        step: &'a Step,
        fill: &'a Fill<'a>,
        url: &'a reqwest::Url,
        given: bool,
        http: &HttpSettings,
    ) -> Self {
        Self {
            step,
            fill,
            url,
            given,
            retries: http.retries,
            backoff: http.backoff,
            jitter: || rand::random_range(0.0..=1.0),
            method: step.method.clone(),
            target: url.clone(),
            attempt: 0,
            hops: 0,
        }
    }

    /// The method of the request in hand.
    pub fn method(&self) -> &reqwest::Method {
        &self.method
    }

    /// The URL of the request in hand.
    pub fn target(&self) -> &reqwest::Url {
        &self.target
    }

    /// Retries so far (0: the first attempt).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The URL of the request in hand, the secret masked.
    pub fn shown(&self) -> String {
        self.redact(&self.target)
    }

    /// What to do after the request in hand answered `answer`.
    pub fn next(&mut self, answer: Answer) -> AfterAttempt {
        let shown = self.shown();
        match answer {
            Answer::Page { body, found, link } => AfterAttempt::Page { body, found, link },
            Answer::NotModified => AfterAttempt::NotModified,
            Answer::QuotaExhausted {
                status,
                reason,
                retry_after,
            } => AfterAttempt::QuotaSpent {
                status,
                reason,
                retry_after,
            },
            Answer::Redirect { status, to, method } if self.hops < MAX_REDIRECTS => {
                self.hops += 1;
                // The hop gets the key in its query as a next link does:
                // a Location need not repeat the query.
                let mut to = to;
                crate::upstream::paginate::put_back_secret(self.step, self.fill, &mut to);
                let note = format!(
                    "{shown}: HTTP {status}, redirect {} of at most {MAX_REDIRECTS} to {} (same origin, charged)",
                    self.hops,
                    self.redact(&to)
                );
                (self.method, self.target) = (method, to);
                AfterAttempt::Follow { note }
            }
            Answer::Redirect { status, to, .. } => {
                let why = format!(
                    "more than {MAX_REDIRECTS} redirects (the last, HTTP {status}, to {}): not followed",
                    self.redact(&to)
                );
                self.ends((status, why.clone()), why, false)
            }
            Answer::Fatal(why) => self.ends((0, why.clone()), why, false),
            Answer::Transient(why) if self.attempt < self.retries => {
                let wait = cap(self.backoff, self.attempt).mul_f64((self.jitter)());
                self.attempt += 1;
                // A retry is the page's request again, from its own URL.
                (self.method, self.target, self.hops) =
                    (self.step.method.clone(), self.url.clone(), 0);
                let note = format!(
                    "{shown}: {why}; retry {} of {} in {}",
                    self.attempt,
                    self.retries,
                    crate::timefmt::fmt_wait(wait)
                );
                AfterAttempt::Retry { wait, note }
            }
            // (an input's own: the rest of the list goes on; a region's
            // or batch's is most likely the upstream's, met by them all,
            // and the cursor stays on it for the next tick)
            Answer::Transient(why) => {
                let why = format!("{why}, after {} attempts", self.attempt + 1);
                if self.fill.input.is_some() {
                    self.ends((0, why.clone()), why, true)
                } else {
                    AfterAttempt::Fail(why)
                }
            }
            Answer::Unusable(why) => AfterAttempt::Refused {
                why: format!("{}: {why}", cut(&shown)),
                for_itself: None,
                outage: false,
            },
            Answer::Refused {
                status,
                excerpt,
                credential: true,
            } => AfterAttempt::Fail(format!(
                "the upstream refused the credential with HTTP {status}: {excerpt}"
            )),
            Answer::Refused {
                status,
                excerpt,
                credential: false,
            } => {
                let why = format!("the upstream refused the request with HTTP {status}: {excerpt}");
                self.ends((status, excerpt), why, false)
            }
        }
    }

    /// The request in hand ends, as the table of answers says
    /// ([`answers::ends`]): its key, when the request carries it (recorded
    /// as failed for itself with `status` and an excerpt of the answer;
    /// status 0: none said one), else the job, for `why`; `outage`: the
    /// upstream's own trouble ended it.
    fn ends(&self, for_itself: (u16, String), why: String, outage: bool) -> AfterAttempt {
        match answers::ends(self.given) {
            Does::EndsKey => AfterAttempt::Refused {
                why: format!("{}: {why}; not retried", cut(&self.shown())),
                for_itself: Some(for_itself),
                outage,
            },
            _ => AfterAttempt::Fail(why),
        }
    }

    fn redact(&self, url: &reqwest::Url) -> String {
        redact(url.as_str(), &[self.fill.secret])
    }
}

/// The longest wait before retry `attempt + 1`: the backoff doubled per
/// retry before it, at most [`MAX_BACKOFF`].
fn cap(backoff: Duration, attempt: u32) -> Duration {
    backoff
        .saturating_mul(1 << attempt.min(16))
        .min(MAX_BACKOFF)
}

/// A URL as a message names the request: at most 200 characters.
fn cut(shown: &str) -> String {
    crate::logging::cut(shown, 200)
}

#[cfg(test)]
mod tests;
