//! Failure drills, each with the real binary: Redis restarted (with AOF)
//! between and during runs, a Redis that stalls, an upstream that stalls,
//! hosts with wildly different clocks, and a Redis that lost its data.

use std::process::Child;
use std::time::{Duration, Instant};

use portion::ledger::state_key;

use crate::common::deployment::{
    self, Deployment, Ran, WIDE, deployment_yaml, finish, kill, run, trending, trending_with,
    videos_job,
};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;

fn spawn(d: &Deployment, args: &[&str]) -> Child {
    deployment::spawn(&mut d.cmd(args))
}

fn aof_redis() -> RedisServer {
    RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
}

#[test]
fn redis_restarted_between_runs_keeps_log_and_cursor() {
    let mut redis = aof_redis();
    let up = Standin::start(&["--pages", "3"]);
    let d = trending_with(
        &up,
        &redis.url(),
        &["{ limit: 5, per: 1h }"],
        &["US", "GB", "DE"],
        3,
        "fail_closed",
    );
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    let before = d.status_json();

    redis.restart();
    let after = d.status_json();
    assert_eq!(
        before["credentials"][0]["pools"], after["credentials"][0]["pools"],
        "the log survived"
    );
    assert_eq!(
        before["credentials"][0]["jobs"], after["credentials"][0]["jobs"],
        "the cursor survived"
    );
    assert_eq!(after["credentials"][0]["log_lost"], serde_json::Value::Null);
    // The window is still full: nothing is charged twice.
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(
        r.stderr.contains("0 calls") && r.stderr.contains("starts at region GB step 0 page 2"),
        "{r:?}"
    );
    assert_eq!(up.seen().len(), 5);
}

#[test]
fn redis_restarted_during_a_run_keeps_its_lock_and_every_charge() {
    let mut redis = aof_redis();
    let up = Standin::start(&["--pages", "3", "--delay", "300ms"]);
    let d = trending(&up, &redis.url(), &["US", "GB"], 3, "fail_closed");

    let run = spawn(&d, &["run"]);
    up.wait_for(2);
    redis.restart();
    // The lock survived the restart: a second run is turned away.
    let second = d.portion(&["run"]);
    assert_eq!(second.code, 75, "{second:?}");
    assert!(
        second.stderr.contains("another run holds the lock"),
        "{second:?}"
    );
    let r = finish(run);
    // The run reconnects and finishes (its charges retried within the retry window).
    assert_eq!(r.code, 0, "{r:?}");
    let seen = up.seen().len();
    assert_eq!(seen, 6);
    let used = d.status_json()["credentials"][0]["pools"][0]["windows"][0]["used"]
        .as_u64()
        .unwrap();
    assert_eq!(
        used as usize, seen,
        "every call charged exactly once across the restart"
    );
}

#[test]
fn a_stalled_redis_stops_the_run_within_a_bounded_time() {
    let redis = RedisServer::start();
    let up = Standin::start(&["--pages", "3", "--delay", "200ms"]);
    let d = trending(&up, &redis.url(), &["US", "GB"], 3, "fail_closed");
    let run = spawn(&d, &["run"]);
    up.wait_for(1);
    // Redis still accepts connections but never answers.
    kill("-STOP", redis.pid());
    let started = Instant::now();
    let r = finish(run);
    let took = started.elapsed();
    kill("-CONT", redis.pid());
    eprintln!("a stalled store ended the run after {took:?}");
    assert_eq!(r.code, 69, "{r:?}");
    assert!(
        r.stderr
            .contains(&format!("the store {} is unreachable", redis.url())),
        "{r:?}"
    );
    // The README documents "about 15 s" (a 10 s retry window of 2 s
    // attempts, then a 3 s lock release); this bound only proves it ends.
    assert!(took < Duration::from_secs(40), "the run hung for {took:?}");
    assert!(up.seen().len() <= 2, "no request without its charge");
}

#[test]
fn a_stalled_upstream_is_timed_out_charged_and_retried_within_bounds() {
    let up = Standin::start(&["--delay", "60s"]);
    let d = Deployment::new("");
    let job = videos_job("trending", "main", &["US"], 1, &up.base());
    // (2 s, not less: the timeout counts from the attempt's start, so a
    // portion stalled that long on a loaded machine never sends it at all)
    let yaml = deployment_yaml("embedded:ledger.sqlite3", WIDE, "fail_closed", &[job]).replace(
        "timeout: 5s, connect_timeout: 2s, retries: 3",
        "timeout: 2s, connect_timeout: 2s, retries: 2",
    );
    d.write(&yaml);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("timed out, after 3 attempts"), "{r:?}");
    // The stand-in logs a request once it has read it, in its own time:
    // the last attempt's may reach its log after portion has given up on it
    // and ended (seen as 2 under load).
    up.wait_for(3);
    assert_eq!(
        up.seen().len(),
        3,
        "one try and two retries reached the upstream"
    );
    let used = d.status_json()["credentials"][0]["pools"][0]["windows"][0]["used"].clone();
    // (Bounded by the timeouts, not the 60 s stall: the stand-in answers
    // every request after 60 s, so "timed out" above is portion's own
    // timeout; no wall-clock bound asserted on a shared machine.)
    assert_eq!(used, 3, "each attempt was charged");
}

const DAY_US: i64 = 86_400 * 1_000_000;

/// The clock of a `portion` process as it read it: the time of the first
/// line it logged (µs since the epoch).
fn logged_time(r: &Ran) -> i64 {
    let first = r.stderr.split_whitespace().next().unwrap_or_default();
    chrono::DateTime::parse_from_rfc3339(first)
        .unwrap_or_else(|e| panic!("no timestamp opens its log ({e}): {r:?}"))
        .timestamp_micros()
}

/// Run `args` in `d` under libfaketime, the host's clock `skew_days` off,
/// and check that the skew took effect: the process logged a time that far
/// from this host's clock around the run.
fn run_skewed(d: &Deployment, skew_days: i64, args: &[&str]) -> Ran {
    let offset = format!("{skew_days:+}d");
    let before = chrono::Utc::now().timestamp_micros();
    let r = run(&mut d.cmd_via(&["faketime", "-f", &offset], args));
    let after = chrono::Utc::now().timestamp_micros();
    let logged = logged_time(&r) - skew_days * DAY_US;
    assert!(
        before - 1_000_000 <= logged && logged <= after + 1_000_000,
        "faketime {offset} did not take effect: the process logged {}, \
         this host's clock read {} to {}: {r:?}",
        logged_time(&r),
        before,
        after
    );
    r
}

#[test]
fn hosts_with_skewed_clocks_share_one_budget_exactly() {
    let redis = RedisServer::start();
    let up = Standin::start(&["--pages", "3"]);
    let d = Deployment::new("");
    let jobs = [
        videos_job("east", "main", &["US", "GB", "DE"], 3, &up.base()),
        videos_job("west", "main", &["JP", "KR", "AU"], 3, &up.base()),
    ];
    d.write(&deployment_yaml(
        &redis.url(),
        &["{ limit: 6, per: 1h }"],
        "fail_closed",
        &jobs,
    ));
    // One host two days ahead, one a day behind (libfaketime).
    let ahead = run_skewed(&d, 2, &["run", "east"]);
    assert_eq!(ahead.code, 75, "{ahead:?}");
    let behind = run_skewed(&d, -1, &["run", "west"]);
    assert_eq!(behind.code, 75, "{behind:?}");
    assert!(behind.stderr.contains("0 calls"), "{behind:?}");
    assert_eq!(
        up.seen().len(),
        6,
        "exactly the budget, whatever the hosts' clocks"
    );
}

#[test]
fn a_403_blocks_until_the_next_reset_on_the_stores_clock_whatever_the_hosts() {
    for skew_days in [-1, 1] {
        let redis = RedisServer::start(); // its clock is right
        // The upstream's own quota (2 units) runs out on the third page.
        let up = Standin::start(&["--units", "2", "--pages", "3"]);
        let d = Deployment::new("");
        let jobs = [
            videos_job("first", "main", &["US"], 3, &up.base()),
            videos_job("second", "main", &["JP"], 3, &up.base()),
        ];
        // The upstream resets daily at a minute about six hours after
        // Redis's now: the next reset after Redis's now is that minute,
        // today or tomorrow; a host a day off would see it a day off.
        let redis_now = redis.time_us();
        let reset_us = (redis_now + 6 * 3_600_000_000) / 60_000_000 * 60_000_000;
        let reset = chrono::DateTime::from_timestamp_micros(reset_us).unwrap();
        let yaml = deployment_yaml(&redis.url(), WIDE, "fail_closed", &jobs).replace(
            "    secret: { file: key }\n",
            &format!(
                "    secret: {{ file: key }}\n    upstream_reset: \"{} UTC\"\n",
                reset.format("%H:%M")
            ),
        );
        assert!(yaml.contains("upstream_reset"), "{yaml}");
        d.write(&yaml);

        let r = run_skewed(&d, skew_days, &["run", "first"]);
        assert_eq!(r.code, 75, "{skew_days:+} days: {r:?}");
        assert!(
            r.stderr.contains("upstream answered 403 (quotaExceeded)"),
            "{r:?}"
        );
        let statuses: Vec<u16> = up.seen().iter().map(|s| s.status).collect();
        assert_eq!(statuses, [200, 200, 403]);

        // The block stored ends at the next reset after Redis's own now, to
        // the microsecond: the host's skew changed nothing.
        let stored = redis.cli(&["HGET", &state_key("main"), "blocked_until"]);
        assert_eq!(
            stored,
            reset_us.to_string(),
            "a host {skew_days:+} days off stored a block until {stored}, \
             the next reset after Redis's now is {reset} ({reset_us})"
        );
        let json = d.status_json();
        assert_eq!(
            json["credentials"][0]["blocked_until"],
            reset.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            "{json}"
        );

        // The next job, on a host with a right clock, sends nothing.
        let r = d.portion(&["run", "second"]);
        assert_eq!(r.code, 75, "{r:?}");
        assert!(
            r.stderr.contains("the credential is blocked until"),
            "{r:?}"
        );
        assert_eq!(up.seen().len(), 3, "no request for the second job");
    }
}

#[test]
fn a_redis_that_lost_its_data_is_reported_by_run_and_status() {
    let mut redis = RedisServer::start(); // no persistence
    let up = Standin::start(&["--pages", "3"]);
    let d = trending_with(
        &up,
        &redis.url(),
        &["{ limit: 4, per: 1h }"],
        &["US", "GB"],
        3,
        "fail_closed",
    );
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(!r.stderr.contains("LOG LOST"), "{r:?}");

    redis.restart(); // comes back empty
    let r = d.portion(&["status"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("LOG LOST: the store had recorded 4 charges and reported 0"),
        "{r:?}"
    );
    // status noticed it first; the run still tells the store, which then
    // counts the pool as spent: nothing is sent on an empty log.
    let sent = up.seen().len();
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(
        r.stderr
            .contains("LOG LOST: the store lost the log of credential main pool units"),
        "{r:?}"
    );
    assert_eq!(up.seen().len(), sent, "a forgotten budget was spent again");
    assert!(
        r.stderr.contains(
            "LOG LOST: the store has forgotten credential main's log: it had recorded 4 charges"
        ),
        "{r:?}"
    );
    assert!(r.stderr.contains("turn on appendonly"), "{r:?}");
    let json = d.status_json();
    assert_eq!(json["credentials"][0]["log_lost"]["had"], 4, "{json}");
}
