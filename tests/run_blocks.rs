//! Upstream blocks an operator can live with: a `Retry-After` of a century is
//! capped at the credential's longest window (with a warning), GitHub's
//! rate-limit answer (403 with `X-RateLimit-Remaining: 0`) blocks until its
//! reset, `status` says who set a block, when and why, and `portion unblock`
//! lifts one. The real binary, the embedded store, the stand-in upstream.

use crate::common::deployment::{Deployment, WIDE, deployment_yaml, embedded_store, videos_job};
use crate::common::standin::Standin;

const HOUR_US: i64 = 3_600_000_000;

/// A deployment of one job on `up`, the embedded store, a 1 h window.
fn deployment(up: &Standin) -> Deployment {
    let d = Deployment::new("");
    let jobs = [videos_job("first", "main", &["US", "GB"], 1, &up.base())];
    d.write(&deployment_yaml(
        &embedded_store(&d),
        WIDE,
        "fail_closed",
        &jobs,
    ));
    d
}

fn blocked_until(d: &Deployment) -> Option<i64> {
    let json = d.status_json();
    json["credentials"][0]["blocked_until"].as_str().map(|t| {
        chrono::DateTime::parse_from_rfc3339(t)
            .unwrap()
            .timestamp_micros()
    })
}

#[test]
fn a_retry_after_of_a_century_is_capped_at_the_longest_window() {
    for huge in ["99999999999", "18446744073709551615"] {
        let up = Standin::start(&["--units", "1", "--answer-429", "--retry-after", huge]);
        let d = deployment(&up);
        let before = chrono::Utc::now().timestamp_micros();
        let r = d.portion(&["run"]);
        let after = chrono::Utc::now().timestamp_micros();
        assert_eq!(r.code, 75, "{huge}: {r:?}");
        assert!(
            r.stderr
                .contains("capped at the credential's longest window, 1h"),
            "{r:?}"
        );
        // Neither the year 5195 nor "until now": one hour from the block.
        let until = blocked_until(&d).expect("blocked");
        assert!(
            before + HOUR_US - 1_000_000 <= until && until <= after + HOUR_US,
            "{huge}: blocked until {until}, run between {before} and {after}"
        );
    }
}

/// A refusal whose wait is nothing (`Retry-After: 0`, a date already past)
/// still blocks a moment: the next run on the credential sends nothing
/// into the same refusal.
#[test]
fn a_retry_after_of_nothing_still_blocks_a_moment() {
    for nothing in ["0", "Thu, 01 Jan 1970 00:00:00 GMT"] {
        let up = Standin::start(&["--units", "1", "--answer-429", "--retry-after", nothing]);
        let d = deployment(&up);
        let before = chrono::Utc::now().timestamp_micros();
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 75, "{nothing}: {r:?}");
        let until = blocked_until(&d).expect("blocked");
        assert!(
            until >= before + 4_000_000,
            "{nothing}: blocked until {until}, from {before}"
        );
        let sent = up.seen().len();
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 75, "{nothing}: {r:?}");
        assert_eq!(
            up.seen().len(),
            sent,
            "{nothing}: the second run sent nothing"
        );
    }
}

#[test]
fn githubs_rate_limit_answer_blocks_until_its_reset_and_unblock_lifts_it() {
    // GitHub's answer: 403, X-RateLimit-Remaining: 0, the reset in epoch
    // seconds (the stand-in's window, 10 min, plus a second).
    let up = Standin::start(&["--units", "1", "--answer-github", "--window", "10m"]);
    let d = deployment(&up);
    let before = chrono::Utc::now().timestamp_micros();
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(
        r.stderr
            .contains("upstream answered 403 (rate limit exceeded"),
        "{r:?}"
    );
    let until = blocked_until(&d).expect("blocked until the reset");
    let ten_min = 600_000_000;
    assert!(
        until >= before + ten_min - 2_000_000 && until <= before + ten_min + 3_000_000,
        "blocked until {until}, the reset was about {}",
        before + ten_min
    );
    // Who set it, when and why.
    let r = d.portion(&["status"]);
    assert!(r.stdout.contains("BLOCKED by the upstream"), "{r:?}");
    assert!(
        r.stdout.contains("upstream 403 rate limit exceeded"),
        "{r:?}"
    );
    assert!(r.stdout.contains("(job first, "), "{r:?}");
    assert!(r.stdout.contains(" pid "), "{r:?}");
    assert!(r.stdout.contains(", at 20"), "{r:?}");
    // The next run stops before sending anything.
    let sent = up.seen().len();
    assert_eq!(d.portion(&["run"]).code, 75);
    assert_eq!(up.seen().len(), sent);

    // `portion unblock` lifts it; the next run sends again.
    let r = d.portion(&["unblock", "main"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("credential main: block lifted"), "{r:?}");
    assert_eq!(blocked_until(&d), None);
    let r = d.portion(&["unblock", "main"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("credential main was not blocked"),
        "{r:?}"
    );
    assert_eq!(d.portion(&["unblock", "nobody"]).code, 2);
    d.portion(&["run"]);
    assert!(
        up.seen().len() > sent,
        "the run after unblock sent a request"
    );
}

/// A calendar window (issue 13, part 7): with no `upstream_reset`, the
/// upstream's "quota spent" blocks the credential until the window's
/// period ends (local midnight in Los Angeles), not a window's length.
#[test]
fn a_calendar_window_sets_the_block_at_its_reset() {
    let up = Standin::start(&["--units", "1"]);
    let d = Deployment::new("");
    let jobs = [videos_job("first", "main", &["US", "GB"], 1, &up.base())];
    let day = &["{ limit: 1000, per: 24h, aligned: America/Los_Angeles }"];
    d.write(&deployment_yaml(
        &embedded_store(&d),
        day,
        "fail_closed",
        &jobs,
    ));
    let before = chrono::Utc::now().timestamp_micros();
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    let la: chrono_tz::Tz = "America/Los_Angeles".parse().unwrap();
    let midnight = portion::ledger::calendar::period(la, 24 * HOUR_US, before).1;
    assert_eq!(blocked_until(&d), Some(midnight), "{}", r.stderr);
}

/// `aligned` is a time zone, and its `per` divides a day: else 78, naming
/// the field, before anything is sent.
#[test]
fn a_calendar_window_with_a_bad_zone_or_period_exits_78() {
    let up = Standin::start(&[]);
    for (window, field, why) in [
        (
            &["{ limit: 10, per: 24h, aligned: Mars/Olympus }"],
            "credentials.main.pools.units[0].aligned",
            "not a time zone",
        ),
        (
            &["{ limit: 10, per: 7h, aligned: UTC }"],
            "credentials.main.pools.units[0].per",
            "does not divide a day",
        ),
    ] {
        let d = Deployment::new("");
        let jobs = [videos_job("first", "main", &["US"], 1, &up.base())];
        d.write(&deployment_yaml(
            &embedded_store(&d),
            window,
            "fail_closed",
            &jobs,
        ));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 78, "{window:?}: {r:?}");
        assert!(
            r.stderr.contains(field) && r.stderr.contains(why),
            "{}",
            r.stderr
        );
    }
    assert!(up.seen().is_empty());
}

/// A bare 429 (no Retry-After, no spent-quota reason: usually a short-term
/// rate limit) blocks for the credential's shortest window, doubling with
/// each repeat after the block's end, up to its longest (issue 23, item
/// 12): 1 s, 2 s, 2 s on windows of 1 s and 2 s, across runs, in both
/// stores. (It blocked for the longest window each time.)
#[test]
fn a_bare_429_blocks_for_the_shortest_window_doubling_up_to_the_longest() {
    let server = crate::common::redis::RedisServer::start();
    for store in ["embedded", "redis"] {
        let up = Standin::start(&["--units", "1", "--answer-429", "--bare-429"]);
        let d = Deployment::new("");
        let jobs = [videos_job("first", "main", &["US", "GB"], 1, &up.base())];
        let windows = &["{ limit: 1000, per: 1s }", "{ limit: 1000, per: 2s }"];
        let url = match store {
            "redis" => server.url(),
            _ => embedded_store(&d),
        };
        d.write(&deployment_yaml(&url, windows, "fail_closed", &jobs));
        // The block's end as stored, to the µs (status shows seconds).
        let stored_until = || -> i64 {
            match store {
                "redis" => server
                    .cli(&["HGET", "portion:{main}:state", "blocked_until"])
                    .trim()
                    .parse()
                    .unwrap(),
                _ => rusqlite::Connection::open(d.path().join("ledger.sqlite3"))
                    .unwrap()
                    .query_row(
                        "SELECT blocked_until FROM credential WHERE name = 'main'",
                        [],
                        |r| r.get(0),
                    )
                    .unwrap(),
            }
        };
        // (the first run spends the stand-in's one unit on US, then meets
        // its 429 on GB; each next run asks for GB again)
        for (run, secs) in [1, 2, 2].into_iter().enumerate() {
            let before = chrono::Utc::now().timestamp_micros();
            let r = d.portion(&["run"]);
            let after = chrono::Utc::now().timestamp_micros();
            assert_eq!(r.code, 75, "{store} run {run}: {r:?}");
            assert!(r.stderr.contains("upstream answered 429"), "{r:?}");
            let until = stored_until();
            let len = secs * 1_000_000;
            assert!(
                before + len <= until && until <= after + len,
                "{store} run {run}: blocked until {until}, not {secs} s after {before}..{after}"
            );
            // The next run comes once the block is over.
            crate::common::wait_until(std::time::Duration::from_secs(10), "the block ends", || {
                chrono::Utc::now().timestamp_micros() > until
            });
        }
        // `portion unblock` forgets the repeats: the next starts at 1 s again.
        assert_eq!(d.portion(&["unblock", "main"]).code, 0);
        let before = chrono::Utc::now().timestamp_micros();
        assert_eq!(d.portion(&["run"]).code, 75);
        let after = chrono::Utc::now().timestamp_micros();
        let until = stored_until();
        assert!(
            before + 1_000_000 <= until && until <= after + 1_000_000,
            "{store}"
        );
    }
}
