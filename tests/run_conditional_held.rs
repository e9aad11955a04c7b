//! A validator is sent only while what it stands for is there: its page
//! file in the job's folder, its rows in the table the job writes now.
//! Page files deleted (the folder's hidden id left in place), rows
//! deleted, a table dropped or another table named: the next run asks
//! those pages in full and writes them again, never a 304 that would leave
//! the output empty for good; the run after that gets 304s again.

use crate::common::deployment::{Deployment, embedded_store};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;
use crate::run_conditional::{CONDITIONAL, statuses, yaml};

const DB: &str = "out/issues.db";

fn to_table(y: &str, table: &str) -> String {
    y.replace(
        "output: out/issues",
        &format!("output: {{ sqlite: {{ path: {DB}, table: {table}, items: \"/*\", key: /id }} }}"),
    )
}

fn rows(d: &Deployment, table: &str) -> i64 {
    rusqlite::Connection::open(d.path().join(DB))
        .unwrap()
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

fn sql(d: &Deployment, text: &str) {
    rusqlite::Connection::open(d.path().join(DB))
        .unwrap()
        .execute_batch(text)
        .unwrap();
}

/// The second run after the loss asks the first pages in full (200), the
/// third gets 304s: the statuses of the calls from `from` on.
pub(crate) fn full_then_304(up: &Standin, from: usize, d: &Deployment) {
    let asked = statuses(up, from);
    assert_eq!(asked.len(), 4, "{asked:?}");
    assert!(asked.iter().all(|s| s.2 == 200), "{asked:?}");
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        statuses(up, from + 4),
        [("a/one".into(), 1, 304), ("a/two".into(), 1, 304)]
    );
}

#[test]
fn page_files_deleted_are_fetched_again_in_full() {
    for redis in [None, Some(RedisServer::start())] {
        let up = Standin::start(&["--pages", "2", "--items", "3"]);
        let d = Deployment::new("");
        let store = redis
            .as_ref()
            .map_or_else(|| embedded_store(&d), RedisServer::url);
        d.write(&yaml(&store, &up.base(), 100, CONDITIONAL));
        assert_eq!(d.portion(&["run"]).code, 0);
        let folder = d.path().join("out/issues");
        for page in d.outputs("issues") {
            std::fs::remove_file(folder.join(page)).unwrap();
        }
        assert!(
            std::fs::read_dir(&folder).unwrap().count() > 0,
            "the folder's hidden files stay"
        );
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(r.stderr.contains("such pages are asked in full"), "{r:?}");
        assert_eq!(d.outputs("issues").len(), 4, "{r:?}");
        full_then_304(&up, 4, &d);
    }
}

#[test]
fn rows_deleted_dropped_or_in_another_table_are_fetched_again_in_full() {
    let up = Standin::start(&["--pages", "2", "--items", "3"]);
    let d = Deployment::new("");
    let y = yaml(&embedded_store(&d), &up.base(), 100, CONDITIONAL);
    d.write(&to_table(&y, "issues"));
    assert_eq!(d.portion(&["run"]).code, 0);
    assert_eq!(rows(&d, "issues"), 12);
    let mut from = 4;
    for (lose, table) in [
        ("DELETE FROM issues", "issues"),
        ("DROP TABLE issues", "issues"),
        ("", "renamed"),
    ] {
        if !lose.is_empty() {
            sql(&d, lose);
        }
        d.write(&to_table(&y, table));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{lose} {table}: {r:?}");
        assert_eq!(rows(&d, table), 12, "{lose} {table}: {r:?}");
        full_then_304(&up, from, &d);
        from += 6;
    }
}
