//! Failed inputs (issue 25, part 3): an input whose first page the
//! upstream refuses for itself (the stand-in's 404 for an id it lacks) is
//! recorded as failed, the run goes on with the others and exits 1; a
//! rerun does not send it again; `portion reset JOB --failed --yes` has the
//! next run do exactly those again. Ten refused, none answered, stop the
//! job. In both stores.

use std::collections::BTreeMap;

use crate::common::deployment::{Deployment, WIDE, embedded_store, main_units};
use crate::common::inputs::per_key;
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;
use crate::common::yaml::{Job, Step};

/// A once-job `list` over ids.txt: one videos.list call per input, its
/// key as the region code.
fn yaml(store: &str, base: &str, concurrency: usize) -> String {
    yaml_once(store, base, concurrency, true)
}

fn yaml_once(store: &str, base: &str, concurrency: usize, once: bool) -> String {
    main_units(store, WIDE)
        .endpoint("videos.list", "{ units: 1 }")
        .job(
            Job::new("list", "main")
                .set("inputs", "{ file: ids.txt }")
                .set("once", &once.to_string())
                .set("concurrency", &concurrency.to_string())
                .step(
                    Step::new("videos.list")
                        .url(&format!("{base}/youtube/v3/videos"))
                        .query(r#"{ part: snippet, regionCode: "{key}", key: "{secret}" }"#),
                ),
        )
        .render()
}

/// The embedded store's map of the job's failed inputs, each value read.
fn failed_map(d: &Deployment) -> BTreeMap<String, serde_json::Value> {
    let db = rusqlite::Connection::open(d.path().join("ledger.sqlite3")).unwrap();
    let mut rows = db
        .prepare("SELECT field, value FROM job_map WHERE map = 'list:inputs:failed'")
        .unwrap();
    rows.query_map([], |r| Ok((r.get(0)?, r.get::<_, String>(1)?)))
        .unwrap()
        .map(|r| {
            let (k, v) = r.unwrap();
            (k, serde_json::from_str(&v).unwrap())
        })
        .collect()
}

fn ids(d: &Deployment, n: usize) {
    let text: String = (0..n).map(|i| format!("K{i}\n")).collect();
    std::fs::write(d.path().join("ids.txt"), text).unwrap();
}

#[test]
fn a_failed_input_is_recorded_not_retried_and_done_again_after_reset_failed() {
    for redis in [None, Some(RedisServer::start())] {
        let up = Standin::start(&["--missing", "K3", "--missing", "K7"]);
        let d = Deployment::new("");
        let store = redis
            .as_ref()
            .map_or_else(|| embedded_store(&d), RedisServer::url);
        ids(&d, 10);
        d.write(&yaml(&store, &up.base(), 2));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 1, "{r:?}");
        let once: BTreeMap<String, usize> = (0..10).map(|i| (format!("K{i}"), 1)).collect();
        assert_eq!(per_key(&up), once, "{r:?}");
        assert_eq!(d.outputs("list").len(), 8, "{r:?}");
        assert!(
            r.stderr.contains(
                "inputs done 10, 0 skipped, 2 of them failed this run (listed by `portion status`)"
            ),
            "{r:?}"
        );
        assert!(r.stderr.contains("input K3 (line 4) failed"), "{r:?}");
        if redis.is_none() {
            let failed = failed_map(&d);
            assert_eq!(failed.keys().collect::<Vec<_>>(), ["K3", "K7"]);
            let k3 = &failed["K3"];
            assert_eq!(
                (&k3["line"], &k3["offset"], &k3["status"]),
                (&4.into(), &9.into(), &404.into())
            );
            let excerpt = k3["excerpt"].as_str().unwrap();
            assert!(excerpt.starts_with(r#"{"error":{"code":404,"#), "{excerpt}");
            assert!(excerpt.chars().count() <= 201, "{excerpt}");
        }

        // They are over: a rerun sends nothing.
        let r = d.portion(&["run"]);
        assert_eq!((r.code, up.seen().len()), (0, 10), "{r:?}");

        // Asked for, the next run sends those two again, alone (refused
        // again: failed again, and not sent by the run after).
        let r = d.portion(&["reset", "list", "--failed", "--yes"]);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(r.stdout.contains("2 failed input(s) to do again"), "{r:?}");
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 1, "{r:?}");
        let mut twice = once.clone();
        (*twice.get_mut("K3").unwrap(), *twice.get_mut("K7").unwrap()) = (2, 2);
        assert_eq!(per_key(&up), twice, "{r:?}");
        let r = d.portion(&["run"]);
        assert_eq!((r.code, up.seen().len()), (0, 12), "{r:?}");

        // The upstream has them now: done, and not failed any more.
        let up = Standin::start(&[]);
        d.write(&yaml(&store, &up.base(), 2));
        let r = d.portion(&["reset", "list", "--failed", "--yes"]);
        assert_eq!(r.code, 0, "{r:?}");
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        let pair: BTreeMap<String, usize> = [("K3".into(), 1), ("K7".into(), 1)].into();
        assert_eq!(per_key(&up), pair, "{r:?}");
        assert_eq!(d.outputs("list").len(), 10, "{r:?}");
        let r = d.portion(&["run"]);
        assert_eq!((r.code, up.seen().len()), (0, 2), "{r:?}");
        let r = d.portion(&["reset", "list", "--failed", "--yes"]);
        assert!(r.stdout.contains("0 failed input(s)"), "{r:?}");
    }
}

#[test]
fn ten_inputs_refused_and_none_answered_stop_the_job() {
    let missing: Vec<String> = (0..12).map(|i| format!("K{i}")).collect();
    let args: Vec<&str> = missing.iter().flat_map(|k| ["--missing", k]).collect();
    let up = Standin::start(&args);
    let d = Deployment::new("");
    ids(&d, 12);
    d.write(&yaml(&embedded_store(&d), &up.base(), 1));
    let r = d.portion(&["run"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert_eq!(up.seen().len(), 10, "{r:?}");
    assert!(
        r.stderr
            .contains("the first 10 inputs of this run were refused and none answered"),
        "{r:?}"
    );
}

#[test]
fn a_job_not_once_keeps_the_failures_of_its_last_walk_alone() {
    let up = Standin::start(&["--missing", "K1"]);
    let d = Deployment::new("");
    ids(&d, 3);
    d.write(&yaml_once(&embedded_store(&d), &up.base(), 1, false));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(failed_map(&d).keys().collect::<Vec<_>>(), ["K1"], "{r:?}");
    // The next walk does every input again: K1 answered now, so no
    // failure is left.
    let up = Standin::start(&[]);
    d.write(&yaml_once(&embedded_store(&d), &up.base(), 1, false));
    let r = d.portion(&["run"]);
    assert_eq!((r.code, up.seen().len()), (0, 3), "{r:?}");
    assert!(failed_map(&d).is_empty(), "{r:?}");
}

/// With many inputs in flight, the stop for ten refused lets the requests
/// already charged finish and records each refusal: the units charged are
/// the requests the upstream got, and the next run sends none of them
/// again (the stop used to abandon them, charged, and the next run charged
/// them once more).
#[test]
fn the_stop_for_refused_inputs_records_every_request_charged() {
    let missing: Vec<String> = (0..60).map(|i| format!("K{i}")).collect();
    let mut args: Vec<&str> = missing.iter().flat_map(|k| ["--missing", k]).collect();
    args.extend(["--delay", "30ms"]);
    let up = Standin::start(&args);
    let d = Deployment::new("");
    ids(&d, 60);
    d.write(&yaml(&embedded_store(&d), &up.base(), 32));
    let used = |d: &Deployment| {
        d.status_json()["credentials"][0]["pools"][0]["windows"][0]["used"]
            .as_u64()
            .unwrap()
    };
    for run in 1..=2 {
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(
            r.stderr
                .contains("of this run were refused and none answered"),
            "{r:?}"
        );
        let sent = up.seen().len();
        assert!(
            sent > 10,
            "run {run}: more than 10 in flight: {sent}: {r:?}"
        );
        assert_eq!(used(&d), sent as u64, "run {run}: charged = sent: {r:?}");
        assert_eq!(
            failed_map(&d).len(),
            sent,
            "run {run}: each recorded: {r:?}"
        );
        let twice: Vec<_> = per_key(&up).into_iter().filter(|(_, n)| *n > 1).collect();
        assert!(twice.is_empty(), "run {run}: sent twice: {twice:?}: {r:?}");
    }
}

/// A key that cannot be put in the request (`..` as a path segment would
/// move it to another path) fails that input, uncharged and named by its
/// line; the inputs after it are done (it used to stop the job at that
/// input on every run).
#[test]
fn an_input_whose_request_cannot_be_made_fails_alone() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    std::fs::write(d.path().join("ids.txt"), "k1\n..\nk2\na/../b\nk3\n").unwrap();
    let yaml = yaml(&embedded_store(&d), &up.base(), 1)
        .replace("/youtube/v3/videos", "/repos/{key}/issues");
    assert!(yaml.contains("/repos/{key}/issues"), "{yaml}");
    d.write(&yaml);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    let keys: Vec<String> = up.seen().iter().map(|s| s.path.clone()).collect();
    assert_eq!(keys.len(), 3, "{keys:?} {r:?}");
    assert!(r.stderr.contains("input .. (line 2) failed"), "{r:?}");
    assert!(r.stderr.contains("input a/../b (line 4) failed"), "{r:?}");
    let failed = failed_map(&d);
    assert_eq!(failed.keys().collect::<Vec<_>>(), ["..", "a/../b"]);
    assert_eq!(failed[".."]["status"], 0);
    let status = d.portion(&["status"]);
    assert!(
        status
            .stdout
            .contains("failed: .. (line 2): its request cannot be made"),
        "{status:?}"
    );
    let used = d.status_json()["credentials"][0]["pools"][0]["windows"][0]["used"].clone();
    assert_eq!(used, 3, "only the requests sent are charged");
    let r = d.portion(&["run"]);
    assert_eq!((r.code, up.seen().len()), (0, 3), "{r:?}");
}
