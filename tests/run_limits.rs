//! Limits learned from the upstream (issue 38, section 2): a 2xx whose
//! counts say nothing remains blocks the credential until the count's
//! reset, whatever the YAML's limit, so the next request (and the next
//! run) sends nothing into the refusal that would follow; a limit the
//! upstream announces that the pool does not say is warned about once a
//! run and shown by `status`. The real binary on both stores, a small
//! server in the test answering 200.

use std::time::Duration;

use crate::common::deployment::{Deployment, api_yaml, embedded_store, one_region_job};
use crate::common::redis::RedisServer;
use crate::common::server::{raw, serving};
use crate::common::wait_until;
use crate::common::yaml::{Config, Credential, limit};

/// Page 1 (with a next page) says nothing remains, with `spent`'s headers
/// (given the epoch second now); page 2 says plenty remains.
fn upstream(
    spent: fn(u64) -> Vec<String>,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    serving(move |head| {
        if head.contains("pageToken=p2") {
            let body = br#"{"items":[{"id":"b"}]}"#;
            return raw("200 OK", &["X-RateLimit-Remaining: 40"], body);
        }
        let now = chrono::Utc::now().timestamp() as u64;
        let headers = spent(now);
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        raw(
            "200 OK",
            &headers,
            br#"{"items":[{"id":"a"}],"nextPageToken":"p2"}"#,
        )
    })
}

fn blocked_until(d: &Deployment) -> Option<i64> {
    let json = d.status_json();
    json["credentials"][0]["blocked_until"].as_str().map(|t| {
        chrono::DateTime::parse_from_rfc3339(t)
            .unwrap()
            .timestamp_micros()
    })
}

/// On each store: the first run writes page 1, blocks the credential
/// until the reset (`reset` from the answer, within a second's rounding)
/// and stops with 75, its cursor at page 2; a second run before the
/// reset sends nothing; a run after it fetches page 2 and ends 0.
fn blocks_until_the_reset(said: &str, reset: Duration, spent: fn(u64) -> Vec<String>) {
    let redis = RedisServer::start();
    for store in ["embedded", "redis"] {
        let (base, heads) = upstream(spent);
        let d = Deployment::new("");
        let url = match store {
            "redis" => redis.url(),
            _ => embedded_store(&d),
        };
        // (1000 an hour: the YAML's limit is nowhere near)
        d.write(&api_yaml(
            &url,
            &one_region_job("j", &format!("{base}/items")),
        ));
        let before = chrono::Utc::now().timestamp_micros();
        let r = d.portion(&["run"]);
        let after = chrono::Utc::now().timestamp_micros();
        assert_eq!(r.code, 75, "{store} {said}: {r:?}");
        assert!(
            r.stderr.contains(&format!("answered 200 with {said}"))
                && r.stderr.contains("nothing remains of its own quota"),
            "{store}: {r:?}"
        );
        assert!(
            r.stderr.contains("the credential is blocked until"),
            "{r:?}"
        );
        assert_eq!(heads.lock().unwrap().len(), 1, "{store} {said}: {r:?}");
        assert_eq!(d.outputs("j").len(), 1, "{store}: page 1 kept");
        let until = blocked_until(&d).expect("blocked");
        let reset = reset.as_micros() as i64;
        // (status writes whole seconds; GitHub's reset is a whole second)
        assert!(
            before + reset - 2_000_000 <= until && until <= after + reset + 1_000_000,
            "{store} {said}: blocked until {until}, the reset about {} after {before}",
            reset
        );
        // A second run before the reset: refused by the ledger, nothing sent.
        let r = d.portion(&["run"]);
        assert!(
            chrono::Utc::now().timestamp_micros() < until,
            "the machine was too slow for this test's margins"
        );
        assert_eq!(r.code, 75, "{store}: {r:?}");
        assert!(r.stderr.contains(said), "the block says why: {r:?}");
        assert_eq!(heads.lock().unwrap().len(), 1, "{store}: sent nothing");
        // After the reset: page 2, where the cursor stopped.
        wait_until(Duration::from_secs(10), "the reset passes", || {
            chrono::Utc::now().timestamp_micros() > until + 1_000_000
        });
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{store}: {r:?}");
        let heads = heads.lock().unwrap();
        assert_eq!(heads.len(), 2, "{store}: {heads:?}");
        assert!(heads[1].contains("pageToken=p2"), "{heads:?}");
    }
}

#[test]
fn githubs_remaining_0_on_a_200_blocks_until_its_reset() {
    blocks_until_the_reset("X-RateLimit-Remaining: 0", Duration::from_secs(4), |now| {
        vec![
            "X-RateLimit-Limit: 250".into(),
            "X-RateLimit-Remaining: 0".into(),
            format!("X-RateLimit-Reset: {}", now + 4),
        ]
    });
}

#[test]
fn openais_remaining_requests_or_tokens_0_on_a_200_blocks_until_its_reset() {
    blocks_until_the_reset(
        "x-ratelimit-remaining-requests: 0",
        Duration::from_secs(3),
        |_| {
            vec![
                "x-ratelimit-remaining-requests: 0".into(),
                "x-ratelimit-reset-requests: 3s".into(),
                "x-ratelimit-remaining-tokens: 9000".into(),
                "x-ratelimit-reset-tokens: 20ms".into(),
            ]
        },
    );
    blocks_until_the_reset(
        "x-ratelimit-remaining-tokens: 0",
        Duration::from_millis(3500),
        |_| {
            vec![
                "x-ratelimit-remaining-requests: 10".into(),
                "x-ratelimit-reset-requests: 1s".into(),
                "x-ratelimit-remaining-tokens: 0".into(),
                "x-ratelimit-reset-tokens: 3.5s".into(),
            ]
        },
    );
}

#[test]
fn the_ietf_fields_remaining_0_on_a_200_blocks_until_its_reset() {
    blocks_until_the_reset("RateLimit: r=0", Duration::from_secs(3), |_| {
        vec![
            "RateLimit-Policy: \"hour\";q=1000;w=3600, \"minute\";q=50;w=60".into(),
            "RateLimit: \"hour\";r=900;t=3000, \"minute\";r=0;t=3".into(),
        ]
    });
    blocks_until_the_reset("RateLimit-Remaining: 0", Duration::from_secs(3), |_| {
        vec![
            "RateLimit-Limit: 50".into(),
            "RateLimit-Remaining: 0".into(),
            "RateLimit-Reset: 3".into(),
        ]
    });
}

/// Three pages, each announcing `said`'s limit (with a count well above 0).
fn announcing(
    said: fn() -> Vec<String>,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    serving(move |head| {
        let next = if head.contains("pageToken=p2") {
            r#","nextPageToken":"p3""#
        } else if head.contains("pageToken=p3") {
            ""
        } else {
            r#","nextPageToken":"p2""#
        };
        let body = format!(r#"{{"items":[{{"id":"a"}}]{next}}}"#);
        let headers = said();
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        raw("200 OK", &headers, body.as_bytes())
    })
}

/// An upstream that announces another limit than the pool's: one warning
/// a run naming both, whatever the number of answers; `status` shows what
/// it said and when, in text and JSON, on both stores.
#[test]
fn another_limit_the_upstream_announces_is_warned_once_and_shown_by_status() {
    let redis = RedisServer::start();
    type Case = (&'static str, fn() -> Vec<String>, &'static str, Option<u64>);
    let cases: [Case; 2] = [
        (
            "github",
            || {
                vec![
                    "X-RateLimit-Limit: 250".into(),
                    "X-RateLimit-Remaining: 200".into(),
                    "X-RateLimit-Reset: 4000000000".into(),
                ]
            },
            "the upstream says 250 (its window unsaid); pool requests says 1000 per 1h",
            None,
        ),
        (
            "ietf",
            || {
                vec![
                    "RateLimit-Policy: \"minute\";q=250;w=60".into(),
                    "RateLimit: \"minute\";r=200;t=30".into(),
                ]
            },
            "the upstream says 250 per 1m; pool requests says 1000 per 1h",
            Some(60),
        ),
    ];
    for store in ["embedded", "redis"] {
        for (preset, said, warning, per_seconds) in cases {
            let (base, heads) = announcing(said);
            let d = Deployment::new("");
            let url = match store {
                "redis" => redis.url(),
                _ => embedded_store(&d),
            };
            let yaml = Config::new(&url)
                .lock_ttl("2s")
                .http("{ timeout: 5s, connect_timeout: 2s, retries: 1, backoff: 20ms }")
                .credential(
                    Credential::new("main")
                        .set("upstream_headers", preset)
                        .pool("requests", &[limit(1000, "1h")]),
                )
                .endpoint("api", "1")
                .jobs_text(&one_region_job("j", &format!("{base}/items")))
                .render();
            d.write(&yaml);
            let before = chrono::Utc::now().timestamp();
            let r = d.portion(&["run"]);
            assert_eq!(r.code, 0, "{store} {preset}: {r:?}");
            assert_eq!(heads.lock().unwrap().len(), 3, "{r:?}");
            assert_eq!(
                r.stderr.matches("the upstream says").count(),
                1,
                "{store} {preset}: once a run: {r:?}"
            );
            assert!(r.stderr.contains(warning), "{store} {preset}: {r:?}");
            let r = d.portion(&["status"]);
            assert!(
                r.stdout
                    .contains(&format!("ANOTHER LIMIT: {warning} (seen ")),
                "{store} {preset}: {r:?}"
            );
            let json = d.status_json();
            let says = &json["credentials"][0]["pools"][0]["upstream_says"];
            assert_eq!(says["limits"][0]["limit"], 250, "{says}");
            assert_eq!(says["limits"][0]["per_seconds"].as_u64(), per_seconds);
            assert_eq!(says["differs"], true);
            let seen = chrono::DateTime::parse_from_rfc3339(says["seen"].as_str().unwrap())
                .unwrap()
                .timestamp();
            assert!(
                (before - 1..=chrono::Utc::now().timestamp() + 1).contains(&seen),
                "{store} {preset}: seen {seen}"
            );
        }
    }
}
