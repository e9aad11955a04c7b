//! `concurrency: N` on a job: up to N requests of one run in flight at
//! once, regions side by side, each region's pages in order; a stop or a
//! kill leaves a cursor from which the next run fetches no written page
//! again and skips none. The stand-in holds every answer (`--delay`) and
//! logs how many requests it had in flight when each arrived.

use std::collections::{BTreeMap, BTreeSet};

use crate::common::deployment::{Deployment, WIDE, deployment_yaml, embedded_store, videos_job};
use crate::common::redis::RedisServer;
use crate::common::standin::{Seen, Standin};
use crate::common::yaml::limit;

/// `videos_job` with `concurrency: n`.
fn job(regions: &[&str], pages: u32, n: usize, up: &Standin) -> String {
    videos_job("trending", "main", regions, pages, &up.base()).replace(
        "    steps:\n",
        &format!("    concurrency: {n}\n    steps:\n"),
    )
}

fn regions(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("R{i}")).collect()
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn write(d: &Deployment, store: &str, windows: &[&str], job: &str) {
    d.write(&deployment_yaml(
        store,
        windows,
        "fail_closed",
        &[job.to_string()],
    ));
}

/// (region, page) → how many times the stand-in served it.
fn counts(seen: &[Seen]) -> BTreeMap<(String, u32), usize> {
    let mut m = BTreeMap::new();
    for s in seen {
        *m.entry((s.region.clone(), s.page)).or_insert(0) += 1;
    }
    m
}

/// Each region's pages, in the order the stand-in saw them, are 0, 1, 2, …
/// (a region's next page only once its previous one was answered).
fn assert_pages_in_order(seen: &[Seen]) {
    let mut next: BTreeMap<&str, u32> = BTreeMap::new();
    for s in seen {
        let want = next.entry(&s.region).or_insert(0);
        assert_eq!(s.page, *want, "region {} out of order: {seen:?}", s.region);
        *want += 1;
    }
}

/// [`assert_pages_in_order`] for runs that go round more than once: a
/// region's page 0 starts its next round.
fn assert_pages_in_order_per_round(seen: &[Seen]) {
    let mut next: BTreeMap<&str, u32> = BTreeMap::new();
    for s in seen {
        let want = next.entry(&s.region).or_insert(0);
        if s.page == 0 {
            *want = 0;
        }
        assert_eq!(s.page, *want, "region {} out of order: {seen:?}", s.region);
        *want += 1;
    }
}

fn max_in_flight(seen: &[Seen]) -> u64 {
    seen.iter().map(|s| s.in_flight).max().unwrap_or(0)
}

fn used(d: &Deployment) -> serde_json::Value {
    d.status_json()["credentials"][0]["pools"][0]["windows"][0]["used"].clone()
}

#[test]
fn n_requests_are_in_flight_at_once_and_each_regions_pages_arrive_in_order() {
    let redis = RedisServer::start();
    let up = Standin::start(&["--pages", "3", "--delay", "300ms"]);
    let d = Deployment::new("");
    let r8 = regions(8);
    write(&d, &redis.url(), WIDE, &job(&refs(&r8), 3, 4, &up));

    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let seen = up.seen();
    // Four at once (each held 300 ms), never more.
    assert_eq!(max_in_flight(&seen), 4, "{seen:?}");
    assert_pages_in_order(&seen);
    // Every page once; the first four regions of the round went first.
    assert!(counts(&seen).values().all(|&c| c == 1), "{seen:?}");
    assert_eq!(seen.len(), 24);
    let first: BTreeSet<&str> = seen[..4].iter().map(|s| s.region.as_str()).collect();
    assert_eq!(first, BTreeSet::from(["R0", "R1", "R2", "R3"]));
    assert_eq!(d.outputs("trending").len(), 24);
    assert!(
        r.stderr.contains(
            "finished; 24 calls, spent units 24; regions done 8/8; 24 pages written; next run starts at R0 step 0 page 0"
        ),
        "{r:?}"
    );
    assert_eq!(used(&d), 24);
}

#[test]
fn a_rejection_stops_sending_and_the_next_run_neither_refetches_nor_skips() {
    for redis in [None, Some(RedisServer::start())] {
        let up = Standin::start(&["--pages", "3", "--delay", "200ms"]);
        let d = Deployment::new("");
        let store = redis
            .as_ref()
            .map_or_else(|| embedded_store(&d), RedisServer::url);
        let r6 = regions(6);
        let job = job(&refs(&r6), 3, 4, &up);
        write(&d, &store, &["{ limit: 7, per: 1h }"], &job);

        let r = d.portion(&["run"]);
        assert_eq!(r.code, 75, "{r:?}");
        assert!(r.stderr.contains("the quota said no"), "{r:?}");
        // Seven charged, seven sent, and the ones in flight at the
        // rejection finished and were written; the budget holds.
        let seen = up.seen();
        assert_eq!(seen.len(), 7, "{seen:?}");
        assert!(max_in_flight(&seen) > 1, "{seen:?}");
        assert_eq!(d.outputs("trending").len(), 7);
        assert!(
            r.stderr.contains("7 calls, spent units 7;") && r.stderr.contains("7 pages written"),
            "{r:?}"
        );
        assert_eq!(used(&d), 7);

        // A budget that fits the rest: the next run fetches each page
        // not yet written, once, and none that was.
        write(&d, &store, &["{ limit: 100, per: 1h }"], &job);
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        // Four regions were under way: the cursor named those after the first.
        assert!(
            r.stderr
                .contains("region(s) after it that an earlier run started or served"),
            "{r:?}"
        );
        let seen = up.seen();
        assert_eq!(seen.len(), 18, "{seen:?}");
        assert!(counts(&seen).values().all(|&c| c == 1), "{seen:?}");
        assert_eq!(counts(&seen).len(), 18);
        assert_pages_in_order(&seen);
        assert_eq!(d.outputs("trending").len(), 18);
        assert!(r.stderr.contains("11 calls, spent units 11;"), "{r:?}");
        assert_eq!(used(&d), 18);
    }
}

#[test]
fn a_kill_9_mid_run_redoes_at_most_n_pages() {
    let redis = RedisServer::start();
    let up = Standin::start(&["--pages", "3", "--delay", "200ms"]);
    let d = Deployment::new("");
    let r8 = regions(8);
    write(&d, &redis.url(), WIDE, &job(&refs(&r8), 3, 4, &up));

    let mut victim = crate::common::deployment::spawn(&mut d.cmd(&["run"]));
    up.wait_for(10);
    victim.kill().unwrap(); // SIGKILL: no cleanup at all
    victim.wait().unwrap();
    assert!(max_in_flight(&up.seen()) > 1);

    let rerun = d.run_after_killed_lock();
    assert_eq!(rerun.code, 0, "{rerun:?}");
    let seen = up.seen();
    let fetched = counts(&seen);
    assert_eq!(fetched.len(), 24, "every page fetched: {fetched:?}");
    let redone: usize = fetched.values().map(|c| c - 1).sum();
    assert!(redone <= 4, "{redone} pages fetched twice: {fetched:?}");
    // Every page is in a file; only redone ones twice.
    let files = d.outputs("trending");
    assert!(files.iter().all(|f| !f.starts_with('.')), "{files:?}");
    assert!(files.len() >= 24 && files.len() <= 24 + redone, "{files:?}");
    let pages: BTreeSet<String> = files.iter().map(|f| f[16..].to_string()).collect();
    assert_eq!(pages.len(), 24, "{files:?}");
}

#[test]
fn round_robin_holds_across_ticks() {
    let up = Standin::start(&["--pages", "3", "--delay", "50ms"]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    let job = job(&["US", "GB", "DE"], 3, 2, &up);
    // Four more units each tick (the window outlasts the test); a tick
    // that serves its whole round ends with 0, with units left.
    for tick in 1..=6 {
        let windows = limit(4 * tick as u64, "1h");
        write(&d, &store, &[&windows], &job);
        let r = d.portion(&["run"]);
        let seen = up.seen();
        match r.code {
            75 => assert_eq!(seen.len(), 4 * tick, "tick {tick}: {seen:?}"),
            0 => assert!(seen.len() <= 4 * tick, "tick {tick}: {seen:?}"),
            _ => panic!("tick {tick}: {r:?}"),
        }
        assert_pages_in_order_per_round(&seen);
        if tick == 1 {
            // Two regions side by side: two pages of each, not three of US.
            let pages: BTreeSet<(&str, u32)> =
                seen.iter().map(|s| (s.region.as_str(), s.page)).collect();
            let want = BTreeSet::from([("US", 0), ("US", 1), ("GB", 0), ("GB", 1)]);
            assert_eq!(pages, want, "{seen:?}");
        }
        // No page twice before every page once: at most one apart.
        let mut c = counts(&seen);
        for r in ["US", "GB", "DE"] {
            for p in 0..3 {
                c.entry((r.to_string(), p)).or_insert(0);
            }
        }
        let (lo, hi) = (c.values().min().unwrap(), c.values().max().unwrap());
        assert!(hi - lo <= 1, "tick {tick}: {c:?}");
    }
}

#[test]
fn a_signal_abandons_the_requests_in_flight_and_keeps_their_charges() {
    let redis = RedisServer::start();
    // Answers take 3 s: the four sent first are still in flight at the signal.
    let up = Standin::start(&["--pages", "1", "--delay", "3s"]);
    let d = Deployment::new("");
    let r8 = regions(8);
    write(&d, &redis.url(), WIDE, &job(&refs(&r8), 1, 4, &up));

    let victim = crate::common::deployment::spawn(&mut d.cmd(&["run"]));
    up.wait_for(4);
    crate::common::deployment::kill("-TERM", victim.id());
    let r = crate::common::deployment::finish(victim);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(r.stderr.contains("a stop signal arrived"), "{r:?}");
    assert_eq!(up.seen().len(), 4);
    assert!(d.outputs("trending").is_empty());
    assert!(
        r.stderr.contains("4 calls, spent units 4;")
            && r.stderr
                .contains("regions done 0/8; 0 pages written; next run starts at R0 step 0 page 0"),
        "{r:?}"
    );
    // Charged all the same; the lock is released, so the next run starts
    // at once and redoes those four, then the rest.
    assert_eq!(used(&d), 4);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(up.seen().len(), 12);
    assert_eq!(d.outputs("trending").len(), 8);
}

#[test]
fn concurrency_outside_1_to_64_exits_78_naming_the_field() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    for bad in ["0", "65", "two"] {
        let yaml =
            job(&["US"], 1, 1, &up).replace("concurrency: 1", &format!("concurrency: {bad}"));
        write(&d, &store, WIDE, &yaml);
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 78, "{bad}: {r:?}");
        assert!(r.stderr.contains("jobs.trending.concurrency"), "{r:?}");
    }
    assert!(up.seen().is_empty());
}
