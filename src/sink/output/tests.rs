//! The outputs on their own, no network, no store: a folder and a table
//! take pages, say what they hold, and keep their id.

use super::*;
use crate::config::SqliteOutput;
use crate::sink::{Files, Sqlite};

fn page<'a>(key: &'a str, file: &'a str, body: &'a [u8], run: u64) -> Page<'a> {
    Page {
        key,
        file,
        body,
        last_step: true,
        fetched_at: "2026-11-29T00:00:00Z",
        run,
    }
}

fn spec(dir: &std::path::Path) -> SqliteOutput {
    SqliteOutput {
        path: dir.join("out.db"),
        table: "items".into(),
        items: "/items/*".into(),
        key: "/id".into(),
        search: Vec::new(),
        columns: Vec::new(),
    }
}

/// A folder and a table (a once-job's: it marks inputs done) as one
/// job's outputs: a page goes to both, what it is held as is each one's,
/// and a page file removed, or a row deleted, is no longer held.
#[test]
fn a_folder_and_a_table_take_a_page_and_say_what_they_hold() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("out");
    let (files, prepared) = Files::open(&folder, "j", 0o640, true).unwrap();
    assert_eq!(prepared.highest_run, 0);
    let table = Sqlite::open(&spec(dir.path()), "j", true).unwrap();
    let mut outputs = Outputs::default();
    outputs.push("sqlite", Arc::new(table));
    outputs.put_first(Arc::new(files));

    let body = br#"{"items":[{"id":"a1"},{"id":"a2"},{"x":1}]}"#;
    let name = "j.r000003.k1.s0.p000000.json";
    let wrote = outputs.write(&page("k1", name, body, 3)).unwrap();
    assert_eq!(wrote.held.file.as_deref(), Some(name));
    assert_eq!(wrote.held.row.as_deref(), Some("a1"));
    let rows = wrote.rows.unwrap();
    assert_eq!((rows.rows, rows.new, rows.without_key), (2, 2, 1));
    assert_eq!(std::fs::read(folder.join(name)).unwrap(), body);
    assert!(outputs.holds(&wrote.held));

    // The rows say which inputs are done, and by which run.
    assert_eq!(outputs.highest_run().unwrap(), 3);
    assert_eq!(outputs.keys_held(0), HashSet::from(["k1".to_string()]));
    assert!(outputs.has_key("k1", 0, &(3..=3)));
    assert!(!outputs.has_key("k1", 0, &(4..=5)));

    // A page of the same name is never written over.
    match outputs.write(&page("k1", name, body, 3)) {
        Err(OutputError::File(e)) => assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists),
        other => panic!("{other:?}"),
    }

    // Gone from either, not held.
    std::fs::remove_file(folder.join(name)).unwrap();
    assert!(!outputs.holds(&wrote.held));
    let row_only = ResultsHeld {
        file: None,
        row: Some("a1".into()),
    };
    let files_only = ResultsHeld {
        file: Some(name.into()),
        row: None,
    };
    assert!(!outputs.holds(&row_only), "no file: not held by the folder");
    assert!(!outputs.holds(&files_only));
}

/// The outputs' id: the folder's and the database's, kept; whether they
/// hold anything of the job; a rebuilt database gets another.
#[test]
fn the_outputs_id_is_kept_and_a_rebuilt_output_gets_another() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("out");
    let open = || {
        let mut outputs = Outputs::default();
        let (files, _) = Files::open(&folder, "j", 0o640, true).unwrap();
        outputs.push("folder", Arc::new(files));
        outputs.push(
            "sqlite",
            Arc::new(Sqlite::open(&spec(dir.path()), "j", false).unwrap()),
        );
        outputs
    };
    let outputs = open();
    let (id, holds) = outputs.id().unwrap();
    assert!(!holds, "nothing of the job yet");
    assert_eq!(id.split('+').count(), 2, "{id}");
    let body = br#"{"items":[{"id":"a1"}]}"#;
    outputs
        .write(&page("k1", "j.r000001.k1.s0.p000000.json", body, 1))
        .unwrap();
    drop(outputs);
    let outputs = open();
    assert_eq!(outputs.id().unwrap(), (id.clone(), true));
    drop(outputs);
    for f in ["out.db", "out.db-wal", "out.db-shm"] {
        let _ = std::fs::remove_file(dir.path().join(f));
    }
    let (rebuilt, _) = open().id().unwrap();
    assert_eq!(
        rebuilt.split('+').next(),
        id.split('+').next(),
        "the folder's kept"
    );
    assert_ne!(rebuilt, id);
}

/// A page of a step before the last is a file, never rows (it holds the
/// values a fan-out reads, not the results).
#[test]
fn only_the_last_steps_pages_are_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut outputs = Outputs::default();
    outputs.push(
        "sqlite",
        Arc::new(Sqlite::open(&spec(dir.path()), "j", false).unwrap()),
    );
    let body = br#"{"items":[{"id":"a1"}]}"#;
    let mut p = page("k1", "j.r000001.k1.s0.p000000.json", body, 1);
    p.last_step = false;
    let wrote = outputs.write(&p).unwrap();
    assert!(wrote.rows.is_none() && wrote.held.row.is_none());
    assert!(outputs.keys_held(1).is_empty());
}

/// A page held as a row, in a job that writes no table now (its
/// `output.sqlite` taken out): not held, so the page is asked in full.
#[test]
fn a_row_is_not_held_by_a_job_without_a_table() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("out");
    let (files, _) = Files::open(&folder, "j", 0o640, true).unwrap();
    let mut outputs = Outputs::default();
    outputs.push("folder", Arc::new(files));
    let name = "j.r000001.k1.s0.p000000.json";
    let wrote = outputs.write(&page("k1", name, b"{}", 1)).unwrap();
    assert!(outputs.holds(&wrote.held));
    let with_row = ResultsHeld {
        row: Some("a1".into()),
        ..wrote.held
    };
    assert!(!outputs.holds(&with_row));
}
