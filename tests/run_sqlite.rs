//! `output.sqlite` (issue 26): rows upserted into a SQLite table, its FTS5
//! index in step, read back here with rusqlite as a user's reader would.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rusqlite::Connection;

use crate::common::deployment::{
    Deployment, WIDE, embedded_store, kill, main_units, spawn, videos_list,
};
use crate::common::inputs::{keys, once_each, per_key, write};
use crate::common::redis::RedisServer;
use crate::common::sinks::RowsSink;
use crate::common::standin::Standin;
use crate::common::wait_until;
use crate::common::yaml::{Job, Step};

pub(crate) const ROWS: &str = "{ sqlite: { path: out/videos.db, table: videos, items: /items/*, key: /id, search: [/snippet/title] } }";

/// [`ROWS`]' settings but the database and the table, for either sink.
const ROWS_FIELDS: &str = ", items: /items/*, key: /id, search: [/snippet/title]";

/// Job `trending` over `regions`, 3 pages each, its rows as `output` says.
pub(crate) fn trending(store: &str, base: &str, regions: &[&str], output: &str) -> String {
    trending_at(store, base, regions, output, 1)
}

/// The same, `concurrency` regions walked side by side.
pub(crate) fn trending_at(
    store: &str,
    base: &str,
    regions: &[&str],
    output: &str,
    concurrency: usize,
) -> String {
    main_units(store, WIDE)
        .endpoint("videos.list", "{ units: 1 }")
        .job(
            Job::new("trending", "main")
                .regions(regions)
                .set("concurrency", &concurrency.to_string())
                .step(videos_list(base, 3))
                .output(output),
        )
        .render()
}

pub(crate) fn db(d: &Deployment) -> Connection {
    Connection::open(d.path().join("out/videos.db")).unwrap()
}

/// Every row: key → (job, input, title).
pub(crate) fn rows(c: &Connection) -> BTreeMap<String, (String, String, String)> {
    let mut stmt = c
        .prepare("SELECT key, job, input, item, fetched_at FROM videos")
        .unwrap();
    stmt.query_map([], |r| {
        let item: String = r.get(3)?;
        let at: String = r.get(4)?;
        assert!(
            chrono::DateTime::parse_from_rfc3339(&at).is_ok(),
            "fetched_at {at}"
        );
        let item: serde_json::Value = serde_json::from_str(&item).unwrap();
        let title = item["snippet"]["title"].as_str().unwrap_or("").to_string();
        Ok((r.get(0)?, (r.get(1)?, r.get(2)?, title)))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// The summary line of job `job` in `r`'s log, from `job JOB:` on.
pub(crate) fn summary<'r>(r: &'r crate::common::deployment::Ran, job: &str) -> &'r str {
    let at = format!("job {job}: ");
    let line = (r.stderr.lines().find(|l| l.contains(&at))).unwrap_or_else(|| panic!("{r:?}"));
    &line[line.find(&at).unwrap()..]
}

/// The keys the index finds for `word`.
fn matched(c: &Connection, word: &str) -> BTreeSet<String> {
    let mut stmt = c
        .prepare("SELECT key FROM videos_search WHERE videos_search MATCH ?1")
        .unwrap();
    stmt.query_map([format!("\"{word}\"")], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The index finds, for each word of every title, exactly the rows whose
/// title holds it now.
pub(crate) fn index_in_step(c: &Connection) {
    let rows = rows(c);
    let words: BTreeSet<String> = rows
        .values()
        .flat_map(|(_, _, t)| t.split([' ', '#']).filter(|w| !w.is_empty()))
        .map(str::to_lowercase)
        .collect();
    for word in words {
        let want: BTreeSet<String> = rows
            .iter()
            .filter(|(_, (_, _, t))| t.to_lowercase().split([' ', '#']).any(|w| w == word))
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(matched(c, &word), want, "MATCH {word}");
    }
    let n: i64 = c
        .query_row("SELECT count(*) FROM videos_search", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n as usize, rows.len(), "one index entry a row");
}

#[test]
fn rows_are_upserted_once_per_key_across_regions_and_reruns_and_the_index_follows() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    d.write(&trending(&store, &up.base(), &["US", "GB"], ROWS));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    // No folder: no "pages written"; every row's key new.
    assert_eq!(
        summary(&r, "trending"),
        "job trending: finished; 6 calls, spent units 6; regions done 2/2; \
         6 pages' rows committed to table videos, 30 rows upserted (30 new, 0 replaced); \
         next run starts at US step 0 page 0"
    );
    // sqlite only: no page files.
    assert!(!d.path().join("out/trending").exists());
    let c = db(&d);
    let first = rows(&c);
    assert_eq!(first.len(), 30);
    assert!(
        first
            .iter()
            .all(|(k, (job, input, _))| job == "trending" && k.starts_with(input.as_str()))
    );
    assert_eq!(matched(&c, "GB").len(), 15);
    // The same pages again: the same rows, none twice.
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        summary(&r, "trending").contains(", 30 rows upserted (0 new, 30 replaced);"),
        "{r:?}"
    );
    assert_eq!(rows(&c).len(), 30);
    index_in_step(&c);
    // 3 items a page now: rows of the same key replaced (US01000 was
    // "Trending US #6", now "#4"), the others kept, the index in step.
    let up3 = Standin::start(&["--items", "3"]);
    d.write(&trending(&store, &up3.base(), &["US", "GB"], ROWS));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let now = rows(&c);
    assert_eq!(now.len(), 30);
    assert_eq!(now["US01000"].2, "Trending US #4");
    assert!(!matched(&c, "6").contains("US01000"));
    assert!(matched(&c, "4").contains("US01000"));
    index_in_step(&c);
    // A key in every region: one row.
    let shared = ROWS
        .replace("table: videos", "table: channels")
        .replace("key: /id", "key: /snippet/channelTitle");
    d.write(&trending(&store, &up3.base(), &["US", "GB"], &shared));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let n: i64 = c
        .query_row("SELECT count(*) FROM channels", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    // 18 upserts of one key: said as such, not as 18 rows.
    assert!(
        summary(&r, "trending").contains(
            "; 6 pages' rows committed to table channels, 18 rows upserted (1 new, 17 replaced);"
        ),
        "{r:?}"
    );
    // With a folder, the pages are files written, their rows beside.
    let both = shared
        .replace("table: channels", "table: both")
        .replace("{ sqlite:", "{ folder: out/trending, sqlite:");
    d.write(&trending(&store, &up3.base(), &["US"], &both));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        summary(&r, "trending").contains("; 3 pages written, 9 rows upserted (1 new, 8 replaced);"),
        "{r:?}"
    );
}

#[test]
fn a_run_killed_mid_run_then_rerun_leaves_every_row_once() {
    killed_mid_run_then_rerun(RowsSink::Sqlite);
}

/// A run of 3 regions side by side killed (-9) while their second pages
/// are in flight: the first pages' rows stay, and the next run leaves every
/// row once. `sink`: where the rows go (run against both).
pub(crate) fn killed_mid_run_then_rerun(sink: RowsSink) {
    // Second pages answer in 3 s: the kill lands while they are in
    // flight, the three regions' first pages (written at once, side by
    // side, their rows committed together or not) committed.
    let slow = Standin::start(&["--slow", "pageToken=CAUQ1=3s"]);
    let d = Deployment::new("");
    sink.ready(&d);
    let store = embedded_store(&d);
    let regions = ["US", "GB", "DE"];
    let output = sink.output("out/videos.db", "videos", ROWS_FIELDS);
    d.write(&trending_at(&store, &slow.base(), &regions, &output, 3));
    let mut victim = spawn(&mut d.cmd(&["run"]));
    wait_until(Duration::from_secs(30), "page 2 never asked for", || {
        let seen = slow.seen();
        (regions.iter()).all(|r| seen.iter().any(|s| s.page == 1 && s.region == *r))
    });
    kill("-KILL", victim.id());
    victim.wait().unwrap();
    let before = sink.keys(&d, "out/videos.db", "videos").len();
    assert_eq!(before, 15, "the first pages");

    let up = Standin::start(&[]);
    d.write(&trending_at(&store, &up.base(), &regions, &output, 3));
    let r = d.run_after_killed_lock();
    assert_eq!(r.code, 0, "{r:?}");
    let got = sink.keys(&d, "out/videos.db", "videos");
    let want: BTreeSet<String> = regions
        .iter()
        .flat_map(|r| (0..3).flat_map(move |p| (0..5).map(move |i| format!("{r}{p:02}{i:03}"))))
        .collect();
    assert_eq!(got, want);
    if let RowsSink::Sqlite = sink {
        index_in_step(&db(&d));
    }
}

#[test]
fn a_reader_holding_a_read_transaction_does_not_stop_a_run() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    d.write(&trending(&store, &up.base(), &["US"], ROWS));
    assert_eq!(d.portion(&["run"]).code, 0);
    let mut reader = db(&d);
    let tx = reader.transaction().unwrap();
    let n: i64 = tx
        .query_row("SELECT count(*) FROM videos", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 15);
    // A second region while the reader holds its snapshot.
    d.write(&trending(&store, &up.base(), &["US", "GB"], ROWS));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let n: i64 = tx
        .query_row("SELECT count(*) FROM videos", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 15, "the reader's snapshot");
    tx.commit().unwrap();
    let n: i64 = reader
        .query_row("SELECT count(*) FROM videos", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 30);
}

#[test]
fn a_table_of_another_shape_or_a_path_that_cannot_be_written_is_78() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    d.write(&trending(&store, &up.base(), &["US"], ROWS));
    let r = d.portion(&["run", "--dry-run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("rows into")
            && r.stdout.contains("videos.db table videos")
            && r.stdout.contains("videos_search"),
        "{r:?}"
    );
    std::fs::create_dir_all(d.path().join("out")).unwrap();
    Connection::open(d.path().join("out/videos.db"))
        .unwrap()
        .execute_batch("CREATE TABLE videos (id TEXT PRIMARY KEY, title TEXT);")
        .unwrap();
    for cmd in ["check", "run"] {
        let r = d.portion(&[cmd]);
        assert_eq!(r.code, 78, "{cmd}: {r:?}");
        for said in [
            "portion.yaml",
            "jobs.trending.output.sqlite.table",
            "videos.db",
            "(id, title)",
        ] {
            assert!(r.stderr.contains(said), "{cmd} must say {said}: {r:?}");
        }
    }
    assert!(up.seen().is_empty(), "nothing fetched");
    // A path under a file: nothing can be created there.
    std::fs::write(d.path().join("plain"), "").unwrap();
    d.write(&trending(
        &store,
        &up.base(),
        &["US"],
        &ROWS.replace("out/videos.db", "plain/videos.db"),
    ));
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 78, "{r:?}");
    assert!(
        r.stderr.contains("jobs.trending.output.sqlite.path"),
        "{r:?}"
    );
    // What the file says, checked as the rest of the file is.
    for (output, field) in [
        (
            ROWS.replace("table: videos", "table: 1videos"),
            "output.sqlite.table",
        ),
        (
            ROWS.replace("items: /items/*", "items: items/*"),
            "output.sqlite.items",
        ),
        (
            ROWS.replace("key: /id", "key: /items/*/id"),
            "output.sqlite.key",
        ),
        (
            ROWS.replace("[/snippet/title]", "[/a/title, /b/title]"),
            "output.sqlite.search[1]",
        ),
        // Keyed by the input where an input has several rows (items of
        // an array, pages): each would replace the one before.
        (ROWS.replace("key: /id", "key: \"\""), "output.sqlite.key"),
        (
            ROWS.replace("key: /id", "key: \"\"")
                .replace("items: /items/*", "items: \"\""),
            "output.sqlite.key",
        ),
        ("{ folder: \"\" }".to_string(), "output.folder"),
        ("{}".to_string(), "jobs.trending.output"),
    ] {
        d.write(&trending(&store, &up.base(), &["US"], &output));
        let r = d.portion(&["check"]);
        assert_eq!(r.code, 78, "{output}: {r:?}");
        assert!(r.stderr.contains(field), "{output}: {r:?}");
    }
}

/// A database path that is no database (a folder, a file of noise) stops
/// `run` as `check`: 78, the field named; one that is not a regular file
/// (a FIFO here, as a device) is refused at `check` too (the probe's
/// F-sqlite-exit).
#[test]
fn a_database_path_that_cannot_be_opened_is_78_at_run_as_at_check() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    std::fs::create_dir(d.path().join("adir")).unwrap();
    std::fs::write(d.path().join("noise.db"), [0x5a_u8; 5000]).unwrap();
    let fifo = d.path().join("fifo.db");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.unwrap().success());
    for path in ["adir", "noise.db", "fifo.db"] {
        let output = ROWS.replace("out/videos.db", path);
        d.write(&trending(&store, &up.base(), &["US"], &output));
        for cmd in ["check", "run"] {
            // (the timeout only ends a hang the test is about; never met)
            let r = crate::common::deployment::run(
                &mut d.cmd_via(&["timeout", "-s", "KILL", "60"], &[cmd]),
            );
            assert_eq!(r.code, 78, "{path} {cmd}: {r:?}");
            for said in ["jobs.trending.output.sqlite.path", path] {
                assert!(r.stderr.contains(said), "{path} {cmd:?} says {said}: {r:?}");
            }
        }
    }
    assert!(up.seen().is_empty(), "nothing fetched");
}

/// Charges in the embedded store's log at `ledger`.
fn charges(ledger: &std::path::Path) -> i64 {
    Connection::open(ledger)
        .unwrap()
        .query_row("SELECT count(*) FROM log", [], |r| r.get(0))
        .unwrap()
}

/// A database that is the embedded store's file, by any spelling (as the
/// store names it, `./`, `out/..`, a symlink, its `-wal`; the history
/// beside the default store), is refused by `check` and `run`: 78 naming
/// the file and field, nothing fetched or charged, nothing made there.
#[test]
fn a_database_that_is_the_embedded_store_s_file_is_78() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    let ledger = d.path().join("ledger.sqlite3");
    d.write(&trending(&store, &up.base(), &["US"], ROWS));
    assert_eq!(d.portion(&["run"]).code, 0);
    let charged = charges(&ledger);
    assert_eq!(charged, 3);
    std::os::unix::fs::symlink(&ledger, d.path().join("out/link.db")).unwrap();
    let default = "state/portion/ledger.sqlite3";
    for (store, path) in [
        (store.as_str(), "ledger.sqlite3"),
        (&store, "./ledger.sqlite3"),
        (&store, "out/../ledger.sqlite3"),
        (&store, "out/link.db"),
        (&store, "ledger.sqlite3-wal"),
        ("embedded", default),
        ("embedded", "./state/portion/history.json"),
    ] {
        let output = ROWS.replace("out/videos.db", path);
        d.write(&trending(store, &up.base(), &["US"], &output));
        for cmd in [&["check"][..], &["run"], &["run", "--dry-run"]] {
            let r = d.portion(cmd);
            assert_eq!(r.code, 78, "{path} {cmd:?}: {r:?}");
            for said in ["portion.yaml", "jobs.trending.output.sqlite.path", path] {
                assert!(r.stderr.contains(said), "{path} {cmd:?} says {said}: {r:?}");
            }
        }
    }
    assert_eq!(up.seen().len(), 3, "the first run's calls only");
    assert_eq!(charges(&ledger), charged);
    assert!(!d.path().join(default).exists(), "no default store made");
    let tables: i64 = Connection::open(&ledger)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name LIKE 'videos%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 0, "no rows' table in the ledger");
}

/// Jobs writing one table share its full-text index: two with another
/// `search` are refused by `check` and `run` though no database exists yet
/// to compare with (the probe's F-share-table).
#[test]
fn two_jobs_sharing_a_table_with_another_search_are_78_on_a_fresh_database() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    let yaml = |b_rows: &str| {
        main_units(&store, WIDE)
            .endpoint("videos.list", "{ units: 1 }")
            .job(
                Job::new("a", "main")
                    .regions(&["US"])
                    .step(videos_list(&up.base(), 1))
                    .output(ROWS),
            )
            .job(
                Job::new("b", "main")
                    .regions(&["GB"])
                    .step(videos_list(&up.base(), 1))
                    .output(b_rows),
            )
            .render()
    };
    let other = ROWS.replace("[/snippet/title]", "[/snippet/title, /n]");
    let none = ROWS.replace(", search: [/snippet/title]", "");
    for b_rows in [&other, &none] {
        d.write(&yaml(b_rows));
        for cmd in ["check", "run"] {
            let r = d.portion(&[cmd]);
            assert_eq!(r.code, 78, "{b_rows} {cmd}: {r:?}");
            for said in [
                "jobs.b.output.sqlite.search",
                "as job a does",
                "[/snippet/title]",
            ] {
                assert!(r.stderr.contains(said), "{cmd} says {said}: {r:?}");
            }
        }
    }
    assert!(!d.path().join("out/videos.db").exists(), "nothing made");
    // The same `search` (and another table beside it) is fine.
    d.write(&yaml(ROWS));
    assert_eq!(d.portion(&["check"]).code, 0);
    d.write(&yaml(&other.replace("table: videos", "table: more")));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(up.seen().len() == 2, "{:?}", up.seen());
}

/// One videos.list call a region, no pages after it.
fn one_page(base: &str) -> Step {
    Step::new("videos.list")
        .url(&format!("{base}/youtube/v3/videos"))
        .query(r#"{ part: snippet, chart: mostPopular, regionCode: "{region}", key: "{secret}" }"#)
}

/// Two jobs into one table with the default key (the input's or the
/// region's) would replace each other's rows: `check` and `run` refuse it
/// with 78, naming both jobs and the table; each naming its own `key`
/// pointer, they may share it.
#[test]
fn two_jobs_sharing_a_table_by_the_default_key_are_78() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    let yaml = |a_rows: &str, b_rows: &str| {
        main_units(&store, WIDE)
            .endpoint("videos.list", "{ units: 1 }")
            .job(
                Job::new("a", "main")
                    .regions(&["US"])
                    .step(one_page(&up.base()))
                    .output(a_rows),
            )
            .job(
                Job::new("b", "main")
                    .regions(&["US"])
                    .step(one_page(&up.base()))
                    .output(b_rows),
            )
            .render()
    };
    // (one row a page: the default key is the region's)
    let default_key = ROWS
        .replace(", key: /id", "")
        .replace("items: /items/*", "items: \"\"");
    for (a, b, field) in [
        (ROWS, default_key.as_str(), "jobs.b.output.sqlite.key"),
        (default_key.as_str(), ROWS, "jobs.a.output.sqlite.key"),
        (
            default_key.as_str(),
            default_key.as_str(),
            "jobs.b.output.sqlite.key",
        ),
    ] {
        d.write(&yaml(a, b));
        for cmd in ["check", "run"] {
            let r = d.portion(&[cmd]);
            assert_eq!(r.code, 78, "{cmd}: {r:?}");
            for said in [
                field,
                "jobs a and b both write table 'videos'",
                "names no `key` pointer",
            ] {
                assert!(r.stderr.contains(said), "{cmd} says {said}: {r:?}");
            }
        }
    }
    assert!(up.seen().is_empty(), "nothing sent: {:?}", up.seen());
    d.write(&yaml(ROWS, ROWS));
    assert_eq!(d.portion(&["check"]).code, 0);
}

/// A once-job of inputs whose rows (no page files) are in the table, run
/// against a new store: no input with rows is fetched again.
/// A once-job over `ids.txt`, `concurrency` inputs at once, one row an
/// input in table `results` of `out/rows.db`, no page files.
pub(crate) fn rows_only(store: &str, base: &str, concurrency: usize) -> String {
    rows_only_into(store, base, concurrency, &RowsSink::Sqlite)
}

/// [`rows_only`], its rows in `sink`'s table `results`.
pub(crate) fn rows_only_into(
    store: &str,
    base: &str,
    concurrency: usize,
    sink: &RowsSink,
) -> String {
    main_units(store, WIDE)
        .endpoint("videos.list", "{ units: 1 }")
        .job(
            Job::new("list", "main")
                .set("inputs", "{ file: ids.txt }")
                .set("once", "true")
                .set("concurrency", &concurrency.to_string())
                .step(
                    Step::new("videos.list")
                        .url(&format!("{base}/youtube/v3/videos"))
                        .query(r#"{ part: snippet, regionCode: "{key}", maxResults: 1, key: "{secret}" }"#),
                )
                .output(&sink.output("out/rows.db", "results", "")),
        )
        .render()
}

/// The inputs with a row in `results` (none before the table is made).
pub(crate) fn inputs_with_rows(d: &Deployment) -> BTreeMap<String, usize> {
    let Ok(c) = Connection::open(d.path().join("out/rows.db")) else {
        return BTreeMap::new();
    };
    let Ok(mut stmt) = c.prepare("SELECT input, count(*) FROM results GROUP BY input") else {
        return BTreeMap::new();
    };
    stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as usize)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn a_kill_9_of_a_rows_only_once_job_fetches_no_input_with_rows_again() {
    kill_9_of_a_rows_only_once_job(RowsSink::Sqlite);
}

/// A once-job of inputs whose rows (no page files) are in `sink`'s table,
/// killed (-9) while the store held its cursor's save: no input with rows
/// is fetched again, at most the requests in flight are redone, every
/// input ends with one row.
pub(crate) fn kill_9_of_a_rows_only_once_job(sink: RowsSink) {
    let redis = RedisServer::start();
    // K6 answers in 3 s, the others at once.
    let slow = Standin::start(&["--slow", "=K6&=3s"]);
    let d = Deployment::new("");
    sink.ready(&d);
    let with_rows = |d: &Deployment| sink.inputs_with_rows(d, "out/rows.db", "results");
    let all = keys(0..30);
    write(&d, "ids.txt", &(all.join("\n") + "\n"));
    d.write(&rows_only_into(&redis.url(), &slow.base(), 4, &sink));
    let mut victim = spawn(&mut d.cmd(&["run"]));
    wait_until(Duration::from_secs(30), "K6 was never asked for", || {
        slow.seen().iter().any(|s| s.region == "K6")
    });
    // The store stops answering while K6 is in flight: its rows are
    // committed, the cursor's save after them waits; then the kill.
    kill("-STOP", redis.pid());
    wait_until(Duration::from_secs(30), "K6's row never written", || {
        with_rows(&d).contains_key("K6")
    });
    kill("-KILL", victim.id());
    victim.wait().unwrap();
    kill("-CONT", redis.pid());
    let written = with_rows(&d);
    let first = per_key(&slow);

    let up = Standin::start(&[]);
    d.write(&rows_only_into(&redis.url(), &up.base(), 4, &sink));
    let r = d.run_after_killed_lock();
    assert_eq!(r.code, 0, "{r:?}");
    let second = per_key(&up);
    let again: Vec<&String> = second.keys().filter(|k| written.contains_key(*k)).collect();
    assert!(
        again.is_empty(),
        "fetched again though it has rows: {again:?}: {r:?}"
    );
    let redone = second.keys().filter(|k| first.contains_key(*k)).count();
    assert!(redone <= 4, "{redone} redone: {first:?} {second:?}");
    assert_eq!(with_rows(&d), once_each(&all), "{r:?}");
}

#[test]
fn a_new_store_fetches_no_input_that_has_rows() {
    new_store_fetches_no_input_that_has_rows(RowsSink::Sqlite);
}

/// A once-job whose store is replaced by a new one (its cursor lost)
/// fetches no input that has rows in `sink`'s table.
pub(crate) fn new_store_fetches_no_input_that_has_rows(sink: RowsSink) {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    sink.ready(&d);
    let job = |store: &str| rows_only_into(store, &up.base(), 1, &sink);
    write(&d, "ids.txt", &(keys(0..8).join("\n") + "\n"));
    d.write(&job(&embedded_store(&d)));
    assert_eq!(d.portion(&["run"]).code, 0);
    assert_eq!(up.seen().len(), 8);
    write(&d, "ids.txt", &(keys(0..10).join("\n") + "\n"));
    let new = format!("embedded:{}", d.path().join("new.sqlite3").display());
    d.write(&job(&new));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(per_key(&up), once_each(&keys(0..10)), "{r:?}");
    let inputs = sink.inputs_with_rows(&d, "out/rows.db", "results");
    let keyed = sink.keys(&d, "out/rows.db", "results");
    assert_eq!(inputs, once_each(&keys(0..10)), "one row an input");
    assert_eq!(keyed, keys(0..10).into_iter().collect(), "keyed by it");
    assert!(!d.path().join("out/list").exists());
}

/// A once-job writing pages and rows: a page written whose rows a kill
/// (here while a reader's lock kept them out) never committed is not
/// taken as done from the page alone: the next run fetches that input
/// again, and every input ends with its row.
#[test]
fn a_page_without_its_rows_is_not_taken_as_done() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    write(&d, "ids.txt", "K0\nK1\n");
    let yaml = rows_only(&embedded_store(&d), &up.base(), 1).replace(
        "{ sqlite: { path: out/rows.db",
        "{ folder: out/list, sqlite: { path: out/rows.db",
    );
    assert!(yaml.contains("folder: out/list"), "{yaml}");
    d.write(&yaml);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    write(&d, "ids.txt", "K0\nK1\nK2\nK3\n");
    // K2 answers in 3 s; meanwhile a writer takes the database: K2's page
    // is written, its rows wait for the lock.
    let slow = Standin::start(&["--slow", "=K2&=3s"]);
    let yaml = yaml.replace(&up.base(), &slow.base());
    d.write(&yaml);
    let mut victim = spawn(&mut d.cmd(&["run"]));
    wait_until(Duration::from_secs(30), "K2 was never asked for", || {
        slow.seen().iter().any(|s| s.region == "K2")
    });
    let holder = Connection::open(d.path().join("out/rows.db")).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    wait_until(Duration::from_secs(30), "K2's page never written", || {
        (d.outputs("list").iter())
            .any(|p| p.contains(".K2.") && !p.starts_with('.') && p.ends_with(".json"))
    });
    kill("-KILL", victim.id());
    victim.wait().unwrap();
    holder.execute_batch("ROLLBACK").unwrap();
    assert!(!inputs_with_rows(&d).contains_key("K2"), "the lock held");

    let again = Standin::start(&[]);
    d.write(&yaml.replace(&slow.base(), &again.base()));
    let r = d.run_after_killed_lock();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(per_key(&again), once_each(&keys(2..4)), "{r:?}");
    assert_eq!(inputs_with_rows(&d), once_each(&keys(0..4)), "{r:?}");
}

/// An `items` pointer that finds nothing in a page (not even an empty
/// array) is said, per page, and counted in the summary: never a run
/// that quietly keeps no rows.
#[test]
fn a_page_with_nothing_at_items_is_said_and_counted() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    write(&d, "ids.txt", "K0\nK1\n");
    let yaml = rows_only(&embedded_store(&d), &up.base(), 1).replace(
        "table: results }",
        "table: results, items: /missing/*, key: /id }",
    );
    assert!(yaml.contains("/missing/*"), "{yaml}");
    d.write(&yaml);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("nothing at /missing/* in the page of K0"),
        "{r:?}"
    );
    assert_eq!(
        summary(&r, "list"),
        "job list: finished; 2 calls, spent units 2; inputs done 2, 0 skipped; \
         2 pages' rows committed to table results, 0 rows upserted (0 new, 0 replaced), \
         2 page(s) with nothing at `items`; next run starts at line 3 of its inputs"
    );
}
