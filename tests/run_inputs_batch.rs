//! Inputs in batches (issue 25, part 5: the backfill's 50 ids a call):
//! `inputs: { file, batch: N }` sends N inputs a request, their keys in
//! `{batch}` (here the region code, so the stand-in's log shows each
//! request's keys). Each input once, the last batch short; a run stopped
//! by its budget, then resumed; a kill -9 redoes at most concurrency x
//! batch inputs and skips none; `status --json` counts inputs and paces
//! their requests; a refused batch fails each of its inputs; bad `batch`
//! values are 78. In both stores where a store is involved.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::json;

use crate::common::deployment::{Deployment, WIDE, kill, main_units, spawn};
use crate::common::inputs::{keys, stores, write};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;
use crate::common::wait_until;
use crate::common::yaml::{Job, Step};

/// A once-job `list` over ids.txt, `batch` inputs a videos.list call (their
/// keys as the region code), `concurrency` at once, within `windows`.
fn yaml(store: &str, base: &str, batch: &str, concurrency: usize, windows: &[&str]) -> String {
    main_units(store, windows)
        .endpoint("videos.list", "{ units: 1 }")
        .job(
            Job::new("list", "main")
                .set("inputs", &format!("{{ file: ids.txt, batch: {batch} }}"))
                .set("once", "true")
                .set("concurrency", &concurrency.to_string())
                .step(
                    Step::new("videos.list")
                        .url(&format!("{base}/youtube/v3/videos"))
                        .query(r#"{ part: snippet, regionCode: "{batch}", key: "{secret}" }"#),
                ),
        )
        .render()
}

/// The keys of each request the stand-in saw, in the order it saw them.
fn sent(up: &Standin) -> Vec<Vec<String>> {
    up.seen()
        .iter()
        .map(|s| s.region.split(',').map(String::from).collect())
        .collect()
}

/// How many times each key was sent.
fn per_key(batches: &[Vec<String>]) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for k in batches.concat() {
        *n.entry(k).or_default() += 1;
    }
    n
}

fn sorted(mut v: Vec<Vec<String>>) -> Vec<Vec<String>> {
    v.sort();
    v
}

/// `keys` in batches of `n`, as the file's order makes them.
fn chunks(keys: &[String], n: usize) -> Vec<Vec<String>> {
    keys.chunks(n).map(<[String]>::to_vec).collect()
}

fn inputs_status(d: &Deployment) -> serde_json::Value {
    d.status_json()["credentials"][0]["jobs"][0]["inputs"].clone()
}

#[test]
fn each_request_carries_the_next_batch_of_keys_the_last_one_short() {
    for redis in [None, Some(RedisServer::start())] {
        let up = Standin::start(&[]);
        let d = Deployment::new("");
        let store = stores(&d, &redis);
        // K0..K22, then K3 again (a repeat, skipped) and a blank line.
        let mut text = keys(0..23).join("\n") + "\nK3\n\n";
        write(&d, "ids.txt", &text);
        d.write(&yaml(&store, &up.base(), "5", 2, WIDE));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        // 5 requests, the file's batches of 5 (in any order: 2 at once),
        // the last of 3; the repeated key in none.
        assert_eq!(sorted(sent(&up)), sorted(chunks(&keys(0..23), 5)), "{r:?}");
        assert!(
            r.stderr.contains("line 24: key K3 again (first on line 4)"),
            "{r:?}"
        );
        assert_eq!(d.outputs("list").len(), 5);
        let used = &d.status_json()["credentials"][0]["pools"][0]["windows"][0]["used"];
        assert_eq!(used, 5, "a unit a request");
        // Counted in inputs, not requests.
        let inputs = inputs_status(&d);
        assert_eq!(
            (&inputs["done"], &inputs["skipped"], &inputs["left"]),
            (&json!(23), &json!(2), &json!(0)),
            "{inputs}"
        );

        // Nothing left: nothing sent. Lines appended: a later batch.
        let r = d.portion(&["run"]);
        assert_eq!((r.code, up.seen().len()), (0, 5), "{r:?}");
        text.push_str("K23\nK24\n");
        write(&d, "ids.txt", &text);
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(sent(&up)[5..], [keys(23..25)], "{r:?}");
    }
}

#[test]
fn a_batched_run_stopped_by_its_budget_resumes_and_sends_each_key_once() {
    for redis in [None, Some(RedisServer::start())] {
        let up = Standin::start(&[]);
        let d = Deployment::new("");
        let store = stores(&d, &redis);
        let all = keys(0..45);
        write(&d, "ids.txt", &(all.join("\n") + "\n"));
        d.write(&yaml(
            &store,
            &up.base(),
            "10",
            1,
            &["{ limit: 3, per: 1h }"],
        ));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 75, "{r:?}");
        assert_eq!(sent(&up), chunks(&all, 10)[..3], "{r:?}");
        // 30 done, 15 left: two requests, at a unit each of the 3 an hour
        // frees (40 minutes), not fifteen.
        let inputs = inputs_status(&d);
        assert_eq!((&inputs["done"], &inputs["left"]), (&json!(30), &json!(15)));
        assert_eq!(inputs["units_per_input"], json!({"units": 0.1}), "{inputs}");
        assert_eq!(inputs["inputs_per_request"], 10, "{inputs}");
        assert_eq!(inputs["done_in_seconds"], 2 * 1200, "{inputs}");

        d.write(&yaml(&store, &up.base(), "10", 1, WIDE));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        let batches = sent(&up);
        assert_eq!(batches, chunks(&all, 10), "{r:?}");
        assert!(per_key(&batches).values().all(|n| *n == 1));
    }
}

#[test]
fn a_kill_9_redoes_at_most_concurrency_times_batch_inputs_and_skips_none() {
    for redis in [None, Some(RedisServer::start())] {
        let slow = Standin::start(&["--delay", "150ms"]);
        let d = Deployment::new("");
        let store = stores(&d, &redis);
        let all = keys(0..100);
        write(&d, "ids.txt", &(all.join("\n") + "\n"));
        d.write(&yaml(&store, &slow.base(), "5", 2, WIDE));
        let mut victim = spawn(&mut d.cmd(&["run"]));
        wait_until(Duration::from_secs(30), "4 batches were never done", || {
            d.outputs("list").len() >= 4
        });
        kill("-KILL", victim.id());
        let status = victim.wait().unwrap();
        assert!(!status.success(), "the run was killed: {status:?}");
        let first = per_key(&sent(&slow));
        assert!(first.len() < 100, "killed before the end: {first:?}");

        let up = Standin::start(&[]);
        d.write(&yaml(&store, &up.base(), "5", 2, WIDE));
        let r = d.run_after_killed_lock();
        assert_eq!(r.code, 0, "{r:?}");
        let second = per_key(&sent(&up));
        let both: BTreeSet<&String> = first.keys().chain(second.keys()).collect();
        assert_eq!(both.len(), 100, "none skipped: {first:?} {second:?}");
        let redone = first.keys().filter(|k| second.contains_key(*k)).count();
        assert!(redone <= 2 * 5, "{redone} redone: {first:?} {second:?}");
        assert!(second.values().all(|n| *n == 1), "{second:?}");
    }
}

#[test]
fn a_refused_batch_fails_each_of_its_inputs_until_reset_failed() {
    for redis in [None, Some(RedisServer::start())] {
        let up = Standin::start(&["--missing", "K5,K6,K7,K8,K9"]);
        let d = Deployment::new("");
        let store = stores(&d, &redis);
        let all = keys(0..20);
        write(&d, "ids.txt", &(all.join("\n") + "\n"));
        d.write(&yaml(&store, &up.base(), "5", 1, WIDE));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 1, "{r:?}");
        assert_eq!(sent(&up), chunks(&all, 5), "the others go on: {r:?}");
        assert!(
            r.stderr
                .contains("the batch of 5 inputs from K5 (line 6) on failed"),
            "{r:?}"
        );
        let inputs = inputs_status(&d);
        assert_eq!(
            (&inputs["done"], &inputs["failed"]),
            (&json!(20), &json!(5)),
            "{inputs}"
        );
        let failed: Vec<&str> = inputs["failures"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["key"].as_str().unwrap())
            .collect();
        assert_eq!(failed, ["K5", "K6", "K7", "K8", "K9"], "{inputs}");

        // Not retried; after `reset --failed`, the five again, one batch.
        let r = d.portion(&["run"]);
        assert_eq!((r.code, up.seen().len()), (0, 4), "{r:?}");
        let r = d.portion(&["reset", "list", "--failed", "--yes"]);
        assert_eq!(r.code, 0, "{r:?}");
        let again = Standin::start(&[]);
        d.write(&yaml(&store, &again.base(), "5", 1, WIDE));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(sent(&again), [keys(5..10)], "{r:?}");
    }
}

/// A key that holds the `join` would reach the upstream as several keys
/// (`x,y` as `x` and `y`): skipped uncharged, warned of by file and line,
/// counted as skipped (the probe's F-join).
#[test]
fn a_key_holding_the_join_is_skipped_uncharged_with_a_warning() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    write(&d, "ids.txt", "K0\nK1,K2\nK3\nK4\n");
    let store = crate::common::deployment::embedded_store(&d);
    d.write(&yaml(&store, &up.base(), "2", 1, WIDE));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        sorted(sent(&up)),
        sorted(vec![
            keys(0..1).into_iter().chain(keys(3..4)).collect(),
            keys(4..5)
        ]),
        "{r:?}"
    );
    assert!(
        r.stderr
            .contains("ids.txt line 2: the key holds the batch's join \",\""),
        "{r:?}"
    );
    let used = &d.status_json()["credentials"][0]["pools"][0]["windows"][0]["used"];
    assert_eq!(used, 2, "a unit a request, none for the skipped key");
    let inputs = inputs_status(&d);
    assert_eq!(
        (&inputs["done"], &inputs["skipped"], &inputs["left"]),
        (&json!(3), &json!(1), &json!(0)),
        "{inputs}"
    );
}

#[test]
fn bad_batch_values_and_ambiguous_placeholders_are_78_naming_the_field() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    write(&d, "ids.txt", "K0\nK1\n");
    let store = crate::common::deployment::embedded_store(&d);
    for bad in ["0", "-1", "1001"] {
        d.write(&yaml(&store, &up.base(), bad, 1, WIDE));
        let r = d.portion(&["check"]);
        assert_eq!(r.code, 78, "batch {bad}: {r:?}");
        assert!(
            r.stderr.contains("jobs.list.inputs.batch"),
            "batch {bad}: {r:?}"
        );
    }
    // An empty join would run the keys together (K0,K1 sent as K0K1).
    d.write(&yaml(&store, &up.base(), "5, join: ''", 1, WIDE));
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 78, "{r:?}");
    assert!(
        r.stderr.contains("jobs.list.inputs.join") && r.stderr.contains("is empty"),
        "{r:?}"
    );
    let text = yaml(&store, &up.base(), "5", 1, WIDE);
    let field = "jobs.list.steps[0].request";
    for (with, why) in [
        (r#"regionCode: "{batch}", q: "{key}""#, "ambiguous"),
        (r#"regionCode: "{batch}", q: "{input.a}""#, "ambiguous"),
        (r#"regionCode: "all""#, "uses {batch} nowhere"),
    ] {
        d.write(&text.replace(r#"regionCode: "{batch}""#, with));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 78, "{with}: {r:?}");
        assert!(
            r.stderr.contains(field) && r.stderr.contains(why),
            "{with}: {r:?}"
        );
    }
    // An incremental value is kept per key: a batch has none of its own.
    let step = "      - endpoint: videos.list\n";
    assert!(text.contains(step), "{text}");
    let incremental = format!(
        "{step}        incremental: {{ from: /items/*/id, param: since, initial: \"0\" }}\n"
    );
    d.write(&text.replace(step, &incremental));
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 78, "{r:?}");
    assert!(
        r.stderr.contains("jobs.list.steps[0].incremental") && r.stderr.contains("batches"),
        "{r:?}"
    );
    assert!(up.seen().is_empty(), "nothing sent");
}
