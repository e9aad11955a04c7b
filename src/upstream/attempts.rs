//! One page's request through its attempts: given what each attempt came
//! to (an [`Answer`]), what the runner does next. A transient failure is
//! sent again (charged) after a backoff, from the page's own URL; a
//! same-origin redirect is followed (charged) up to [`MAX_REDIRECTS`]
//! hops; anything else ends the request. No I/O here: the runner charges,
//! sends, waits and logs what [`Next`] says, so this reads, and is tested,
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
pub enum Next {
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
    pub fn next(&mut self, answer: Answer) -> Next {
        let shown = self.shown();
        match answer {
            Answer::Page { body, found, link } => Next::Page { body, found, link },
            Answer::NotModified => Next::NotModified,
            Answer::QuotaExhausted {
                status,
                reason,
                retry_after,
            } => Next::QuotaSpent {
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
                Next::Follow { note }
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
                Next::Retry { wait, note }
            }
            // (an input's own: the rest of the list goes on; a region's
            // or batch's is most likely the upstream's, met by them all,
            // and the cursor stays on it for the next tick)
            Answer::Transient(why) => {
                let why = format!("{why}, after {} attempts", self.attempt + 1);
                if self.fill.input.is_some() {
                    self.ends((0, why.clone()), why, true)
                } else {
                    Next::Fail(why)
                }
            }
            Answer::Unusable(why) => Next::Refused {
                why: format!("{}: {why}", cut(&shown)),
                for_itself: None,
                outage: false,
            },
            Answer::Refused {
                status,
                excerpt,
                credential: true,
            } => Next::Fail(format!(
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
    fn ends(&self, for_itself: (u16, String), why: String, outage: bool) -> Next {
        match answers::ends(self.given) {
            Does::EndsKey => Next::Refused {
                why: format!("{}: {why}; not retried", cut(&self.shown())),
                for_itself: Some(for_itself),
                outage,
            },
            _ => Next::Fail(why),
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
mod tests {
    use super::*;
    use crate::config::{Config, Secret, Secrets};

    fn config() -> Config {
        let yaml = r#"
credentials:
  main: { secret: { env: UNUSED }, pools: { units: [ { limit: 10, per: 1h } ] } }
endpoints:
  e: { cost: 1 }
http: { retries: 3, backoff: 2s }
jobs:
  j:
    credential: main
    steps:
      - endpoint: e
        request: { url: "https://api.example.com/v3/videos", query: { part: id, key: "{secret}" } }
    output: out
"#;
        Config::parse(std::path::Path::new("q.yaml"), yaml, Secrets::Skip).unwrap()
    }

    fn fill(secret: &Secret) -> Fill<'_> {
        Fill {
            region: "",
            secret,
            job: "j",
            step: 0,
            page: 0,
            batch: "",
            input: None,
        }
    }

    fn url(s: &str) -> reqwest::Url {
        reqwest::Url::parse(s).unwrap()
    }

    const PAGE: &str = "https://api.example.com/v3/videos?part=id&key=SEKRET";

    fn page() -> Answer {
        Answer::Page {
            body: b"{}".to_vec(),
            found: None,
            link: None,
        }
    }

    fn hop(to: &str) -> Answer {
        Answer::Redirect {
            status: 302,
            to: url(to),
            method: reqwest::Method::GET,
        }
    }

    /// Drive one page's attempts, the widest jitter (each wait its cap).
    fn attempts<'a>(
        config: &'a Config,
        fill: &'a Fill<'a>,
        page: &'a reqwest::Url,
        given: bool,
    ) -> Attempts<'a> {
        let mut a = Attempts::new(&config.jobs[0].steps[0], fill, page, given, &config.http);
        a.jitter = || 1.0;
        a
    }

    #[test]
    fn a_server_error_is_retried_after_a_backoff_then_the_page_is_done() {
        let (config, secret) = (config(), Secret::new("SEKRET".into()));
        let (fill, own) = (fill(&secret), url(PAGE));
        let mut a = attempts(&config, &fill, &own, false);
        match a.next(Answer::Transient("HTTP 502 Bad Gateway".into())) {
            Next::Retry { wait, note } => {
                assert_eq!(wait, Duration::from_secs(2));
                assert_eq!(
                    note,
                    format!(
                        "https://api.example.com/v3/videos?part=id&key=***: HTTP 502 Bad Gateway; retry 1 of 3 in {}",
                        crate::timefmt::fmt_wait(wait)
                    )
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!((a.attempt(), a.target().as_str()), (1, PAGE));
        assert!(matches!(a.next(page()), Next::Page { .. }));
    }

    #[test]
    fn retries_double_their_wait_and_end_the_job_once_spent() {
        let (config, secret) = (config(), Secret::new("SEKRET".into()));
        let (fill, own) = (fill(&secret), url(PAGE));
        let mut a = attempts(&config, &fill, &own, true);
        let mut waits = Vec::new();
        for _ in 0..3 {
            match a.next(Answer::Transient("timed out".into())) {
                Next::Retry { wait, .. } => waits.push(wait.as_secs()),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(waits, [2, 4, 8]);
        match a.next(Answer::Transient("timed out".into())) {
            Next::Fail(why) => assert_eq!(why, "timed out, after 4 attempts"),
            other => panic!("{other:?}"),
        }
        // However many retries, a wait stays under a minute.
        assert_eq!(cap(Duration::from_secs(2), 40), MAX_BACKOFF);
    }

    #[test]
    fn a_retry_waits_somewhere_up_to_its_cap() {
        let (config, secret) = (config(), Secret::new("SEKRET".into()));
        let (fill, own) = (fill(&secret), url(PAGE));
        let mut a = Attempts::new(&config.jobs[0].steps[0], &fill, &own, false, &config.http);
        for cap in [2, 4, 8] {
            match a.next(Answer::Transient("HTTP 503".into())) {
                Next::Retry { wait, .. } => assert!(wait <= Duration::from_secs(cap), "{wait:?}"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn three_hops_are_followed_with_the_key_put_back_and_a_fourth_ends_the_job() {
        let (config, secret) = (config(), Secret::new("SEKRET".into()));
        let (fill, own) = (fill(&secret), url(PAGE));
        let mut a = attempts(&config, &fill, &own, false);
        for n in 1..=3 {
            match a.next(hop(&format!("https://api.example.com/v{n}/videos?part=id"))) {
                Next::Follow { note } => {
                    assert!(
                        note.ends_with(&format!(
                            "HTTP 302, redirect {n} of at most 3 to https://api.example.com/v{n}/videos?part=id&key=*** (same origin, charged)"
                        )),
                        "{note}"
                    );
                    assert!(!note.contains("SEKRET"), "{note}");
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(
                a.target().as_str(),
                format!("https://api.example.com/v{n}/videos?part=id&key=SEKRET")
            );
        }
        match a.next(hop("https://api.example.com/v4/videos?key=SEKRET")) {
            Next::Fail(why) => assert_eq!(
                why,
                "more than 3 redirects (the last, HTTP 302, to https://api.example.com/v4/videos?key=***): not followed"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_retry_starts_again_from_the_pages_own_url_with_its_hops_anew() {
        let (config, secret) = (config(), Secret::new("SEKRET".into()));
        let (fill, own) = (fill(&secret), url(PAGE));
        let mut a = attempts(&config, &fill, &own, false);
        for _ in 0..3 {
            assert!(matches!(
                a.next(hop("https://api.example.com/elsewhere")),
                Next::Follow { .. }
            ));
        }
        match a.next(Answer::Transient("HTTP 500".into())) {
            Next::Retry { note, .. } => assert!(
                note.starts_with("https://api.example.com/elsewhere?key=***: HTTP 500; retry 1"),
                "{note}"
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(a.target().as_str(), PAGE);
        assert!(matches!(
            a.next(hop("https://api.example.com/elsewhere")),
            Next::Follow { .. }
        ));
    }

    #[test]
    fn a_429_with_retry_after_means_the_upstream_quota_is_spent() {
        let (config, secret) = (config(), Secret::new("SEKRET".into()));
        let (fill, own) = (fill(&secret), url(PAGE));
        let mut a = attempts(&config, &fill, &own, false);
        match a.next(Answer::QuotaExhausted {
            status: 429,
            reason: "too many requests".into(),
            retry_after: Some(Duration::from_secs(7)),
        }) {
            Next::QuotaSpent {
                status: 429,
                reason,
                retry_after: Some(d),
            } => {
                assert_eq!((reason.as_str(), d.as_secs()), ("too many requests", 7));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(a.attempt(), 0);
    }

    #[test]
    fn a_refusal_ends_its_region_only_when_the_request_carries_what_upstream_gave() {
        let (config, secret) = (config(), Secret::new("SEKRET".into()));
        let (fill, own) = (fill(&secret), url(PAGE));
        let refused = || Answer::Refused {
            status: 404,
            excerpt: "not found".into(),
            credential: false,
        };
        match attempts(&config, &fill, &own, true).next(refused()) {
            Next::Refused {
                why, for_itself, ..
            } => {
                assert_eq!(for_itself, Some((404, "not found".into())));
                assert_eq!(
                    why,
                    "https://api.example.com/v3/videos?part=id&key=***: the upstream refused the request with HTTP 404: not found; not retried"
                );
            }
            other => panic!("{other:?}"),
        }
        match attempts(&config, &fill, &own, false).next(refused()) {
            Next::Fail(why) => {
                assert_eq!(
                    why,
                    "the upstream refused the request with HTTP 404: not found"
                );
            }
            other => panic!("{other:?}"),
        }
        // A 401 refuses every request: the job stops, given or not.
        let unauthorized = Answer::Refused {
            status: 401,
            excerpt: String::new(),
            credential: true,
        };
        assert!(matches!(
            attempts(&config, &fill, &own, true).next(unauthorized),
            Next::Fail(_)
        ));
        match attempts(&config, &fill, &own, true).next(Answer::Unusable("no body".into())) {
            Next::Refused {
                why, for_itself, ..
            } => {
                assert_eq!(for_itself, None);
                assert!(why.ends_with("key=***: no body"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// The table of answers, for a request that carries its key: whatever
    /// is about the request alone ends its key, whatever is about the
    /// credential ends the job; a 5xx past its retries ends an input (its
    /// own) but not a region (the upstream's, most likely).
    #[test]
    fn what_ends_a_key_and_what_ends_the_job() {
        let (config, secret) = (config(), Secret::new("SEKRET".into()));
        let fields = crate::config::InputFields::default();
        let (region, own) = (fill(&secret), url(PAGE));
        let input = Fill {
            input: Some(&fields),
            ..fill(&secret)
        };
        let refused = |status, credential| Answer::Refused {
            status,
            excerpt: "no".into(),
            credential,
        };
        for status in [403, 409, 413, 451] {
            match attempts(&config, &region, &own, true).next(refused(status, false)) {
                Next::Refused {
                    for_itself, outage, ..
                } => {
                    assert_eq!(for_itself, Some((status, "no".into())));
                    assert!(!outage, "{status} is about the request");
                }
                other => panic!("{status}: {other:?}"),
            }
            assert!(matches!(
                attempts(&config, &region, &own, false).next(refused(status, false)),
                Next::Fail(_)
            ));
        }
        assert!(matches!(
            attempts(&config, &input, &own, true).next(refused(403, true)),
            Next::Fail(_)
        ));
        let fatal = || Answer::Fatal("the host name does not exist".into());
        assert!(matches!(
            attempts(&config, &input, &own, true).next(fatal()),
            Next::Refused {
                for_itself: Some((0, _)),
                outage: false,
                ..
            }
        ));
        assert!(matches!(
            attempts(&config, &input, &own, false).next(fatal()),
            Next::Fail(_)
        ));
        // Past its retries (`retries: 3`).
        let past = |fill: &Fill<'_>| {
            let mut a = attempts(&config, fill, &own, true);
            for _ in 0..3 {
                assert!(matches!(
                    a.next(Answer::Transient("HTTP 500".into())),
                    Next::Retry { .. }
                ));
            }
            a.next(Answer::Transient("HTTP 500".into()))
        };
        match past(&input) {
            Next::Refused {
                for_itself,
                why,
                outage,
            } => {
                assert!(outage, "the upstream's own trouble");
                assert_eq!(for_itself, Some((0, "HTTP 500, after 4 attempts".into())));
                assert!(
                    why.ends_with("HTTP 500, after 4 attempts; not retried"),
                    "{why}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(past(&region), Next::Fail(_)));
    }
}
