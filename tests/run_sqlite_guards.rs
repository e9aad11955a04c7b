//! The results database (`output.sqlite`) under what the host and the
//! configuration throw at it (issue 36): its files made with portion's modes
//! like every other (Class 5), its names quoted and `check` refusing what
//! `run` would (Class 6), a database busy at a run's start a clean stop
//! (Class 7).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::Connection;

use crate::common::deployment::{Deployment, api_deployment, embedded_store, kill, spawn};
use crate::common::inputs::write;
use crate::common::server::{raw, serving};
use crate::common::standin::Standin;
use crate::common::wait_until;
use crate::common::yaml::{Job, Step};
use crate::run_sqlite::{ROWS, rows_only, trending};

/// The mode of a file, permission bits only.
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// The database was made by SQLite (0644, whatever `PORTION_FILE_MODE`: any
/// local user read every result) and its missing folders by
/// `create_dir_all` (0777 under umask 000). Now the database, its `-wal`
/// and `-shm` (seen while the run holds them open) take `PORTION_FILE_MODE`,
/// its folders the folder mode, whatever the umask.
#[test]
fn the_database_its_wal_and_shm_and_its_folders_take_quota_s_modes() {
    let umask = ["bash", "-c", "umask 000 && exec \"$0\" \"$@\""];
    // (the second page answers in 60 s: the run is killed while it waits,
    // its files open)
    let slow = Standin::start(&["--slow", "pageToken=CAUQ1=60s"]);
    let d = Deployment::new("");
    let output = "{ sqlite: { path: deep/er/videos.db, table: videos, items: /items/*, key: /id, search: [/snippet/title] } }";
    d.write(&trending(
        &embedded_store(&d),
        &slow.base(),
        &["US"],
        output,
    ));
    let db = d.path().join("deep/er/videos.db");
    let files = ["", "-wal", "-shm"].map(|end| format!("{}{end}", db.display()));
    let mut run = d.cmd_via(&umask, &["run"]);
    run.env("PORTION_FILE_MODE", "0600");
    let mut victim = spawn(&mut run);
    wait_until(Duration::from_secs(30), "page 2 never asked for", || {
        slow.seen().iter().any(|s| s.page == 1)
    });
    for file in &files {
        assert_eq!(mode(Path::new(file)), 0o600, "{file}");
    }
    for folder in ["deep", "deep/er"] {
        assert_eq!(mode(&d.path().join(folder)), 0o700, "{folder}");
    }
    kill("-KILL", victim.id());
    victim.wait().unwrap();
    let rows: i64 = Connection::open(&db)
        .unwrap()
        .query_row("SELECT count(*) FROM videos", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 5, "the first page's rows");
}

/// A server that answers every request with `body` (JSON, 200); the
/// request heads it got.
fn serving_json(body: &'static str) -> (String, Arc<Mutex<Vec<String>>>) {
    serving(move |_| {
        raw(
            "200 OK",
            &["Content-Type: application/json"],
            body.as_bytes(),
        )
    })
}

/// An e-mail API's page: fields named as SQL's keywords.
const MAIL: &str = r#"{"items":[
  {"id":"m1","from":"alice@example.org","order":"first","group":"admins","select":"chosen","where":"paris"},
  {"id":"m2","from":"bob@example.org","order":"second","group":"users","select":"skipped","where":"lyon"}]}"#;

/// A deployment of job `mail` against `base`, its rows in table `table`
/// of `out/mail.db`, its index over `search`.
fn mail(base: &str, table: &str, search: &str) -> Deployment {
    let job = Job::new("mail", "main")
        .regions(&["GB"])
        .step(Step::new("api").url(&format!("\"{base}/messages\"")))
        .output(&format!(
            "{{ sqlite: {{ path: out/mail.db, table: {table}, items: /items/*, key: /id, search: [{search}] }} }}"
        ))
        .to_string();
    api_deployment(&job)
}

/// A search field named like an SQL keyword (`/from`: an e-mail API's)
/// passed `check`, then every run charged, wrote its page and failed to
/// store its rows. Every name is quoted now: the rows and the index are
/// there, read back with SQL and FTS5's `MATCH`.
#[test]
fn search_fields_named_like_sql_keywords_are_columns_like_any_other() {
    let (base, asked) = serving_json(MAIL);
    let d = mail(&base, "select", "/from, /order, /group, /select, /where");
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(asked.lock().unwrap().len(), 1);
    let c = Connection::open(d.path().join("out/mail.db")).unwrap();
    let n: i64 = c
        .query_row("SELECT count(*) FROM \"select\"", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2);
    let found = |column: &str, word: &str| -> Vec<String> {
        let sql = format!("SELECT key FROM select_search WHERE \"{column}\" MATCH ?1 ORDER BY key");
        let mut stmt = c.prepare(&sql).unwrap();
        stmt.query_map([word], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(found("from", "alice"), ["m1"]);
    assert_eq!(found("order", "second"), ["m2"]);
    assert_eq!(found("group", "admins"), ["m1"]);
    assert_eq!(found("select", "skipped"), ["m2"]);
    assert_eq!(found("where", "lyon"), ["m2"]);
    assert_eq!(found("select_search", "paris"), ["m1"], "the whole index");
    // A run again finds the tables as it made them.
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(d.portion(&["check"]).code, 0);
}

/// `/Key`, `/Rank`, `/rowid` passed `check` and failed at `run` (78, an
/// unclear message): FTS5 keeps those names, whatever their case. `check`
/// refuses them, naming the file, the field and the name, and so does
/// `run`, before anything is asked.
#[test]
fn fts5_s_reserved_names_are_refused_at_check_whatever_their_case() {
    let (base, asked) = serving_json(MAIL);
    for field in [
        "/Key",
        "/Rank",
        "/rowid",
        "/a/ROWID",
        "/OID",
        "/Mail_Search",
    ] {
        let d = mail(&base, "mail", &format!("/from, {field}"));
        let column = field.rsplit('/').next().unwrap();
        for cmd in ["check", "run"] {
            let r = d.portion(&[cmd]);
            assert_eq!(r.code, 78, "{field} {cmd}: {r:?}");
            for said in [
                "portion.yaml",
                "jobs.mail.output.sqlite.search[1]",
                &format!("'{column}'"),
                "keeps for itself",
            ] {
                assert!(r.stderr.contains(said), "{field} {cmd} says {said}: {r:?}");
            }
        }
        assert!(!d.path().join("out/mail.db").exists(), "{field}");
    }
    assert_eq!(asked.lock().unwrap().len(), 0);
}

/// `check` missed a `TABLE_runs` of another shape (a run refused it) and
/// a plain table where the full-text index `TABLE_search` should be (a
/// run wrote the index into it, and `MATCH` found nothing): `check` takes
/// the look a run takes, and both refuse them (78), nothing fetched.
#[test]
fn check_refuses_what_run_would_a_runs_table_of_another_shape_and_a_plain_index() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    write(&d, "ids.txt", "K1\nK2\n");
    d.write(&rows_only(&store, &up.base(), 1));
    std::fs::create_dir_all(d.path().join("out")).unwrap();
    Connection::open(d.path().join("out/rows.db"))
        .unwrap()
        .execute_batch("CREATE TABLE results_runs (job TEXT, input TEXT);")
        .unwrap();
    for cmd in ["check", "run"] {
        let r = d.portion(&[cmd]);
        assert_eq!(r.code, 78, "{cmd}: {r:?}");
        for said in [
            "portion.yaml",
            "jobs.list.output.sqlite.table",
            "results_runs",
        ] {
            assert!(r.stderr.contains(said), "{cmd} says {said}: {r:?}");
        }
    }

    d.write(&trending(&store, &up.base(), &["US"], ROWS));
    Connection::open(d.path().join("out/videos.db"))
        .unwrap()
        .execute_batch("CREATE TABLE videos_search (key TEXT, title TEXT);")
        .unwrap();
    for cmd in ["check", "run"] {
        let r = d.portion(&[cmd]);
        assert_eq!(r.code, 78, "{cmd}: {r:?}");
        for said in [
            "portion.yaml",
            "jobs.trending.output.sqlite.table",
            "'videos_search' is there but is not a full-text (FTS5) index",
        ] {
            assert!(r.stderr.contains(said), "{cmd} says {said}: {r:?}");
        }
    }
    assert!(up.seen().is_empty(), "nothing fetched");
}

/// Charges in the embedded store's log.
fn charges(d: &Deployment) -> i64 {
    Connection::open(d.path().join("ledger.sqlite3"))
        .unwrap()
        .query_row("SELECT count(*) FROM log", [], |r| r.get(0))
        .unwrap()
}

/// A database another writer held at a run's start: the run waited the
/// rows' 60 s and exited 78, "configuration error". It is a busy moment:
/// 75 after the open's few seconds, saying who holds the lock (this test's
/// process, which holds it), nothing charged; once free, the run goes on.
#[test]
fn a_database_locked_by_another_writer_at_the_start_is_75_saying_who() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    d.write(&trending(&embedded_store(&d), &up.base(), &["US"], ROWS));
    assert_eq!(d.portion(&["run"]).code, 0);
    let (asked, charged) = (up.seen().len(), charges(&d));
    let db = d.path().join("out/videos.db");
    let holder = Connection::open(&db).unwrap();
    holder
        .execute_batch("BEGIN IMMEDIATE; DELETE FROM videos WHERE key = 'none';")
        .unwrap();
    // (the lock is held: another writer cannot begin)
    let other = Connection::open(&db).unwrap();
    let e = other.execute_batch("BEGIN IMMEDIATE").unwrap_err();
    assert_eq!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy),
        "{e}"
    );
    drop(other);
    let began = std::time::Instant::now();
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(began.elapsed() < Duration::from_secs(30), "{r:?}");
    let who = format!("process {}", std::process::id());
    for said in ["videos.db", "is busy", &who, "holds its write lock"] {
        assert!(r.stderr.contains(said), "says {said}: {r:?}");
    }
    assert!(!r.stderr.contains("configuration"), "{r:?}");
    assert_eq!(
        (up.seen().len(), charges(&d)),
        (asked, charged),
        "nothing charged or asked"
    );
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(r.stderr.contains(&who), "{r:?}");

    holder.execute_batch("COMMIT").unwrap();
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(charges(&d) > charged);
}
