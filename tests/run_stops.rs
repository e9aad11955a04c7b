//! How runs stop: the upstream's own quota errors, a busy lock, kill -9,
//! SIGTERM, and a store that is down under both policies. The real binary,
//! a real redis-server, the stand-in upstream.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::common::deployment::{
    self, Deployment, WIDE, deployment_yaml, embedded_store, finish, kill, trending, videos_job,
};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;

fn spawn(d: &Deployment, args: &[&str]) -> Child {
    deployment::spawn(&mut d.cmd(args))
}

fn signal(child: &Child, sig: &str) {
    kill(sig, child.id());
}

/// (region, page) → how many times the stand-in served it.
fn fetch_counts(up: &Standin) -> BTreeMap<(String, u32), usize> {
    let mut m = BTreeMap::new();
    for s in up.seen() {
        *m.entry((s.region, s.page)).or_insert(0) += 1;
    }
    m
}

fn assert_outputs_valid(d: &Deployment, job: &str) {
    let dir = d.path().join("out").join(job);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.starts_with('.'), "a temporary file was left: {name}");
        let text = std::fs::read_to_string(dir.join(&name)).unwrap();
        serde_json::from_str::<serde_json::Value>(&text)
            .unwrap_or_else(|e| panic!("{name} is not valid JSON: {e}"));
    }
}

#[test]
fn the_upstreams_403_blocks_the_credential_for_every_job() {
    let redis = RedisServer::start();
    // The stand-in's own quota (2 units) is far below what the ledger allows.
    let up = Standin::start(&["--units", "2", "--pages", "3"]);
    let d = Deployment::new("");
    let jobs = [
        videos_job("first", "main", &["US"], 3, &up.base()),
        videos_job("second", "main", &["JP"], 3, &up.base()),
    ];
    d.write(&deployment_yaml(&redis.url(), WIDE, "fail_closed", &jobs));

    let r = d.portion(&["run", "first"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(
        r.stderr.contains("upstream answered 403 (quotaExceeded)"),
        "{r:?}"
    );
    assert!(r.stderr.contains("blocking credential main until"), "{r:?}");
    assert!(
        r.stderr.contains("next run starts at US step 0 page 2"),
        "the page refused is redone: {r:?}"
    );
    let statuses: Vec<u16> = up.seen().iter().map(|s| s.status).collect();
    assert_eq!(statuses, [200, 200, 403]);

    // Another job on the same credential stops before sending anything.
    let r = d.portion(&["run", "second"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(
        r.stderr.contains("the credential is blocked until"),
        "{r:?}"
    );
    assert!(
        r.stderr.contains("upstream 403 quotaExceeded (job first, "),
        "{r:?}"
    );
    assert!(
        !up.seen().iter().any(|s| s.region == "JP"),
        "no request for the second job"
    );
}

#[test]
fn a_429_with_retry_after_blocks_for_that_long() {
    // The stand-in's own window (45 min) is neither the ledger's longest
    // window (WIDE: 1 h, the fallback without a Retry-After) nor a day.
    const UPSTREAM_WINDOW_S: i64 = 45 * 60;
    for redis in [None, Some(RedisServer::start())] {
        let up = Standin::start(&["--units", "1", "--answer-429", "--window", "45m"]);
        let d = Deployment::new("");
        let store = redis
            .as_ref()
            .map_or_else(|| embedded_store(&d), RedisServer::url);
        let jobs = [videos_job("first", "main", &["US", "GB"], 1, &up.base())];
        d.write(&deployment_yaml(&store, WIDE, "fail_closed", &jobs));
        // The store's clock: Redis TIME, or this host's for the embedded store.
        let store_now = || match &redis {
            Some(r) => r.time_us(),
            None => chrono::Utc::now().timestamp_micros(),
        };

        let before = store_now();
        let r = d.portion(&["run"]);
        let after = store_now();
        assert_eq!(r.code, 75, "{r:?}");
        assert!(
            r.stderr
                .contains("upstream answered 429 (rateLimitExceeded)"),
            "{r:?}"
        );

        // What the stand-in sent: Retry-After = its window less the age of the
        // unit that fills it, in whole seconds (`--units 1`: the first call's).
        let seen = up.seen();
        assert_eq!(
            seen.iter().map(|s| s.status).collect::<Vec<_>>(),
            [200, 429],
            "{seen:?}"
        );
        let age = (seen[1].at_us - seen[0].at_us) as i64;
        let retry_after = (UPSTREAM_WINDOW_S * 1_000_000 - age) / 1_000_000;
        assert_eq!(
            retry_after,
            (UPSTREAM_WINDOW_S * 1_000_000 - age - 50_000) / 1_000_000,
            "Retry-After is ambiguous: the calls were {age} µs apart"
        );

        // The block lasts Retry-After from the store's now when it was set
        // (between the readings around the run); status shows whole seconds.
        let json = d.status_json();
        let cred = &json["credentials"][0];
        let until = cred["blocked_until"]
            .as_str()
            .unwrap_or_else(|| panic!("not blocked: {json}"));
        let until = chrono::DateTime::parse_from_rfc3339(until)
            .unwrap()
            .timestamp_micros();
        let (lo, hi) = (
            before + retry_after * 1_000_000,
            after + retry_after * 1_000_000,
        );
        assert!(
            lo / 1_000_000 * 1_000_000 <= until && until <= hi,
            "blocked until {until}, expected {retry_after} s after the store's now, \
             within [{lo}, {hi}] (the run took {} ms)",
            (after - before) / 1000
        );
        assert!(
            cred["blocked_reason"]
                .as_str()
                .is_some_and(|r| r.contains("429")),
            "{json}"
        );

        let r = d.portion(&["run"]);
        assert_eq!(r.code, 75, "{r:?}");
        assert!(
            r.stderr.contains("the credential is blocked until"),
            "{r:?}"
        );
        assert_eq!(up.seen().len(), 2, "blocked: the second run sent nothing");
    }
}

#[test]
fn a_second_run_of_the_same_job_exits_75_at_once_and_names_the_holder() {
    let redis = RedisServer::start();
    let up = Standin::start(&["--pages", "4", "--delay", "300ms"]);
    let d = trending(&up, &redis.url(), &["US", "GB", "DE"], 4, "fail_closed");

    let first = spawn(&d, &["run"]);
    // 8 answers of 300 ms: the first run is past its 2 s lock_ttl, so it
    // still holds the lock only because it renews it.
    up.wait_for(8);
    let second = d.portion(&["run"]);
    assert_eq!(second.code, 75, "{second:?}");
    let holder = format!("pid {}", first.id());
    assert!(
        second.stderr.contains("another run holds the lock"),
        "{second:?}"
    );
    assert!(
        second.stderr.contains(&holder),
        "names the holder ({holder}): {second:?}"
    );
    assert!(second.stderr.contains("0 calls"), "{second:?}");

    let first = finish(first);
    assert_eq!(first.code, 0, "{first:?}");
    assert_eq!(
        up.seen().len(),
        12,
        "only the first run called the upstream"
    );
    // Released on exit: the next run takes the lock at once.
    let third = d.portion(&["run"]);
    assert_eq!(third.code, 0, "{third:?}");
}

#[test]
fn kill_9_mid_run_then_a_rerun_completes_with_valid_outputs() {
    for redis in [None, Some(RedisServer::start())] {
        let up = Standin::start(&["--pages", "3", "--delay", "100ms"]);
        let d = Deployment::new("");
        let store = redis
            .as_ref()
            .map_or_else(|| embedded_store(&d), RedisServer::url);
        let jobs = [videos_job(
            "trending",
            "main",
            &["US", "GB", "DE"],
            3,
            &up.base(),
        )];
        d.write(&deployment_yaml(&store, WIDE, "fail_closed", &jobs));

        let mut victim = spawn(&d, &["run"]);
        up.wait_for(4);
        victim.kill().unwrap(); // SIGKILL: no cleanup at all
        victim.wait().unwrap();
        let before = up.seen().len();
        // What a kill during a write would leave behind.
        let leftover = d
            .path()
            .join("out/trending/.trending~trending.r000001.GB.s0.p000001.json.tmp");
        std::fs::write(&leftover, "{\"items\": [").unwrap();

        // The killed run wrote a prefix of its work, page by page, and lost
        // at most the page in flight.
        let cycle: Vec<(String, u32)> = ["US", "GB", "DE"]
            .iter()
            .flat_map(|r| (0..3).map(move |p| (r.to_string(), p)))
            .collect();
        let written = d
            .outputs("trending")
            .into_iter()
            .filter(|f| !f.starts_with('.'))
            .count();
        let names: Vec<String> = cycle[..written]
            .iter()
            .map(|(r, p)| format!("trending.r000001.{r}.s0.p{p:06}.json"))
            .collect();
        assert_eq!(
            d.outputs("trending")
                .into_iter()
                .filter(|f| !f.starts_with('.'))
                .collect::<Vec<_>>(),
            names
        );
        assert!(before - written <= 1, "{before} fetched, {written} written");

        // The killed run's lock (lock_ttl 2s) expires by itself.
        let rerun = d.run_after_killed_lock();
        assert_eq!(rerun.code, 0, "{rerun:?}");
        assert!(
            rerun.stderr.contains("removed 1 temporary file(s)"),
            "{rerun:?}"
        );
        assert!(!leftover.exists());
        assert_outputs_valid(&d, "trending");

        // The rerun starts at the first page not written (redoing at most the
        // page in flight) and serves every region once from there.
        let rerun_seen: Vec<(String, u32)> = up.seen()[before..]
            .iter()
            .map(|s| (s.region.clone(), s.page))
            .collect();
        let n = 9 - written % 3;
        let expected: Vec<(String, u32)> = cycle
            .iter()
            .cycle()
            .skip(written)
            .take(n)
            .cloned()
            .collect();
        assert_eq!(rerun_seen, expected, "{rerun:?}");
    }
}

#[test]
fn sigterm_saves_the_cursor_releases_the_lock_and_exits_75() {
    let redis = RedisServer::start();
    let up = Standin::start(&["--pages", "3", "--delay", "150ms"]);
    let d = trending(&up, &redis.url(), &["US", "GB", "DE"], 3, "fail_closed");

    let run = spawn(&d, &["run"]);
    up.wait_for(3);
    signal(&run, "-TERM");
    let r = finish(run);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(r.stderr.contains("SIGTERM"), "{r:?}");
    assert!(r.stderr.contains("stopped: a stop signal arrived"), "{r:?}");
    assert_outputs_valid(&d, "trending");
    let written: BTreeSet<String> = d.outputs("trending").into_iter().collect();
    assert!(!written.is_empty() && written.len() < 9, "{written:?}");

    // The lock is free now (no wait), and the rerun resumes at the cursor:
    // pages written by the stopped run are not fetched again.
    let rerun = d.portion(&["run"]);
    assert_eq!(rerun.code, 0, "{rerun:?}");
    assert!(rerun.stderr.contains("run 2 starts at region"), "{rerun:?}");
    let counts = fetch_counts(&up);
    assert_eq!(counts.len(), 9);
    for f in &written {
        // trending.r000001.US.s0.p000001.json → (US, 1)
        let parts: Vec<&str> = f.split('.').collect();
        let key = (parts[2].to_string(), parts[4][1..].parse::<u32>().unwrap());
        assert_eq!(counts[&key], 1, "{f} was fetched again: {counts:?}");
    }
    assert!(
        counts.values().filter(|&&n| n == 2).count() <= 1,
        "{counts:?}"
    );
}

/// A next page whose request cannot be sent (its token makes the URL
/// longer than a request line holds) ends its region before any charge;
/// the other regions go on, and every unit charged went out as a request.
#[test]
fn a_next_page_that_cannot_be_sent_ends_its_region_uncharged() {
    let up = Standin::start(&["--pages", "3", "--long-tokens", "GB=70000"]);
    let d = Deployment::new("");
    let job = videos_job("trending", "main", &["US", "GB", "DE"], 3, &up.base());
    d.write(&deployment_yaml(
        &embedded_store(&d),
        WIDE,
        "fail_closed",
        &[job],
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("the next page's request cannot be made")
            && r.stderr.contains("the region ends here, the others go on"),
        "{r:?}"
    );
    assert!(r.stderr.len() < 20_000, "the token is not logged whole");
    let counts = fetch_counts(&up);
    let pages = |region: &str| counts.keys().filter(|(r, _)| r == region).count();
    assert_eq!(
        (pages("US"), pages("GB"), pages("DE")),
        (3, 1, 3),
        "{counts:?}"
    );
    let s = d.status_json();
    let used = s["credentials"][0]["pools"][0]["windows"][0]["used"].as_u64();
    assert_eq!(used, Some(up.seen().len() as u64), "charged = sent");

    // A first page that cannot be sent (its URL, from the file, too long):
    // the job stops before the charge, tick after tick.
    let long = format!("{}/youtube/v3/videos?pad={}", up.base(), "x".repeat(70_000));
    let job = videos_job("long", "main", &["US"], 1, &long);
    d.write(&deployment_yaml(
        &embedded_store(&d),
        WIDE,
        "fail_closed",
        &[job],
    ));
    let before = up.seen().len();
    for _ in 0..2 {
        let r = d.portion(&["run", "long"]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(r.stderr.contains("the URL cannot be sent"), "{r:?}");
        assert!(r.stderr.len() < 20_000, "the URL is not logged whole");
    }
    assert_eq!(up.seen().len(), before);
    let s = d.status_json();
    let by_job = &s["credentials"][0]["pools"][0]["windows"][0]["by_job"];
    assert_eq!(by_job.get("long"), None, "nothing charged: {by_job}");
}

#[test]
fn store_down_fail_closed_exits_69_before_any_request() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let jobs = [videos_job("trending", "main", &["US", "GB"], 1, &up.base())];
    // Port 1 on loopback: nothing listens there.
    d.write(&deployment_yaml(
        "redis://127.0.0.1:1/0",
        WIDE,
        "fail_closed",
        &jobs,
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 69, "{r:?}");
    assert!(
        r.stderr
            .contains("job trending: the store redis://127.0.0.1:1/0 is unreachable ("),
        "{r:?}"
    );
    assert!(
        r.stderr
            .contains("endpoint videos.list is fail_closed, so no request was sent"),
        "{r:?}"
    );
    assert!(up.seen().is_empty());
}

#[test]
fn store_down_fail_open_runs_unmetered_and_says_so() {
    let up = Standin::start(&[]);
    let d = trending(&up, "redis://127.0.0.1:1/0", &["US", "GB"], 1, "fail_open");
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr
            .contains("UNMETERED RUN: the store redis://127.0.0.1:1/0 is unreachable"),
        "{r:?}"
    );
    assert!(r.stderr.contains("2 calls (2 UNMETERED)"), "{r:?}");
    assert_eq!(up.seen().len(), 2);
}

#[test]
fn embedded_store_locked_past_its_busy_timeout_follows_the_policy() {
    // Both policies at once: each waits out the 10 s busy timeout.
    std::thread::scope(|s| {
        for (policy, code) in [("fail_closed", 69), ("fail_open", 0)] {
            s.spawn(move || {
                let up = Standin::start(&[]);
                let d = trending(&up, "embedded", &["US", "GB"], 1, policy);
                let path = d.path().join("ledger.sqlite3");
                portion::ledger::EmbeddedLedger::open(&path).unwrap(); // the schema
                // Another writer holds the file's write lock throughout.
                let holder = rusqlite::Connection::open(&path).unwrap();
                holder.execute_batch("BEGIN IMMEDIATE").unwrap();
                let started = Instant::now();
                let r = d.portion(&["run"]);
                let took = started.elapsed();
                holder.execute_batch("ROLLBACK").unwrap();
                eprintln!("{policy}: a locked embedded store ended the wait after {took:?}");
                assert_eq!(r.code, code, "{policy}: {r:?}");
                assert!(
                    took >= Duration::from_millis(9_500),
                    "{policy}: the busy timeout (10 s) ran out first: {took:?}"
                );
                let store = format!("embedded {}", path.display());
                if policy == "fail_closed" {
                    assert!(
                        r.stderr
                            .contains(&format!("job trending: the store {store} is unreachable (")),
                        "{r:?}"
                    );
                    assert!(
                        r.stderr.contains(
                            "endpoint videos.list is fail_closed, so no request was sent"
                        ),
                        "{r:?}"
                    );
                    assert!(up.seen().is_empty());
                } else {
                    assert!(
                        r.stderr
                            .contains(&format!("UNMETERED RUN: the store {store} is unreachable")),
                        "{r:?}"
                    );
                    assert!(r.stderr.contains("2 calls (2 UNMETERED)"), "{r:?}");
                    assert_eq!(up.seen().len(), 2);
                }
            });
        }
    });
}

#[test]
fn store_lost_mid_run_follows_the_policy() {
    for (policy, code) in [("fail_closed", 69), ("fail_open", 0)] {
        let mut redis = RedisServer::start();
        let up = Standin::start(&["--pages", "3", "--delay", "200ms"]);
        let d = Deployment::new("");
        let jobs = [videos_job("trending", "main", &["US", "GB"], 3, &up.base())];
        d.write(&deployment_yaml(&redis.url(), WIDE, policy, &jobs));
        let run = spawn(&d, &["run"]);
        up.wait_for(1);
        redis.kill();
        let r = finish(run);
        assert_eq!(r.code, code, "{policy}: {r:?}");
        let n = up.seen().len();
        if policy == "fail_closed" {
            // The exact message: which job, which store, why, which endpoint.
            let url = redis.url();
            let line = r
                .stderr
                .lines()
                .find(|l| l.contains("ERROR"))
                .unwrap_or_else(|| panic!("no error line: {r:?}"));
            let message = line.split_once("ERROR ").unwrap().1;
            let prefix = format!("job trending: the store {url} is unreachable (");
            assert!(message.starts_with(&prefix), "{message}");
            assert!(
                message.ends_with("); endpoint videos.list is fail_closed, so the request was not sent job=\"trending\""),
                "{message}"
            );
            assert!(n < 6, "stopped early: {n}");
        } else {
            assert!(r.stderr.contains("UNMETERED"), "{r:?}");
            assert_eq!(n, 6);
        }
    }
}

#[test]
fn sigint_stops_cleanly_too() {
    let up = Standin::start(&["--pages", "3", "--delay", "150ms"]);
    let d = trending(&up, "embedded", &["US", "GB"], 3, "fail_closed");
    let run = spawn(&d, &["run"]);
    up.wait_for(2);
    signal(&run, "-INT");
    let r = finish(run);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(
        r.stderr.contains("SIGINT: stopping at the next safe point"),
        "{r:?}"
    );
    assert_outputs_valid(&d, "trending");
    // Released: the next run starts at once and finishes the round.
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
}
