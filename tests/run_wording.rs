//! What a run's summary says of a job of inputs (issue 36): a job not
//! `once` that walked its whole file says how many inputs that walk did,
//! not the fresh walk's 0; a run stopped by another run's lock says where
//! the job is in its inputs (the cursor's line), not "regions done 0/0 …
//! the first region"; a walk cut at `max_pages` is said.

use std::time::Duration;

use portion::ledger::{EmbeddedLedger, JobStore, LockOutcome};

use crate::common::deployment::{Deployment, embedded_store, trending};
use crate::common::inputs::{write, yaml};
use crate::common::standin::Standin;

/// The summary line of job `list`.
fn summary(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.contains("job list: "))
        .unwrap_or_else(|| panic!("no summary in {stderr}"))
}

#[test]
fn a_job_not_once_that_walked_its_whole_file_says_how_many_inputs_it_did() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    write(&d, "ids.txt", "K0\nK1\n\nK2\n");
    d.write(&yaml(
        &embedded_store(&d),
        &up.base(),
        "{ file: ids.txt }",
        false,
        1,
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let line = summary(&r.stderr);
    assert!(
        line.contains("inputs done 3, 1 skipped (the whole file: its next walk starts over)"),
        "{line}"
    );
    assert!(
        line.ends_with("next run starts at line 1 of its inputs"),
        "{line}"
    );
}

#[test]
fn a_stop_for_a_busy_lock_in_a_job_of_inputs_says_where_its_inputs_are() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    write(&d, "ids.txt", "K0\nK1\nK2\nK3\nK4\n");
    let text = yaml(
        &embedded_store(&d),
        &up.base(),
        "{ file: ids.txt }",
        true,
        1,
    );
    // (a budget of 3 calls: the first run stops at line 4)
    let small = text.replacen("limit: 1000, per: 1h", "limit: 3, per: 1h", 1);
    assert_ne!(small, text);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ledger = EmbeddedLedger::open(&d.path().join("ledger.sqlite3")).unwrap();
    let ttl = Duration::from_secs(600);
    let held = |by: &str| {
        assert_eq!(
            rt.block_on(ledger.take_lock("list", by, ttl)).unwrap(),
            LockOutcome::Held
        );
    };

    // Before any run: its first line.
    d.write(&small);
    held("someone");
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    let line = summary(&r.stderr);
    assert!(
        line.contains("another run holds the lock: someone"),
        "{line}"
    );
    assert!(line.contains("; inputs done 0, 0 skipped;"), "{line}");
    assert!(
        line.ends_with("next run starts at line 1 of its inputs"),
        "{line}"
    );
    assert!(!line.contains("region"), "{line}");
    rt.block_on(ledger.release_lock("list", "someone")).unwrap();

    // Mid-file: the cursor's line.
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(summary(&r.stderr).contains("inputs done 3"), "{r:?}");
    held("someone else");
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    let line = summary(&r.stderr);
    assert!(line.contains("; inputs done 3, 0 skipped;"), "{line}");
    assert!(line.contains("(line 4)"), "{line}");
    assert!(!line.contains("region"), "{line}");
}

/// A walk cut at `max_pages` while the upstream had more is said: a
/// warning per key, and `(N walks cut at max_pages)` in the summary
/// (issue 36, item 21); a walk whose last page is the max_pages-th is not
/// cut.
#[test]
fn a_walk_cut_at_max_pages_is_warned_per_key_and_counted() {
    let up = Standin::start(&["--pages", "3"]);
    let d = trending(&up, "embedded", &["US", "GB"], 2, "fail_closed");
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    for region in ["US", "GB"] {
        assert!(
            r.stderr.lines().any(|l| l.contains(region)
                && l.contains(
                    "the upstream has more pages, but this step's max_pages (2) is reached"
                )),
            "{region}: {r:?}"
        );
    }
    let line = r
        .stderr
        .lines()
        .find(|l| l.contains("job trending: "))
        .unwrap();
    assert!(
        line.contains("regions done 2/2 (2 walks cut at max_pages);"),
        "{line}"
    );

    let up = Standin::start(&["--pages", "2"]);
    let d = trending(&up, "embedded", &["US", "GB"], 2, "fail_closed");
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stderr.contains("max_pages"), "{r:?}");
}
