//! The attempts of one page's request, driven answer by answer: retries
//! and their backoff, redirect hops, and what ends a key or the job.

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
        AfterAttempt::Retry { wait, note } => {
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
    assert!(matches!(a.next(page()), AfterAttempt::Page { .. }));
}

#[test]
fn retries_double_their_wait_and_end_the_job_once_spent() {
    let (config, secret) = (config(), Secret::new("SEKRET".into()));
    let (fill, own) = (fill(&secret), url(PAGE));
    let mut a = attempts(&config, &fill, &own, true);
    let mut waits = Vec::new();
    for _ in 0..3 {
        match a.next(Answer::Transient("timed out".into())) {
            AfterAttempt::Retry { wait, .. } => waits.push(wait.as_secs()),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(waits, [2, 4, 8]);
    match a.next(Answer::Transient("timed out".into())) {
        AfterAttempt::Fail(why) => assert_eq!(why, "timed out, after 4 attempts"),
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
            AfterAttempt::Retry { wait, .. } => {
                assert!(wait <= Duration::from_secs(cap), "{wait:?}")
            }
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
            AfterAttempt::Follow { note } => {
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
        AfterAttempt::Fail(why) => assert_eq!(
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
            AfterAttempt::Follow { .. }
        ));
    }
    match a.next(Answer::Transient("HTTP 500".into())) {
        AfterAttempt::Retry { note, .. } => assert!(
            note.starts_with("https://api.example.com/elsewhere?key=***: HTTP 500; retry 1"),
            "{note}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(a.target().as_str(), PAGE);
    assert!(matches!(
        a.next(hop("https://api.example.com/elsewhere")),
        AfterAttempt::Follow { .. }
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
        AfterAttempt::QuotaSpent {
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
        AfterAttempt::Refused {
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
        AfterAttempt::Fail(why) => {
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
        AfterAttempt::Fail(_)
    ));
    match attempts(&config, &fill, &own, true).next(Answer::Unusable("no body".into())) {
        AfterAttempt::Refused {
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
            AfterAttempt::Refused {
                for_itself, outage, ..
            } => {
                assert_eq!(for_itself, Some((status, "no".into())));
                assert!(!outage, "{status} is about the request");
            }
            other => panic!("{status}: {other:?}"),
        }
        assert!(matches!(
            attempts(&config, &region, &own, false).next(refused(status, false)),
            AfterAttempt::Fail(_)
        ));
    }
    assert!(matches!(
        attempts(&config, &input, &own, true).next(refused(403, true)),
        AfterAttempt::Fail(_)
    ));
    let fatal = || Answer::Fatal("the host name does not exist".into());
    assert!(matches!(
        attempts(&config, &input, &own, true).next(fatal()),
        AfterAttempt::Refused {
            for_itself: Some((0, _)),
            outage: false,
            ..
        }
    ));
    assert!(matches!(
        attempts(&config, &input, &own, false).next(fatal()),
        AfterAttempt::Fail(_)
    ));
    // Past its retries (`retries: 3`).
    let past = |fill: &Fill<'_>| {
        let mut a = attempts(&config, fill, &own, true);
        for _ in 0..3 {
            assert!(matches!(
                a.next(Answer::Transient("HTTP 500".into())),
                AfterAttempt::Retry { .. }
            ));
        }
        a.next(Answer::Transient("HTTP 500".into()))
    };
    match past(&input) {
        AfterAttempt::Refused {
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
    assert!(matches!(past(&region), AfterAttempt::Fail(_)));
}
