//! Memory flat on a large file (issue 25, "Done when"): a once-job over a
//! generated 10^5-line file, stopped by its budget every 100 inputs (75),
//! reads only what it needs. The file's first half is blank lines (skipped
//! silently, uncharged), so the first run's 100 inputs leave the cursor
//! deep in it: a resume reads a small part of the file (its read bytes,
//! from the kernel's I/O accounting, far below the cursor's offset: the
//! place kept, not a walk from the start), goes on at the next keys in
//! order, and fits in a modest data limit (`prlimit --data`). In both
//! stores.

use std::collections::BTreeSet;

use crate::common::deployment::{Deployment, Ran, embedded_store, main_units, run};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;
use crate::common::yaml::{Job, Step, limit};

const LINES: usize = 100_000;
const BLANKS: usize = LINES / 2;
/// Each record carries this much more than its key, so that a read of the
/// whole file (~34 MB) is told apart from the run's own reads (its config,
/// the store, the answers) by a wide margin.
const PAD: usize = 320;
/// The most a run of 100 inputs may read beside the part of the file it
/// must read, all files and sockets included.
const READ_AT_MOST: u64 = 4_000_000;
/// RLIMIT_DATA of the run under `prlimit`: room for the run's own (it
/// fails at 32 MB, runs at 36 MB, on 2 runtime threads), not for the file's
/// 33 MB beside it (a run holding the file fails at 48 MB).
const DATA_LIMIT: &str = "--data=48000000";
/// The job's concurrency: inputs in flight at once.
const IN_FLIGHT: usize = 4;

/// The job `big`: one videos.list call per record of `big.jsonl`,
/// `{input.pad}` sent too, `units` limited to `per_hour` an hour.
fn yaml(store: &str, base: &str, per_hour: u64) -> String {
    main_units(store, &[&limit(per_hour, "1h")])
        .endpoint("videos.list", "{ units: 1 }")
        .job(
            Job::new("big", "main")
                .set("inputs", "{ file: big.jsonl, key: /id }")
                .set("once", "true")
                .set("concurrency", &IN_FLIGHT.to_string())
                .step(
                    Step::new("videos.list")
                        .url(&format!("{base}/youtube/v3/videos"))
                        .query(r#"{ part: id, regionCode: "{key}", q: "{input.pad}", key: "{secret}" }"#),
                ),
        )
        .render()
}

/// Line `i` (from 0) of the file: a blank line in the first half, then
/// the records K0, K1, …
fn line(i: usize) -> String {
    match i.checked_sub(BLANKS) {
        None => format!("{}\n", " ".repeat(PAD)),
        Some(k) => record(k),
    }
}

fn record(i: usize) -> String {
    format!("{{\"id\": \"K{i}\", \"pad\": \"{}\"}}\n", "p".repeat(PAD))
}

/// `portion run` (under `prlimit` first if `limited`), and the bytes it read
/// (rchar: every read, files and sockets). A shell runs it and prints its
/// own I/O counts after: those of a child it reaped are added to them.
fn run_counting(d: &Deployment, limited: bool) -> (Ran, u64) {
    let script = r#""$@"; code=$?; cat /proc/$$/io >&2; exit $code"#;
    let mut wrapper = vec!["sh", "-c", script, "sh"];
    if limited {
        wrapper.extend(["prlimit", DATA_LIMIT, "--"]);
    }
    // (the runtime's threads as on the 2-core machine the limit was set
    // on: each takes its stack and arena from the data limit)
    let r = run(d
        .cmd_via(&wrapper, &["run"])
        .env("TOKIO_WORKER_THREADS", "2"));
    let read = r
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .unwrap_or_else(|| panic!("no I/O counts: {r:?}"))
        .parse()
        .unwrap();
    (r, read)
}

/// The keys the stand-in was sent.
fn sent(up: &Standin) -> BTreeSet<String> {
    up.seen().iter().map(|s| s.region.clone()).collect()
}

fn keys(range: std::ops::Range<usize>) -> BTreeSet<String> {
    range.map(|i| format!("K{i}")).collect()
}

#[test]
fn a_once_job_over_a_large_file_reads_only_what_it_needs() {
    for redis in [None, Some(RedisServer::start())] {
        let up = Standin::start(&[]);
        let d = Deployment::new("");
        let store = redis
            .as_ref()
            .map_or_else(|| embedded_store(&d), RedisServer::url);
        let file = d.path().join("big.jsonl");
        let text: String = (0..LINES).map(line).collect();
        std::fs::write(&file, &text).unwrap();
        let length = text.len() as u64;
        let deep = (BLANKS * (PAD + 1)) as u64;
        assert!(length > 30_000_000 && deep > 15_000_000, "{length}");

        // Each run: 100 more units, 100 more inputs, then 75.
        let mut reads = vec![];
        for run in 1..=3usize {
            if run == 3 {
                // Appended: the file changed since the last run, so this
                // run checks the done part (to the cursor), not the rest.
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&file)
                    .unwrap();
                std::io::Write::write_all(&mut f, record(LINES).as_bytes()).unwrap();
            }
            d.write(&yaml(&store, &up.base(), 100 * run as u64));
            let (r, read) = run_counting(&d, run == 2);
            assert_eq!(r.code, 75, "run {run}: {r:?}");
            // Each key once, in file order but for the last few: with 4
            // in flight the budget's last unit may go to a later key, and
            // the refused one is the next run's first.
            let done = 100 * run;
            assert_eq!(up.seen().len(), done, "run {run}: {r:?}");
            let sent = sent(&up);
            assert_eq!(sent.len(), done, "a key sent twice by run {run}");
            assert!(
                sent.is_superset(&keys(0..done - IN_FLIGHT)),
                "run {run}: {sent:?}"
            );
            assert!(
                sent.is_subset(&keys(0..done + IN_FLIGHT)),
                "run {run}: {sent:?}"
            );
            reads.push(read);
        }
        // The first run read the blank half and its 100 records, not the
        // file's end; the second resumed at the cursor; the third read the
        // done part once more (the file changed), and no more.
        let [first, second, third] = reads[..] else {
            unreachable!()
        };
        let msg = format!("reads {reads:?} of a {length}-byte file, the cursor at {deep}+");
        assert!(first < deep + READ_AT_MOST, "{msg}");
        assert!(second < READ_AT_MOST, "{msg}");
        assert!(third < deep + READ_AT_MOST, "{msg}");
        assert_eq!(d.outputs("big").len(), 300);
    }
}
