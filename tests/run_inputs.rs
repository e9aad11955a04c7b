//! Jobs of inputs, run (issue 25): each input of the file once, the
//! keys' requests counted from the stand-in's log; lines appended later
//! done by later runs; invalid records and repeated keys skipped, warned
//! with file and line, uncharged; a once-job whose done part changed stops
//! with 78 naming the file and the line, until `portion reset JOB --yes`;
//! a kill -9 redoes at most `concurrency` inputs and skips none. In both
//! stores.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::common::deployment::{Deployment, embedded_store, kill, spawn};
use crate::common::inputs::{keys, once_each, per_key, stores, write, yaml};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;
use crate::common::wait_until;

#[test]
fn a_once_job_does_each_input_once_and_lines_appended_later_next_time() {
    for redis in [None, Some(RedisServer::start())] {
        let up = Standin::start(&[]);
        let d = Deployment::new("");
        let store = stores(&d, &redis);
        // K0..K9, a blank line, then K3 again (line 12).
        let mut text = keys(0..10).join("\n") + "\n\nK3\n";
        write(&d, "ids.txt", &text);
        d.write(&yaml(&store, &up.base(), "{ file: ids.txt }", true, 4));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(per_key(&up), once_each(&keys(0..10)), "{r:?}");
        assert!(
            r.stderr
                .contains("ids.txt line 12: key K3 again (first on line 4)"),
            "{r:?}"
        );
        assert_eq!(d.outputs("list").len(), 10);
        let used = &d.status_json()["credentials"][0]["pools"][0]["windows"][0]["used"];
        assert_eq!(used, 10, "the repeated key was not charged");

        // Every input done: a run sends nothing and ends well.
        let r = d.portion(&["run"]);
        assert_eq!((r.code, up.seen().len()), (0, 10), "{r:?}");

        // Lines appended: the next run does those alone (K5 again is a
        // repeat even across runs).
        text.push_str("K10\nK5\nK11\n");
        write(&d, "ids.txt", &text);
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(per_key(&up), once_each(&keys(0..12)), "{r:?}");
        assert!(
            r.stderr.contains("line 14: key K5 again (first on line 6)"),
            "{r:?}"
        );
    }
}

#[test]
fn a_job_not_once_walks_every_input_every_run() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    write(&d, "ids.txt", &(keys(0..5).join("\n") + "\nK1\n"));
    d.write(&yaml(
        &embedded_store(&d),
        &up.base(),
        "{ file: ids.txt }",
        false,
        2,
    ));
    for run in 1..=2 {
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        let want: BTreeMap<String, usize> = keys(0..5).into_iter().map(|k| (k, run)).collect();
        assert_eq!(per_key(&up), want, "run {run}: {r:?}");
        assert!(r.stderr.contains("line 6: key K1 again"), "{r:?}");
    }
}

#[test]
fn a_changed_done_part_stops_the_job_with_78_until_reset() {
    for redis in [None, Some(RedisServer::start())] {
        let up = Standin::start(&[]);
        let d = Deployment::new("");
        let store = stores(&d, &redis);
        let file = d.path().join("ids.txt");
        // 150 inputs: two full chunks of the done part and a tail.
        let all = keys(0..150);
        write(&d, "ids.txt", &(all.join("\n") + "\n"));
        d.write(&yaml(&store, &up.base(), "{ file: ids.txt }", true, 4));
        assert_eq!(d.portion(&["run"]).code, 0);
        assert_eq!(up.seen().len(), 150);

        for (edit, line) in [(5usize, 6u64), (100, 101), (140, 141)] {
            let mut changed = all.clone();
            changed[edit] = format!("X{edit}");
            write(&d, "ids.txt", &(changed.join("\n") + "\n"));
            let r = d.portion(&["run"]);
            assert_eq!(r.code, 78, "{r:?}");
            assert!(r.stderr.contains(&file.display().to_string()), "{r:?}");
            assert!(r.stderr.contains(&format!("line {line}")), "{r:?}");
            assert!(r.stderr.contains("portion reset list --yes"), "{r:?}");
        }
        // Truncated: the first line missing is named.
        write(&d, "ids.txt", &(all[..20].join("\n") + "\n"));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 78, "{r:?}");
        assert!(r.stderr.contains("line 21"), "{r:?}");
        assert_eq!(up.seen().len(), 150, "nothing sent");

        // Back as it was: the job goes on (nothing left to do).
        write(&d, "ids.txt", &(all.join("\n") + "\n"));
        let r = d.portion(&["run"]);
        assert_eq!((r.code, up.seen().len()), (0, 150), "{r:?}");

        // Reset asks for --yes, then starts the list afresh.
        let mut changed = all.clone();
        changed[5] = "X5".into();
        write(&d, "ids.txt", &(changed.join("\n") + "\n"));
        let r = d.portion(&["reset", "list"]);
        assert_eq!(r.code, 2, "{r:?}");
        assert!(r.stderr.contains("--yes"), "{r:?}");
        assert_eq!(d.portion(&["run"]).code, 78, "no reset without --yes");
        let r = d.portion(&["reset", "list", "--yes"]);
        assert_eq!(r.code, 0, "{r:?}");
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        let n = per_key(&up);
        assert_eq!(
            (n.len(), n["K6"], n["X5"], n["K5"]),
            (151, 2, 1, 1),
            "{r:?}"
        );
        // The new pages beside the old ones: none replaced.
        assert_eq!(d.outputs("list").len(), 300);
    }
}

/// A once-job whose done part changed is shown blocked by `status` (text,
/// JSON, OpenMetrics) and `run --dry-run`, with file, line and the fix,
/// not as "nothing left to do" while its every run exits 78 (the probe's
/// F-status78).
#[test]
fn status_and_dry_run_show_a_changed_done_part_as_blocked_with_the_fix() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    let all = keys(0..12);
    write(&d, "ids.txt", &(all.join("\n") + "\n"));
    d.write(&yaml(&store, &up.base(), "{ file: ids.txt }", true, 1));
    assert_eq!(d.portion(&["run"]).code, 0);
    let mut changed = all.clone();
    changed[2] = "Y2".into();
    write(&d, "ids.txt", &(changed.join("\n") + "\n"));
    assert_eq!(d.portion(&["run"]).code, 78);
    let file = d.path().join("ids.txt").display().to_string();
    for args in [&["status"][..], &["run", "--dry-run"]] {
        let r = d.portion(args);
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
        for said in [
            "blocked: ",
            &format!("{file} line 3"),
            "portion reset list --yes",
        ] {
            assert!(r.stdout.contains(said), "{args:?} says {said:?}: {r:?}");
        }
        assert!(!r.stdout.contains("nothing left to do"), "{args:?}: {r:?}");
    }
    let json = d.status_json();
    let blocked = &json["credentials"][0]["jobs"][0]["inputs"]["blocked"];
    assert_eq!(
        (&blocked["line"], &blocked["file"]),
        (&3.into(), &file.clone().into()),
        "{json}"
    );
    let metric = "portion_job_inputs_blocked{job=\"list\"}";
    let r = d.portion(&["status", "--format", "openmetrics"]);
    assert!(r.stdout.contains(&format!("{metric} 1")), "{r:?}");
    // Put back, the job is not blocked.
    write(&d, "ids.txt", &(all.join("\n") + "\n"));
    let r = d.portion(&["status", "--format", "openmetrics"]);
    assert!(r.stdout.contains(&format!("{metric} 0")), "{r:?}");
    let r = d.portion(&["status"]);
    assert!(
        r.stdout.contains("nothing left to do") && !r.stdout.contains("blocked: "),
        "{r:?}"
    );
    assert_eq!(up.seen().len(), 12);
}

#[test]
fn invalid_records_are_skipped_uncharged_and_named_by_file_and_line() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    write(
        &d,
        "prompts.jsonl",
        "{\"id\": \"A\", \"p\": \"x\"}\nnot json\n{\"p\": \"y\"}\n{\"id\": \"B\", \"p\": \"z\"}\n{\"id\": \"C\"}\n",
    );
    d.write(&yaml(
        &embedded_store(&d),
        &up.base(),
        "{ file: prompts.jsonl, key: /id }",
        true,
        1,
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(per_key(&up), once_each(&["A".into(), "B".into()]), "{r:?}");
    let queries: BTreeSet<String> = up.seen().iter().filter_map(|s| s.query.clone()).collect();
    for line in [2, 3, 5] {
        assert!(
            r.stderr.contains(&format!("prompts.jsonl line {line}: ")),
            "line {line}: {r:?}"
        );
    }
    let used = &d.status_json()["credentials"][0]["pools"][0]["windows"][0]["used"];
    assert_eq!(used, 2, "{r:?} {queries:?}");
}

#[test]
fn blank_lines_are_skipped_and_counted_wherever_they_are() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    // Only blank lines: each skipped and counted, the next run after them.
    write(&d, "ids.txt", "\n  \n\n");
    d.write(&yaml(&store, &up.base(), "{ file: ids.txt }", true, 2));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("inputs done 0, 3 skipped"), "{r:?}");
    assert!(
        r.stderr.contains("next run starts at line 4 of its inputs"),
        "{r:?}"
    );
    // Lines appended, blanks before, between and after keys: the same.
    write(&d, "ids.txt", "\n  \n\n\nK0\n\nK1\n\n");
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("inputs done 2, 6 skipped"), "{r:?}");
    assert!(
        r.stderr.contains("next run starts at line 9 of its inputs"),
        "{r:?}"
    );
    assert_eq!(per_key(&up), once_each(&keys(0..2)), "{r:?}");
}

#[test]
fn a_kill_9_redoes_at_most_concurrency_inputs_and_skips_none() {
    for redis in [None, Some(RedisServer::start())] {
        let slow = Standin::start(&["--delay", "150ms"]);
        let d = Deployment::new("");
        let store = stores(&d, &redis);
        let all = keys(0..60);
        write(&d, "ids.txt", &(all.join("\n") + "\n"));
        d.write(&yaml(&store, &slow.base(), "{ file: ids.txt }", true, 4));
        let mut victim = spawn(&mut d.cmd(&["run"]));
        wait_until(Duration::from_secs(30), "20 inputs were never done", || {
            d.outputs("list").len() >= 20
        });
        kill("-KILL", victim.id());
        let status = victim.wait().unwrap();
        assert!(!status.success(), "the run was killed: {status:?}");
        let first = per_key(&slow);
        assert!(first.len() < 60, "killed before the end: {first:?}");

        let up = Standin::start(&[]);
        d.write(&yaml(&store, &up.base(), "{ file: ids.txt }", true, 4));
        let r = d.run_after_killed_lock();
        assert_eq!(r.code, 0, "{r:?}");
        let second = per_key(&up);
        let both: BTreeSet<&String> = first.keys().chain(second.keys()).collect();
        assert_eq!(both.len(), 60, "none skipped: {first:?} {second:?}");
        let redone = first.keys().filter(|k| second.contains_key(*k)).count();
        assert!(redone <= 4, "{redone} redone: {first:?} {second:?}");
        assert!(second.values().all(|n| *n == 1), "{second:?}");
        // Each input's result once on disk: an input whose page the killed
        // run wrote, its cursor not yet saying so, is not fetched again.
        assert_eq!(pages_per_key(&d), once_each(&all), "{r:?}");
    }
}

/// Page files of job `list` per key.
fn pages_per_key(d: &Deployment) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for name in d.outputs("list") {
        if let Some((_, key, _, _)) = portion::page_name::parse("list", &name) {
            *n.entry(key).or_default() += 1;
        }
    }
    n
}

#[test]
fn a_new_store_fetches_no_input_whose_page_is_on_disk() {
    for redis in [None, Some((RedisServer::start(), RedisServer::start()))] {
        let up = Standin::start(&[]);
        let d = Deployment::new("");
        let (first, second) = match &redis {
            Some((a, b)) => (a.url(), b.url()),
            None => (
                embedded_store(&d),
                format!("embedded:{}", d.path().join("new.sqlite3").display()),
            ),
        };
        write(&d, "ids.txt", &(keys(0..8).join("\n") + "\n"));
        d.write(&yaml(&first, &up.base(), "{ file: ids.txt }", true, 2));
        assert_eq!(d.portion(&["run"]).code, 0);
        assert_eq!(up.seen().len(), 8);
        // A new store (the old one lost, or moved from): two more lines come.
        write(&d, "ids.txt", &(keys(0..10).join("\n") + "\n"));
        d.write(&yaml(&second, &up.base(), "{ file: ids.txt }", true, 2));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(r.stderr.contains("holds pages of 8 input(s)"), "{r:?}");
        assert_eq!(per_key(&up), once_each(&keys(0..10)), "{r:?}");
        assert_eq!(pages_per_key(&d), once_each(&keys(0..10)));
    }
}

#[test]
fn a_page_the_cursor_missed_before_a_kill_is_not_fetched_again() {
    let redis = RedisServer::start();
    // K6 answers in 3 s, the others at once.
    let slow = Standin::start(&["--slow", "=K6&=3s"]);
    let d = Deployment::new("");
    let all = keys(0..30);
    write(&d, "ids.txt", &(all.join("\n") + "\n"));
    d.write(&yaml(
        &redis.url(),
        &slow.base(),
        "{ file: ids.txt }",
        true,
        4,
    ));
    let mut victim = spawn(&mut d.cmd(&["run"]));
    wait_until(Duration::from_secs(30), "K6 was never asked for", || {
        slow.seen().iter().any(|s| s.region == "K6")
    });
    // The store stops answering while K6 is in flight: its page is
    // written, the cursor save after it waits; then the kill.
    kill("-STOP", redis.pid());
    wait_until(Duration::from_secs(30), "K6's page never written", || {
        pages_per_key(&d).contains_key("K6")
    });
    kill("-KILL", victim.id());
    victim.wait().unwrap();
    kill("-CONT", redis.pid());
    let written = pages_per_key(&d);

    let up = Standin::start(&[]);
    d.write(&yaml(
        &redis.url(),
        &up.base(),
        "{ file: ids.txt }",
        true,
        4,
    ));
    let r = d.run_after_killed_lock();
    assert_eq!(r.code, 0, "{r:?}");
    let again: Vec<String> = per_key(&up)
        .into_keys()
        .filter(|k| written.contains_key(k))
        .collect();
    assert!(
        again.is_empty(),
        "fetched again though on disk: {again:?}: {r:?}"
    );
    assert_eq!(pages_per_key(&d), once_each(&all), "{r:?}");
}

#[test]
fn a_once_job_pages_through_each_input_and_resumes_mid_input_after_a_stop() {
    for redis in [None, Some(RedisServer::start())] {
        let up = Standin::start(&["--pages", "3"]);
        let d = Deployment::new("");
        let store = stores(&d, &redis);
        write(&d, "ids.txt", &(keys(0..6).join("\n") + "\n"));
        // 3 pages an input; a budget of 8 stops the first run mid-input.
        let paged = |limit: &str| {
            yaml(&store, &up.base(), "{ file: ids.txt }", true, 2)
                .replace("limit: 1000, per: 1h", limit)
                .replace(
                    "key: \"{secret}\" }",
                    "key: \"{secret}\" }\n        paginate: { token: /nextPageToken, param: pageToken, max_pages: 3 }",
                )
        };
        d.write(&paged("limit: 8, per: 1h"));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 75, "{r:?}");
        assert_eq!(up.seen().len(), 8, "{r:?}");
        d.write(&paged("limit: 100, per: 1h"));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        // Every page of every input once: none redone, none skipped.
        let pages: BTreeSet<(String, u32)> = up
            .seen()
            .iter()
            .map(|s| (s.region.clone(), s.page))
            .collect();
        assert_eq!((pages.len(), up.seen().len()), (18, 18), "{:?}", up.seen());
        assert_eq!(d.outputs("list").len(), 18);
        let r = d.portion(&["run"]);
        assert_eq!((r.code, up.seen().len()), (0, 18), "{r:?}");
    }
}

#[test]
fn a_touched_file_is_checked_once_and_not_again() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    write(&d, "ids.txt", &(keys(0..70).join("\n") + "\n"));
    d.write(&yaml(
        &embedded_store(&d),
        &up.base(),
        "{ file: ids.txt }",
        true,
        4,
    ));
    assert_eq!(d.portion(&["run"]).code, 0);
    let r = d.portion(&["run"]);
    assert!(
        !r.stderr.contains("checking the"),
        "same file, no check: {r:?}"
    );
    // The same text written again: a new stamp, one check, saved.
    write(&d, "ids.txt", &(keys(0..70).join("\n") + "\n"));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("checking the 70 input(s) done"), "{r:?}");
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stderr.contains("checking the"), "checked once: {r:?}");
    assert_eq!(up.seen().len(), 70);
}

/// A job not `once` whose tick's budget covers part of its file resumes
/// its walk where it stopped when the file changed only after that place
/// (lines appended, an identical copy renamed over it); when the part its
/// walk has done changed, it walks the file again from the first line and
/// says so: the run's log, `status` and `run --dry-run`.
#[test]
fn a_job_not_once_resumes_its_walk_unless_the_part_done_changed() {
    for redis in [None, Some(RedisServer::start())] {
        let up = Standin::start(&[]);
        let d = Deployment::new("");
        let store = stores(&d, &redis);
        let config = |limit: u64| {
            yaml(&store, &up.base(), "{ file: ids.txt }", false, 1)
                .replace("limit: 1000, per: 1h", &format!("limit: {limit}, per: 1h"))
        };
        let all = keys(0..10);
        write(&d, "ids.txt", &(all.join("\n") + "\n"));
        d.write(&config(4));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 75, "{r:?}");
        assert_eq!(per_key(&up), once_each(&keys(0..4)), "{r:?}");

        // An identical copy renamed over it, then a line appended: the
        // walk goes on at line 5.
        let tmp = d.path().join("ids.tmp");
        std::fs::copy(d.path().join("ids.txt"), &tmp).unwrap();
        std::fs::rename(&tmp, d.path().join("ids.txt")).unwrap();
        d.write(&config(6));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 75, "{r:?}");
        assert_eq!(per_key(&up), once_each(&keys(0..6)), "{r:?}");
        write(&d, "ids.txt", &(keys(0..11).join("\n") + "\n"));
        d.write(&config(100));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(r.stderr.contains("line 7"), "resumed at line 7: {r:?}");
        assert_eq!(per_key(&up), once_each(&keys(0..11)), "{r:?}");

        // The next walk, cut after 2 inputs; then line 2 changes: the
        // walk starts again at line 1, said by the run, status and plan.
        d.write(&config(13));
        assert_eq!(d.portion(&["run"]).code, 75);
        let mut changed = keys(0..11);
        changed[1] = "Y1".into();
        write(&d, "ids.txt", &(changed.join("\n") + "\n"));
        let file = d.path().join("ids.txt").display().to_string();
        for args in [&["status"][..], &["run", "--dry-run"]] {
            let r = d.portion(args);
            assert!(
                r.stdout.contains(&format!(
                    "restarts: {file} changed at line 2 since the last run"
                )),
                "{args:?}: {r:?}"
            );
        }
        d.write(&config(200));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(
            r.stderr.contains("changed since the last run at line 2, in the part already done: this walk of it starts again at its first line"),
            "{r:?}"
        );
        let seen = per_key(&up);
        assert_eq!((seen["K0"], seen["Y1"], seen["K2"]), (3, 1, 2), "{seen:?}");
    }
}
