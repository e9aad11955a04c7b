//! `output.sqlite` beside a folder (issue 26): a page's file and its rows
//! are written at once, and a page whose file fails is not done, whatever
//! its rows.

use std::path::Path;
use std::time::Duration;

use crate::common::deployment::{Deployment, embedded_store, finish, spawn};
use crate::common::inputs::{keys, once_each, per_key, write};
use crate::common::standin::Standin;
use crate::common::wait_until;
use crate::run_sqlite::{db, index_in_step, inputs_with_rows, rows, rows_only, trending};

const BOTH: &str = "{ folder: out/trending, sqlite: { path: out/videos.db, table: videos, items: /items/*, key: /id, search: [/snippet/title] } }";

/// The page folder `dir` replaced by a file: the next page file written
/// there fails (not a folder). `back`: the folder put back.
fn take_folder(dir: &Path, back: bool) {
    let moved = dir.with_extension("moved");
    if back {
        std::fs::remove_file(dir).unwrap();
        std::fs::rename(&moved, dir).unwrap();
    } else {
        std::fs::rename(dir, &moved).unwrap();
        std::fs::write(dir, "").unwrap();
    }
}

/// A page file that cannot be written (its folder gone while the page was
/// in flight) stops the run, whatever became of its rows (written beside
/// it); the next run writes that page and its rows, each row once.
#[test]
fn a_page_whose_file_fails_stops_the_run_and_is_redone_with_its_rows_once() {
    // Second pages answer in 3 s: the folder goes meanwhile.
    let slow = Standin::start(&["--slow", "pageToken=CAUQ1=3s"]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    d.write(&trending(&store, &slow.base(), &["US", "GB"], BOTH));
    let victim = spawn(&mut d.cmd(&["run"]));
    wait_until(Duration::from_secs(30), "page 2 never asked for", || {
        slow.seen().iter().any(|s| s.page == 1)
    });
    let dir = d.path().join("out/trending");
    take_folder(&dir, false);
    let r = finish(victim);
    assert_eq!(r.code, 1, "{r:?}");
    take_folder(&dir, true);

    let up = Standin::start(&[]);
    d.write(&trending(&store, &up.base(), &["US", "GB"], BOTH));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let c = db(&d);
    assert_eq!(rows(&c).len(), 30, "{r:?}");
    index_in_step(&c);
    let pages = d.outputs("trending");
    for region in ["US", "GB"] {
        for p in 0..3 {
            let page = format!(".{region}.s0.p{p:06}.json");
            assert!(
                pages.iter().any(|f| f.ends_with(&page)),
                "{page}: {pages:?}"
            );
        }
    }
}

/// A once-job writing pages and rows, where the rows say an input is
/// done: an input whose page file failed has no rows either (its rows
/// written beside a failed file would make it done without its page), so
/// the next run fetches it again.
#[test]
fn an_input_whose_page_file_failed_has_no_rows_and_is_fetched_again() {
    let d = Deployment::new("");
    write(&d, "ids.txt", "K0\nK1\nK2\n");
    let store = embedded_store(&d);
    let job = |base: &str| {
        rows_only(&store, base, 1).replace(
            "{ sqlite: { path: out/rows.db",
            "{ folder: out/list, sqlite: { path: out/rows.db",
        )
    };
    // K1 answers in 3 s: the folder goes meanwhile.
    let slow = Standin::start(&["--slow", "=K1&=3s"]);
    let yaml = job(&slow.base());
    assert!(yaml.contains("folder: out/list"), "{yaml}");
    d.write(&yaml);
    let victim = spawn(&mut d.cmd(&["run"]));
    wait_until(Duration::from_secs(30), "K1 was never asked for", || {
        slow.seen().iter().any(|s| s.region == "K1")
    });
    let dir = d.path().join("out/list");
    take_folder(&dir, false);
    let r = finish(victim);
    assert_eq!(r.code, 1, "{r:?}");
    take_folder(&dir, true);
    assert_eq!(inputs_with_rows(&d), once_each(&keys(0..1)), "{r:?}");

    let up = Standin::start(&[]);
    d.write(&job(&up.base()));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(per_key(&up), once_each(&keys(1..3)), "{r:?}");
    assert_eq!(inputs_with_rows(&d), once_each(&keys(0..3)), "{r:?}");
    let pages = d.outputs("list");
    assert!(pages.iter().any(|p| p.contains(".K1.")), "{pages:?}");
}
