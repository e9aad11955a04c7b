//! Typed columns of `output.sqlite` (issue 39, "Typed columns"): fields of
//! each row kept as columns of their own type, written with the row in
//! its upsert, read back with SQL as a user's query would; a value that
//! does not fit its type NULL and counted in the summary line, never a
//! failed page; what `check` and `run` refuse (78, nothing charged); a
//! table made without a column gaining it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use crate::common::deployment::{Deployment, api_yaml, embedded_store};
use crate::common::server::{raw, serving};
use crate::common::yaml::{Job, Step};

/// The issue's columns, and a boolean and a real one.
pub(crate) const COLUMNS: &str = "{ title: /title, created: { from: /created_at, type: timestamp }, \
     stars: { from: /stargazers_count, type: integer }, fork: { from: /fork, type: boolean }, \
     score: { from: /score, type: real } }";

/// Repository 1 fits every column, 2 fits them as strings or with an
/// offset, 3 fits none but `title` (an object: its JSON text), 4 has none
/// of the fields (NULL, not counted).
const PAGE: &str = r#"{"items":[
  {"id":1,"title":"alpha","created_at":"2024-05-01T12:00:00Z","stargazers_count":42,"fork":false,"score":1.5},
  {"id":2,"title":"beta","created_at":"2023-01-02T05:04:05+02:00","stargazers_count":"7","fork":true,"score":"2"},
  {"id":3,"title":{"en":"gamma"},"created_at":"yesterday","stargazers_count":"many","fork":"no","score":[1]},
  {"id":4}
]}"#;

/// The page the second run gets: repository 1 changed (its stars now
/// a value that does not fit, its score gone), 2 as it was.
const CHANGED: &str = r#"{"items":[
  {"id":1,"title":"alpha 2","created_at":"2024-05-01T12:00:00Z","stargazers_count":4.5,"fork":true},
  {"id":2,"title":"beta","created_at":"2023-01-02T05:04:05+02:00","stargazers_count":"7","fork":true,"score":"2"}
]}"#;

/// A server of `/repos` answering [`PAGE`], or [`CHANGED`] once `changed`.
pub(crate) fn server() -> (String, Arc<AtomicBool>, Arc<Mutex<Vec<String>>>) {
    let changed = Arc::new(AtomicBool::new(false));
    let now = changed.clone();
    let (base, heads) = serving(move |_| {
        let page = if now.load(Ordering::SeqCst) {
            CHANGED
        } else {
            PAGE
        };
        raw(
            "200 OK",
            &["Content-Type: application/json"],
            page.as_bytes(),
        )
    });
    (base, changed, heads)
}

/// Job `repos` of one region asking `base/repos`, its rows in table
/// `repos` of `out/repos.db` with `columns` (none: no `columns` field).
fn yaml(d: &Deployment, base: &str, columns: Option<&str>) -> String {
    let columns = columns.map_or(String::new(), |c| format!(", columns: {c}"));
    let job = Job::new("repos", "main")
        .regions(&["GB"])
        .step(
            Step::new("api")
                .url(&format!("\"{base}/repos\""))
                .query(r#"{ key: "{secret}" }"#),
        )
        .output(&format!(
            "{{ sqlite: {{ path: out/repos.db, table: repos, items: /items/*, key: /id{columns} }} }}"
        ));
    api_yaml(&embedded_store(d), &job.to_string())
}

fn db(d: &Deployment) -> Connection {
    Connection::open(d.path().join("out/repos.db")).unwrap()
}

/// Each row's `SQL` (one value), by key, as text (NULL: "NULL").
fn each(c: &Connection, sql: &str) -> Vec<(String, String)> {
    let mut stmt = c
        .prepare(&format!("SELECT key, {sql} FROM repos ORDER BY key"))
        .unwrap();
    stmt.query_map([], |r| {
        let v: rusqlite::types::Value = r.get(1)?;
        let shown = match v {
            rusqlite::types::Value::Null => "NULL".to_string(),
            rusqlite::types::Value::Integer(n) => n.to_string(),
            rusqlite::types::Value::Real(x) => format!("{x:?}"),
            rusqlite::types::Value::Text(t) => t,
            rusqlite::types::Value::Blob(_) => "BLOB".to_string(),
        };
        Ok((r.get(0)?, shown))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

fn pairs(want: &[(&str, &str)]) -> Vec<(String, String)> {
    (want.iter())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The summary line of job `repos`.
fn summary(r: &crate::common::deployment::Ran) -> String {
    crate::run_sqlite::summary(r, "repos").to_string()
}

#[test]
fn typed_columns_are_written_with_the_row_and_a_value_that_does_not_fit_is_null_and_counted() {
    let (base, changed, _) = server();
    let d = Deployment::new("");
    d.write(&yaml(&d, &base, Some(COLUMNS)));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        summary(&r).contains(
            "4 rows upserted (4 new, 0 replaced), values not fitting their column's type written NULL: \
             created 1, stars 1, fork 1, score 1"
        ),
        "{r:?}"
    );
    let c = db(&d);
    assert_eq!(
        each(
            &c,
            "typeof(title) || ' ' || typeof(created) || ' ' || typeof(stars) || ' ' || typeof(fork) || ' ' || typeof(score)"
        ),
        pairs(&[
            ("1", "text text integer integer real"),
            ("2", "text text integer integer real"),
            ("3", "text null null null null"),
            ("4", "null null null null null"),
        ])
    );
    let starred: Vec<String> = c
        .prepare("SELECT key FROM repos WHERE stars > 10")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(starred, ["1"]);
    assert_eq!(
        each(&c, "title"),
        pairs(&[
            ("1", "alpha"),
            ("2", "beta"),
            ("3", r#"{"en":"gamma"}"#),
            ("4", "NULL")
        ])
    );
    // Timestamps: UTC text of one width, which SQLite's date functions
    // read and which sorts as time does.
    assert_eq!(
        each(&c, "created"),
        pairs(&[
            ("1", "2024-05-01T12:00:00.000000Z"),
            ("2", "2023-01-02T03:04:05.000000Z"),
            ("3", "NULL"),
            ("4", "NULL"),
        ])
    );
    assert_eq!(
        each(&c, "strftime('%s', created)"),
        pairs(&[
            ("1", "1714564800"),
            ("2", "1672628645"),
            ("3", "NULL"),
            ("4", "NULL")
        ])
    );
    let newest: String = c
        .query_row(
            "SELECT key FROM repos WHERE created > '2024-01-01' ORDER BY created DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(newest, "1");
    assert_eq!(
        each(&c, "fork"),
        pairs(&[("1", "0"), ("2", "1"), ("3", "NULL"), ("4", "NULL")])
    );
    assert_eq!(each(&c, "score")[..2], pairs(&[("1", "1.5"), ("2", "2.0")]));
    drop(c);
    // A replaced row replaces its columns: stars that no longer fit, a
    // score no longer there, both NULL.
    changed.store(true, Ordering::SeqCst);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        summary(&r).contains(
            "2 rows upserted (0 new, 2 replaced), values not fitting their column's type written NULL: stars 1"
        ),
        "{r:?}"
    );
    let c = db(&d);
    assert_eq!(
        each(
            &c,
            "title || ' ' || coalesce(stars, 'NULL') || ' ' || fork || ' ' || coalesce(score, 'NULL')"
        ),
        pairs(&[
            ("1", "alpha 2 NULL 1 NULL"),
            ("2", "beta 7 1 2.0"),
            ("3", "NULL"),
            ("4", "NULL"),
        ])
    );
}

#[test]
fn check_and_run_refuse_columns_the_table_cannot_have() {
    let (base, _, heads) = server();
    let d = Deployment::new("");
    let good = yaml(&d, &base, Some(COLUMNS));
    d.write(&good);
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(
            "key /id, columns title text at /title, created timestamp at /created_at, \
             stars integer at /stargazers_count, fork boolean at /fork, score real at /score\n"
        ),
        "{}",
        r.stdout
    );
    let field = "jobs.repos.output.sqlite.columns";
    d.assert_each_edit_exits_78(
        &good,
        &[
            (
                "a built-in column's name",
                "title: /title",
                "key: /title",
                &[&format!("{field}.key"), "keeps for itself"],
            ),
            (
                "a built-in column's name in another case",
                "title: /title",
                "Fetched_At: /title",
                &[&format!("{field}.Fetched_At"), "keeps for itself"],
            ),
            (
                "a name SQL does not take unquoted",
                "title: /title",
                "\"my title\": /title",
                &[&format!("{field}.my title"), "letters, digits and _"],
            ),
            (
                "a name starting with a digit",
                "title: /title",
                "1st: /title",
                &[&format!("{field}.1st"), "not starting with a digit"],
            ),
            (
                "one name twice",
                "title: /title",
                "title: /title, TITLE: /name",
                &[&format!("{field}.TITLE"), "again"],
            ),
            (
                "a pointer without its /",
                "title: /title",
                "title: title",
                &[&format!("{field}.title"), "JSON pointer"],
            ),
            (
                "a pointer to many values",
                "from: /stargazers_count",
                "from: /stargazers/*",
                &[&format!("{field}.stars.from"), "one value"],
            ),
            (
                "an unknown type",
                "type: integer",
                "type: int",
                &[&format!("{field}.stars.type"), "'int' is no column type"],
            ),
            (
                "no from",
                "from: /stargazers_count, ",
                "",
                &[&format!("{field}.stars.from"), "missing"],
            ),
            (
                "an unknown field",
                "type: integer",
                "type: integer, default: 0",
                &[&format!("{field}.stars"), "unknown field"],
            ),
        ],
    );
    assert!(heads.lock().unwrap().is_empty(), "nothing asked");
    // A table whose column has another type, or a column `columns` does
    // not name: refused by `check` and by `run` before its first call.
    d.write(&good);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let asked = heads.lock().unwrap().len();
    let table = "jobs.repos.output.sqlite.table";
    for (name, to, says) in [
        (
            "a column of another type",
            COLUMNS.replace("type: integer", "type: text"),
            "has column 'stars' of type INTEGER, where `columns.stars` is text (TEXT)",
        ),
        (
            "a column no longer named",
            COLUMNS.replace("title: /title, ", ""),
            "has a column 'title' that `columns` does not name",
        ),
    ] {
        d.write(&yaml(&d, &base, Some(&to)));
        for cmd in ["check", "run"] {
            let r = d.portion(&[cmd]);
            assert_eq!(r.code, 78, "{name} ({cmd}): {r:?}");
            for want in [table, says, &d.config().display().to_string()] {
                assert!(r.stderr.contains(want), "{name} ({cmd}) says {want}: {r:?}");
            }
        }
    }
    assert_eq!(heads.lock().unwrap().len(), asked, "nothing asked");
}

#[test]
fn a_table_made_without_a_column_gains_it_and_its_rows_there_are_null() {
    let (base, _, _) = server();
    let d = Deployment::new("");
    // The table as a build without typed columns made it, with a row no
    // page has.
    d.write(&yaml(&d, &base, None));
    assert_eq!(d.portion(&["run"]).code, 0);
    db(&d)
        .execute(
            "INSERT INTO repos (key, job, input, fetched_at, item) \
             VALUES ('old', 'repos', 'GB', '2020-01-01T00:00:00Z', '{\"stargazers_count\":99}')",
            [],
        )
        .unwrap();
    d.write(&yaml(&d, &base, Some(COLUMNS)));
    // (check takes the table as it is, adding nothing)
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 0, "{r:?}");
    let names = |c: &Connection| -> Vec<String> {
        let mut stmt = c
            .prepare("SELECT name || ' ' || type FROM pragma_table_info('repos')")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(names(&db(&d)).len(), 5);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let c = db(&d);
    assert_eq!(
        names(&c)[5..],
        [
            "title TEXT",
            "created TIMESTAMP",
            "stars INTEGER",
            "fork BOOLEAN",
            "score REAL"
        ]
    );
    assert_eq!(
        each(&c, "stars"),
        pairs(&[
            ("1", "42"),
            ("2", "7"),
            ("3", "NULL"),
            ("4", "NULL"),
            ("old", "NULL")
        ])
    );
}

#[test]
fn a_column_named_like_an_sql_keyword_is_a_column_like_any_other() {
    let (base, _, _) = server();
    let d = Deployment::new("");
    let columns = "{ order: { from: /id, type: integer }, select: /title, Group: { from: /fork, type: boolean } }";
    d.write(&yaml(&d, &base, Some(columns)));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let c = db(&d);
    assert_eq!(
        each(
            &c,
            "\"order\" || ' ' || coalesce(\"select\", 'NULL') || ' ' || coalesce(\"Group\", 'NULL')"
        ),
        pairs(&[
            ("1", "1 alpha 0"),
            ("2", "2 beta 1"),
            ("3", r#"3 {"en":"gamma"} NULL"#),
            ("4", "4 NULL NULL")
        ])
    );
    // (the same columns again: the table is as they want it)
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn jobs_sharing_a_table_with_other_column_types_are_78_on_a_fresh_database() {
    let (base, _, heads) = server();
    let d = Deployment::new("");
    let job = |name: &str, columns: &str| {
        Job::new(name, "main")
            .regions(&["GB"])
            .step(
                Step::new("api")
                    .url(&format!("\"{base}/repos\""))
                    .query(r#"{ key: "{secret}" }"#),
            )
            .output(&format!(
                "{{ sqlite: {{ path: out/repos.db, table: repos, items: /items/*, key: /id, columns: {columns} }} }}"
            ))
            .to_string()
    };
    let store = embedded_store(&d);
    let same = "{ stars: { from: /stargazers_count, type: integer } }";
    // (the pointers may differ: the names and types are the table's)
    let elsewhere = "{ STARS: { from: /stars, type: integer } }";
    d.write(&api_yaml(&store, &(job("a", same) + &job("b", elsewhere))));
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 0, "{r:?}");
    let other = "{ stars: { from: /stargazers_count, type: real } }";
    d.write(&api_yaml(&store, &(job("a", same) + &job("b", other))));
    for cmd in ["check", "run"] {
        let r = d.portion(&[cmd]);
        assert_eq!(r.code, 78, "{cmd}: {r:?}");
        assert!(
            r.stderr.contains("jobs.b.output.sqlite.columns")
                && r.stderr.contains("[stars integer]")
                && r.stderr.contains("[stars real]"),
            "{cmd}: {r:?}"
        );
    }
    assert!(heads.lock().unwrap().is_empty(), "nothing asked");
}
