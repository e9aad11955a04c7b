//! Typed columns of `output.postgres` (issue 39, "Typed columns"): the same
//! columns as SQLite's, PostgreSQL's own types (text, bigint, double
//! precision, boolean, timestamptz), written with the row in its upsert,
//! read back with SQL against a real server; a value that does not fit
//! NULL and counted; a table made without a column gaining it; a column
//! of another type refused (78, nothing charged).

use crate::common::deployment::{Deployment, api_yaml, embedded_store};
use crate::common::postgres::shared;
use crate::common::yaml::{Job, Step};
use crate::run_postgres::url_file;
use crate::run_sqlite_columns::{COLUMNS, server};

/// Job `repos` of one region asking `base/repos`, its rows in PostgreSQL
/// table `repos` (the URL in `results.url`) with `columns` (none: no
/// `columns` field).
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
            "{{ postgres: {{ url: {{ file: results.url }}, table: repos, items: /items/*, key: /id{columns} }} }}"
        ));
    api_yaml(&embedded_store(d), &job.to_string())
}

/// Each row's `sql` (as text; NULL: "NULL"), by key.
fn each(c: &mut postgres::Client, sql: &str) -> Vec<(String, String)> {
    let rows = c
        .query(
            &format!("SELECT key, coalesce(({sql})::text, 'NULL') FROM repos ORDER BY key"),
            &[],
        )
        .unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

fn pairs(want: &[(&str, &str)]) -> Vec<(String, String)> {
    (want.iter())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn typed_columns_are_postgresql_columns_of_their_type_written_with_the_row() {
    let pg = shared();
    let db = pg.database();
    let (base, changed, _) = server();
    let d = Deployment::new("");
    url_file(&d, &pg.url(&db));
    d.write(&yaml(&d, &base, Some(COLUMNS)));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        crate::run_sqlite::summary(&r, "repos").contains(
            "4 rows upserted (4 new, 0 replaced), values not fitting their column's type written NULL: \
             created 1, stars 1, fork 1, score 1"
        ),
        "{r:?}"
    );
    let mut c = pg.connect(&db).unwrap();
    let types: Vec<(String, String)> = c
        .query(
            "SELECT column_name::text, data_type::text FROM information_schema.columns \
             WHERE table_name = 'repos' AND ordinal_position > 5 ORDER BY ordinal_position",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        types,
        pairs(&[
            ("title", "text"),
            ("created", "timestamp with time zone"),
            ("stars", "bigint"),
            ("fork", "boolean"),
            ("score", "double precision"),
        ])
    );
    let starred: Vec<String> = (c
        .query("SELECT key FROM repos WHERE stars > 10", &[])
        .unwrap())
    .iter()
    .map(|r| r.get(0))
    .collect();
    assert_eq!(starred, ["1"]);
    assert_eq!(
        each(&mut c, "title"),
        pairs(&[
            ("1", "alpha"),
            ("2", "beta"),
            ("3", r#"{"en":"gamma"}"#),
            ("4", "NULL")
        ])
    );
    assert_eq!(
        each(&mut c, "extract(epoch from created)::bigint"),
        pairs(&[
            ("1", "1714564800"),
            ("2", "1672628645"),
            ("3", "NULL"),
            ("4", "NULL")
        ])
    );
    assert_eq!(
        each(&mut c, "fork"),
        pairs(&[("1", "false"), ("2", "true"), ("3", "NULL"), ("4", "NULL")])
    );
    assert_eq!(
        each(&mut c, "score")[..2],
        pairs(&[("1", "1.5"), ("2", "2")])
    );
    // A replaced row replaces its columns.
    changed.store(true, std::sync::atomic::Ordering::SeqCst);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        each(&mut c, "stars::text || ' ' || coalesce(score::text, '-')")[..2],
        pairs(&[("1", "NULL"), ("2", "7 2")])
    );
    assert_eq!(each(&mut c, "title")[0], ("1".into(), "alpha 2".into()));
}

/// A table made without `columns` gains them at the next run (its rows
/// NULL there until written again); a column of another type than
/// `columns` says is refused by `check` and `run`, 78, nothing fetched.
#[test]
fn a_table_gains_a_column_and_one_of_another_type_is_refused() {
    let pg = shared();
    let db = pg.database();
    let (base, _, heads) = server();
    let d = Deployment::new("");
    url_file(&d, &pg.url(&db));
    d.write(&yaml(&d, &base, None));
    assert_eq!(d.portion(&["run"]).code, 0);
    d.write(&yaml(
        &d,
        &base,
        Some("{ stars: { from: /stargazers_count, type: integer } }"),
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let mut c = pg.connect(&db).unwrap();
    assert_eq!(
        each(&mut c, "stars"),
        pairs(&[("1", "42"), ("2", "7"), ("3", "NULL"), ("4", "NULL")])
    );
    let sent = heads.lock().unwrap().len();
    d.write(&yaml(
        &d,
        &base,
        Some("{ stars: { from: /stargazers_count, type: text } }"),
    ));
    for args in [&["check"][..], &["run"][..]] {
        let r = d.portion(args);
        assert_eq!(r.code, 78, "{args:?}: {r:?}");
        assert!(
            r.stderr
                .contains("has column stars of type bigint, where `columns.stars` is text"),
            "{args:?}: {r:?}"
        );
    }
    assert_eq!(heads.lock().unwrap().len(), sent, "nothing fetched");
}
