//! Rows in PostgreSQL (`output.postgres`) against a real server
//! (tests/common/postgres.rs): the fixture itself, the rows read back with
//! SQL, the SQLite sink's tests of exactness run against it, two hosts on
//! one table, and `status`. What it refuses is in run_postgres_errors.rs.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::common::deployment::{Deployment, embedded_store, kill, run, spawn};
use crate::common::inputs::{keys, once_each, per_key, write};
use crate::common::openmetrics::parse;
use crate::common::postgres::{PASSWORD, PgServer, shared};
use crate::common::redis::RedisServer;
use crate::common::sinks::RowsSink;
use crate::common::standin::Standin;
use crate::common::wait_until;
use crate::run_sqlite::{rows_only_into, summary, trending};

/// The shared server gives each test a database of its own, and a
/// server of a test's own stops and comes back on its port.
#[test]
fn the_fixture_makes_a_database_per_test_and_restarts_a_server() {
    let pg = shared();
    let (a, b) = (pg.database(), pg.database());
    assert_ne!(a, b);
    let mut c = postgres::Client::connect(&pg.url(&a), postgres::NoTls).unwrap();
    let one: i32 = c.query_one("SELECT 1", &[]).unwrap().get(0);
    assert_eq!(one, 1);
    let mut own = PgServer::start();
    let db = own.database();
    own.connect(&db).unwrap();
    own.stop();
    assert!(
        own.connect(&db).is_err(),
        "a stopped server answers nothing"
    );
    own.restart();
    own.connect(&db).unwrap();
}

/// `output.postgres` with the URL in a file beside the configuration
/// (`results.url`, written by [`url_file`]), its table `table`.
pub(crate) fn pg_rows(table: &str) -> String {
    format!(
        "{{ postgres: {{ url: {{ file: results.url }}, table: {table}, items: /items/*, key: /id, search: [/snippet/title] }} }}"
    )
}

/// Write `url` where [`pg_rows`] reads it.
pub(crate) fn url_file(d: &Deployment, url: &str) {
    std::fs::write(d.path().join("results.url"), format!("{url}\n")).unwrap();
}

/// `SELECT key` of table `table` where `filter` holds.
pub(crate) fn keys_where(c: &mut postgres::Client, table: &str, filter: &str) -> BTreeSet<String> {
    let sql = format!("SELECT key FROM {table} WHERE {filter}");
    (c.query(&sql, &[]).unwrap().iter())
        .map(|r| r.get(0))
        .collect()
}

pub(crate) fn count(c: &mut postgres::Client, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {table}");
    c.query_one(&sql, &[]).unwrap().get(0)
}

#[test]
fn rows_are_upserted_once_per_key_found_by_search_and_each_item_is_the_pages_element() {
    let pg = shared();
    let db = pg.database();
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    url_file(&d, &pg.url(&db));
    let both = pg_rows("videos").replace("{ postgres:", "{ folder: out/trending, postgres:");
    d.write(&trending(&store, &up.base(), &["US", "GB"], &both));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        summary(&r, "trending").contains("6 pages written, 30 rows upserted (30 new, 0 replaced)"),
        "{r:?}"
    );
    assert!(!r.all().contains(PASSWORD), "{r:?}");
    let mut c = pg.connect(&db).unwrap();
    assert_eq!(count(&mut c, "videos"), 30);
    let gb = keys_where(
        &mut c,
        "videos",
        "search @@ websearch_to_tsquery('simple', 'GB')",
    );
    assert_eq!(gb.len(), 15);
    assert!(gb.iter().all(|k| k.starts_with("GB")), "{gb:?}");
    let wrong = keys_where(
        &mut c,
        "videos",
        "job <> 'trending' OR NOT key LIKE input || '%'",
    );
    assert!(wrong.is_empty(), "{wrong:?}");
    // Each row's item is its page's element, as jsonb.
    let mut compared = 0;
    for file in d.outputs("trending") {
        let text = std::fs::read_to_string(d.path().join("out/trending").join(&file)).unwrap();
        let page: serde_json::Value = serde_json::from_str(&text).unwrap();
        for item in page["items"].as_array().unwrap() {
            let same: bool = c
                .query_one(
                    "SELECT item = $1::text::jsonb FROM videos WHERE key = $2",
                    &[&item.to_string(), &item["id"].as_str().unwrap()],
                )
                .unwrap()
                .get(0);
            assert!(same, "{item}");
            compared += 1;
        }
    }
    assert_eq!(compared, 30);
    // The same pages again: the same rows, none twice.
    d.write(&trending(
        &store,
        &up.base(),
        &["US", "GB"],
        &pg_rows("videos"),
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        summary(&r, "trending").contains("30 rows upserted (0 new, 30 replaced)"),
        "{r:?}"
    );
    assert_eq!(count(&mut c, "videos"), 30);
    // 3 items a page now: rows of the same key replaced (US01000 was
    // "Trending US #6", now "#4"), the others kept, search in step.
    let up3 = Standin::start(&["--items", "3"]);
    d.write(&trending(
        &store,
        &up3.base(),
        &["US", "GB"],
        &pg_rows("videos"),
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(count(&mut c, "videos"), 30);
    let title: String = c
        .query_one(
            "SELECT item->'snippet'->>'title' FROM videos WHERE key = 'US01000'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(title, "Trending US #4");
    let mut says = |word: &str| {
        let filter = format!("search @@ websearch_to_tsquery('simple', '{word}')");
        keys_where(&mut c, "videos", &filter).contains("US01000")
    };
    assert!(says("4"), "the search follows the row");
    assert!(!says("6"), "the search follows the row");
}

// The SQLite sink's tests of exactness, against PostgreSQL (run_sqlite.rs
// runs each against SQLite).

#[test]
fn a_run_killed_mid_run_then_rerun_leaves_every_row_once_in_postgres() {
    crate::run_sqlite::killed_mid_run_then_rerun(RowsSink::postgres());
}

#[test]
fn a_kill_9_of_a_rows_only_once_job_fetches_no_input_with_rows_again_from_postgres() {
    crate::run_sqlite::kill_9_of_a_rows_only_once_job(RowsSink::postgres());
}

#[test]
fn a_new_store_fetches_no_input_that_has_rows_in_postgres() {
    crate::run_sqlite::new_store_fetches_no_input_that_has_rows(RowsSink::postgres());
}

/// Two hosts (two configuration files) on one Redis and one PostgreSQL,
/// runs of one once-job alternating between them, each but the last
/// killed (-9) with requests in flight: one table, every input's row
/// once, none fetched again once its row is there.
#[test]
fn two_hosts_alternating_on_one_redis_and_one_postgres_leave_one_table_with_every_row_once() {
    let redis = RedisServer::start();
    let sink = RowsSink::postgres();
    let hosts = [Deployment::new(""), Deployment::new("")];
    let all = keys(0..60);
    for d in &hosts {
        sink.ready(d);
        write(d, "ids.txt", &(all.join("\n") + "\n"));
    }
    let mut fetched: BTreeMap<String, usize> = BTreeMap::new();
    let mut had = 0;
    // Host 0 is killed while K10 answers slowly, host 1 while K30 does.
    for (host, slow_key) in [(0, "K10"), (1, "K30")] {
        let d = &hosts[host];
        // (every answer 200 ms, so a run does not reach past the slow key
        // between two looks at what was asked)
        let slow = Standin::start(&["--delay", "200ms", "--slow", &format!("={slow_key}&=10s")]);
        d.write(&rows_only_into(&redis.url(), &slow.base(), 4, &sink));
        // (the lock of the run killed before: a run started meanwhile
        // stops at once, 75, and is started again)
        let mut victim = spawn(&mut d.cmd(&["run"]));
        wait_until(
            Duration::from_secs(30),
            "the slow key was never asked for",
            || {
                if slow.seen().iter().any(|s| s.region == slow_key) {
                    return true;
                }
                if let Ok(Some(end)) = victim.try_wait() {
                    assert_eq!(end.code(), Some(75), "a run ended before its kill");
                    victim = spawn(&mut d.cmd(&["run"]));
                }
                false
            },
        );
        kill("-KILL", victim.id());
        victim.wait().unwrap();
        for (k, n) in per_key(&slow) {
            *fetched.entry(k).or_default() += n;
        }
        // (each host wrote rows of its own into the one table)
        let now = sink.inputs_with_rows(d, "out/rows.db", "results").len();
        assert!(had < now && now < all.len(), "{had} then {now}");
        had = now;
    }
    let up = Standin::start(&[]);
    hosts[0].write(&rows_only_into(&redis.url(), &up.base(), 4, &sink));
    let r = hosts[0].run_after_killed_lock();
    assert_eq!(r.code, 0, "{r:?}");
    for (k, n) in per_key(&up) {
        *fetched.entry(k).or_default() += n;
    }
    let rows = sink.inputs_with_rows(&hosts[0], "out/rows.db", "results");
    assert_eq!(rows, once_each(&all), "one row an input: {r:?}");
    // (at most the requests in flight at each kill are sent again)
    let again: usize = fetched.values().map(|n| n - 1).sum();
    assert!(again <= 8, "{again} fetched again: {fetched:?}");
    assert_eq!(fetched.len(), all.len(), "{fetched:?}");
}

/// `status` shows each job's PostgreSQL table, its server (never the
/// password) and its rows of the job, one count bounded by 2 s: a count
/// that runs out (the table locked) is "unknown", and status still ends.
#[test]
fn status_shows_the_table_and_its_rows_or_unknown_when_the_count_runs_out() {
    let pg = shared();
    let db = pg.database();
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    url_file(&d, &pg.url(&db));
    d.write(&trending(
        &store,
        &up.base(),
        &["US", "GB"],
        &pg_rows("videos"),
    ));
    assert_eq!(d.portion(&["run"]).code, 0);
    let r = d.portion(&["status"]);
    assert_eq!(r.code, 0, "{r:?}");
    let line = format!(
        "table videos (PostgreSQL at 127.0.0.1:{} database {db}): 30 rows",
        pg.port
    );
    assert!(r.stdout.contains(&line), "{r:?}");
    assert!(!r.all().contains(PASSWORD), "{r:?}");
    let job = &d.status_json()["credentials"][0]["jobs"][0];
    assert_eq!(job["postgres"]["rows"], 30, "{job}");
    assert_eq!(job["postgres"]["table"], "videos", "{job}");
    // A writer holds the table: the count waits 2 s, then is unknown.
    let mut holder = pg.connect(&db).unwrap();
    let mut tx = holder.transaction().unwrap();
    tx.batch_execute("LOCK TABLE videos IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let started = std::time::Instant::now();
    let r = d.portion(&["status"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "{r:?}");
    assert!(
        r.stdout
            .contains("): rows unknown (the count ran out of its 2s)"),
        "{r:?}"
    );
    let job = &d.status_json()["credentials"][0]["jobs"][0];
    assert!(job["postgres"]["rows"].is_null(), "{job}");
    tx.rollback().unwrap();
}

/// Pages whose rows come while a commit runs share the next commit (as
/// SQLite's do): 16 regions side by side, their pages answered at once,
/// fewer transactions than pages, every row once.
#[test]
fn pages_written_at_once_share_a_commit() {
    let pg = shared();
    let db = pg.database();
    let up = Standin::start(&["--delay", "50ms"]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    url_file(&d, &pg.url(&db));
    let regions: Vec<String> = (0..16).map(|i| format!("R{i:02}")).collect();
    let regions: Vec<&str> = regions.iter().map(String::as_str).collect();
    d.write(&crate::run_sqlite::trending_at(
        &store,
        &up.base(),
        &regions,
        &pg_rows("videos"),
        16,
    ));
    let r = run(d.cmd(&["run"]).env("RUST_LOG", "portion=debug"));
    assert_eq!(r.code, 0, "{r:?}");
    let line = (r.stderr.lines())
        .find(|l| l.contains("page(s)' rows committed in"))
        .unwrap_or_else(|| panic!("{r:?}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "page(s)'").unwrap();
    let pages: u64 = words[at - 1].parse().unwrap();
    let commits: u64 = words[at + 4].parse().unwrap();
    assert_eq!(pages, 48, "{line}");
    assert!(commits < pages, "{line}");
    let mut c = pg.connect(&db).unwrap();
    assert_eq!(count(&mut c, "videos"), 16 * 15);
}

/// `run --metrics-file` counts the rows upserted per sink: a job writing
/// its rows to SQLite (each page's first item) and PostgreSQL (every item)
/// at once, each count its table's rows; pages again, each count their
/// upserts (a replaced row counts too).
#[test]
fn the_metrics_file_counts_rows_upserted_per_sink() {
    let pg = shared();
    let db = pg.database();
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    url_file(&d, &pg.url(&db));
    let both = pg_rows("videos").replace(
        "{ postgres:",
        "{ sqlite: { path: out/videos.db, table: videos, items: /items/0, key: /id }, postgres:",
    );
    let file = d.path().join("portion.prom");
    let upserted = |d: &Deployment, base: &str| {
        d.write(&trending(&store, base, &["US", "GB"], &both));
        let r = d.portion(&["run", "--metrics-file", file.to_str().unwrap()]);
        assert_eq!(r.code, 0, "{r:?}");
        let m = parse(&std::fs::read_to_string(&file).unwrap());
        let sinks: Vec<String> = (m.samples("portion_run_job_rows_upserted").iter())
            .map(|(labels, _)| format!("{}/{}", labels["job"], labels["sink"]))
            .collect();
        assert_eq!(sinks, ["trending/postgres", "trending/sqlite"]);
        let of = |sink| {
            let labels = [("job", "trending"), ("sink", sink)];
            m.value("portion_run_job_rows_upserted", &labels)
        };
        (of("sqlite"), of("postgres"))
    };
    assert_eq!(upserted(&d, &up.base()), (6.0, 30.0));
    let in_sqlite: i64 = rusqlite::Connection::open(d.path().join("out/videos.db"))
        .unwrap()
        .query_row("SELECT count(*) FROM videos", [], |r| r.get(0))
        .unwrap();
    assert_eq!(in_sqlite, 6);
    assert_eq!(count(&mut pg.connect(&db).unwrap(), "videos"), 30);
    // 3 items a page: 6 and 18 upserts, every one replacing a row.
    let up3 = Standin::start(&["--items", "3"]);
    assert_eq!(upserted(&d, &up3.base()), (6.0, 18.0));
}
