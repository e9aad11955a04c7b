//! Waiting inside a run (`run --wait`, a job's `max_wait`): a charge the
//! ledger refuses, with its units free within the bound, is waited for and
//! charged again; past the bound the run stops with 75 as it always did; a
//! stop signal ends a wait at once; the lock stays the run's across a wait
//! longer than its time to live. The real binary, both stores, the
//! stand-in upstream.

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::mpsc;
use std::time::Duration;

use crate::common::deployment::{
    self, Deployment, deployment_yaml, embedded_store, finish, kill, videos_job,
};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;

/// The stores each test runs on: the embedded one, and a real Redis.
fn stores() -> Vec<(Option<RedisServer>, &'static str)> {
    vec![(None, "embedded"), (Some(RedisServer::start()), "redis")]
}

fn store_of(d: &Deployment, redis: &Option<RedisServer>) -> String {
    redis
        .as_ref()
        .map_or_else(|| embedded_store(d), RedisServer::url)
}

/// `portion ARGS` started, its stderr read line by line on a thread (the
/// lines come through the receiver; all of them once it ends).
fn start(d: &Deployment, args: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let mut child = deployment::spawn(&mut d.cmd(args));
    let stderr = child.stderr.take().expect("stderr is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// The first line from `lines` that holds `text` (within a bound that only
/// a hung run reaches), and every line before it.
fn wait_for_line(lines: &mpsc::Receiver<String>, text: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        match lines.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                let found = line.contains(text);
                seen.push(line);
                if found {
                    return seen;
                }
            }
            Err(e) => panic!("no line with {text:?} ({e}); saw {seen:#?}"),
        }
    }
}

/// Three regions of one page under a budget of 2 a second: the third
/// charge is refused with its units free within the second. Without a
/// wait the run stops there (75); with `--wait`, or the job's
/// `max_wait`, it waits and finishes (0), every region fetched once.
#[test]
fn a_run_waits_for_refused_units_and_finishes() {
    // (a store of its own each time: no cursor or charge carried over)
    for how in ["none", "flag", "yaml"] {
        for (redis, name) in stores() {
            let up = Standin::start(&[]);
            let d = Deployment::new("");
            let mut job = videos_job("trending", "main", &["US", "GB", "JP"], 1, &up.base());
            if how == "yaml" {
                job = job.replacen("    regions:", "    max_wait: 5s\n    regions:", 1);
                assert!(job.contains("max_wait"), "{job}");
            }
            let windows = ["{ limit: 2, per: 1s }"];
            d.write(&deployment_yaml(
                &store_of(&d, &redis),
                &windows,
                "fail_closed",
                &[job],
            ));
            let r = match how {
                "flag" => d.portion(&["run", "--wait", "5s"]),
                _ => d.portion(&["run"]),
            };
            let fetched: Vec<String> = up.seen().into_iter().map(|s| s.region).collect();
            if how == "none" {
                // (the refusal the others wait for really comes)
                assert_eq!(r.code, 75, "{name}: {r:?}");
                assert_eq!(fetched, ["US", "GB"], "{name}");
                assert!(!r.stderr.contains("waiting"), "{name}: {r:?}");
                continue;
            }
            assert_eq!(r.code, 0, "{name} {how}: {r:?}");
            assert_eq!(fetched, ["US", "GB", "JP"], "{name} {how}");
            assert!(
                r.stderr.contains("pool units's 1s window is full: waiting"),
                "{name} {how}: {r:?}"
            );
        }
    }
}

/// A refusal whose units free up only past the bound stops the run as
/// before: 75, the cursor at the region refused, nothing waited for.
#[test]
fn past_the_bound_the_run_stops_with_75() {
    for (redis, name) in stores() {
        let up = Standin::start(&[]);
        let d = Deployment::new("");
        let job = videos_job("trending", "main", &["US", "GB"], 1, &up.base());
        d.write(&deployment_yaml(
            &store_of(&d, &redis),
            &["{ limit: 1, per: 1h }"],
            "fail_closed",
            &[job],
        ));
        let r = d.portion(&["run", "--wait", "10m"]);
        assert_eq!(r.code, 75, "{name}: {r:?}");
        assert!(!r.stderr.contains("waiting"), "{name}: {r:?}");
        assert!(r.stderr.contains("next run starts at GB"), "{name}: {r:?}");
        assert_eq!(up.seen().len(), 1, "{name}");
    }
}

/// SIGTERM while the run waits (for an hour) ends it at once: 75, the
/// cursor saved at the region that waited, which the next run fetches.
#[test]
fn a_stop_signal_during_a_wait_ends_the_run_with_its_cursor_saved() {
    for (redis, name) in stores() {
        let up = Standin::start(&[]);
        let d = Deployment::new("");
        let job = videos_job("trending", "main", &["US", "GB"], 1, &up.base());
        d.write(&deployment_yaml(
            &store_of(&d, &redis),
            &["{ limit: 1, per: 1h }"],
            "fail_closed",
            &[job],
        ));
        let (child, lines) = start(&d, &["run", "--wait", "2h"]);
        wait_for_line(&lines, "waiting");
        // `status` says what the run waits for (the store holds it before
        // the run logs it), text and JSON.
        let s = d.portion(&["status"]);
        assert!(
            s.stdout.contains("waiting for 1 units of pool units until"),
            "{name}: {s:?}"
        );
        let s = d.portion(&["status", "--json"]);
        let json: serde_json::Value = serde_json::from_str(&s.stdout).unwrap();
        let waiting = &json["credentials"][0]["jobs"][0]["waiting"];
        assert_eq!(waiting["pool"], "units", "{name}: {json:#}");
        assert_eq!(waiting["units"], 1, "{name}: {json:#}");
        let signalled = std::time::Instant::now();
        kill("-TERM", child.id());
        let r = finish(child);
        // (an hour's wait cut short: well within the 10 s a loaded
        // machine may take to end a process)
        assert!(
            signalled.elapsed() < Duration::from_secs(10),
            "{name}: the wait was not cut short"
        );
        let rest: Vec<String> = lines.try_iter().collect();
        assert_eq!(r.code, 75, "{name}: {rest:#?}");
        assert!(
            rest.iter().any(|l| l.contains("next run starts at GB")),
            "{name}: {rest:#?}"
        );
        assert_eq!(up.seen().len(), 1, "{name}");
        // (the wait ended: no longer shown)
        let s = d.portion(&["status"]);
        assert!(!s.stdout.contains("waiting"), "{name}: {s:?}");
    }
}

/// A wait of some 8 s under a lock that lives 2 s: the run renews its
/// lock while it waits (seen: four renewals after the wait began, past the
/// lock's life), so a second run started then finds it busy and sends
/// nothing; the first finishes every region.
#[test]
fn the_lock_is_kept_across_a_wait_longer_than_its_ttl() {
    for (redis, name) in stores() {
        let up = Standin::start(&[]);
        let d = Deployment::new("");
        let job = videos_job("trending", "main", &["US", "GB"], 1, &up.base());
        // (`deployment_yaml` sets lock_ttl: 2s)
        let yaml = deployment_yaml(
            &store_of(&d, &redis),
            &["{ limit: 1, per: 8s }"],
            "fail_closed",
            &[job],
        );
        assert!(yaml.contains("lock_ttl: 2s"), "{yaml}");
        d.write(&yaml);
        let (child, lines) = start(&d, &["-v", "run", "--wait", "30s"]);
        wait_for_line(&lines, "waiting");
        // A third of the lock's life apart: four renewals outlive it.
        for _ in 0..4 {
            wait_for_line(&lines, "run lock renewed");
        }
        let other = d.portion(&["run"]);
        let r = finish(child);
        let rest: Vec<String> = lines.try_iter().collect();
        assert_eq!(r.code, 0, "{name}: {rest:#?}");
        assert_eq!(other.code, 75, "{name}: {other:?}");
        assert!(other.stderr.contains("lock"), "{name}: {other:?}");
        let fetched: Vec<String> = up.seen().into_iter().map(|s| s.region).collect();
        assert_eq!(fetched, ["US", "GB"], "{name}: the second run sent nothing");
    }
}

/// GitHub's `X-RateLimit-Remaining: 0` on a 200 blocks the credential until
/// its reset; a run with `--wait` waits for it and goes on: every page
/// fetched in one run (0), none refused by the upstream (the stand-in's
/// 403 past its limit never comes), the pages past the first window sent
/// only after its reset.
#[test]
fn a_200_saying_nothing_remains_is_waited_out_to_its_reset() {
    for (redis, name) in stores() {
        // 2 requests a 2 s window; 5 pages of one repository.
        let up = Standin::start(&[
            "--pages",
            "5",
            "--github-limit",
            "2",
            "--github-window",
            "2s",
        ]);
        let d = Deployment::new("");
        let step = crate::common::yaml::Step::new("videos.list")
            .url(&format!("{}/repos/{{region}}/issues", up.base()))
            .request("headers", "{ Authorization: \"Bearer {secret}\" }")
            .paginate("{ link: next, max_pages: 10 }");
        let job = crate::common::yaml::Job::new("issues", "main")
            .regions(&["o/r"])
            .step(step)
            .to_string();
        // (the ledger's budget is wide: only the upstream's counts stop it)
        d.write(&deployment_yaml(
            &store_of(&d, &redis),
            crate::common::deployment::WIDE,
            "fail_closed",
            &[job],
        ));
        let r = d.portion(&["run", "--wait", "10s"]);
        assert_eq!(r.code, 0, "{name}: {r:?}");
        let seen = up.seen();
        let statuses: Vec<u16> = seen.iter().map(|s| s.status).collect();
        assert_eq!(statuses, [200; 5], "{name}: {r:?}");
        assert!(
            r.stderr.contains("the credential is blocked"),
            "{name}: the wait was for the block: {r:?}"
        );
        // (pages 3 and 5 went after a reset: 2 s windows)
        let at: Vec<u64> = seen.iter().map(|s| s.at_us).collect();
        assert!(at[2] - at[1] > 500_000, "{name}: {at:?}");
    }
}

/// Requests side by side wait in one line: when the units of a full
/// window free up, each request behind the first charges again rather
/// than sleeping out the time it was told when refused (a window's length
/// more, for nothing). Four in flight, 4 units every 3 s, 12 regions: each
/// request goes out within the window's length (and a margin) of the one
/// whose unit it takes, four before it.
#[test]
fn requests_side_by_side_wait_once_and_go_on_as_units_free() {
    for (redis, name) in stores() {
        let up = Standin::start(&[]);
        let d = Deployment::new("");
        let regions: Vec<String> = (0..12).map(|i| format!("R{i:02}")).collect();
        let regions: Vec<&str> = regions.iter().map(String::as_str).collect();
        let job = videos_job("trending", "main", &regions, 1, &up.base()).replacen(
            "    regions:",
            "    concurrency: 4\n    regions:",
            1,
        );
        d.write(&deployment_yaml(
            &store_of(&d, &redis),
            &["{ limit: 4, per: 3s }"],
            "fail_closed",
            &[job],
        ));
        let r = d.portion(&["run", "--wait", "10s"]);
        assert_eq!(r.code, 0, "{name}: {r:?}");
        let mut at: Vec<u64> = up.seen().iter().map(|s| s.at_us).collect();
        at.sort();
        assert_eq!(at.len(), 12, "{name}");
        for k in 4..12 {
            let gap = at[k] - at[k - 4];
            assert!(
                gap < 4_500_000,
                "{name}: request {k} went {gap} µs after the one whose unit it took (the window is 3 s): {at:?}"
            );
        }
    }
}
