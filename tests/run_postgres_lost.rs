//! A PostgreSQL table's rows lost between runs (issue 39, as SQLite's in
//! run_conditional_held.rs and run_conditional_lost.rs): rows deleted, the
//! table dropped, the database dropped and made again. A validator is sent
//! only while its rows are there: the next run asks those pages in full
//! and writes their rows again, the run after that gets 304s.

use crate::common::deployment::{Deployment, embedded_store};
use crate::common::postgres::shared;
use crate::common::standin::Standin;
use crate::run_conditional::{CONDITIONAL, yaml};
use crate::run_conditional_held::full_then_304;
use crate::run_postgres::{count, url_file};

#[test]
fn rows_deleted_a_table_dropped_or_a_database_dropped_are_fetched_again_in_full() {
    let pg = shared();
    let db = pg.database();
    // (two pages of three issues in each of two repositories)
    let up = Standin::start(&["--pages", "2", "--items", "3"]);
    let d = Deployment::new("");
    url_file(&d, &pg.url(&db));
    let y = yaml(&embedded_store(&d), &up.base(), 100, CONDITIONAL);
    let rows_into = "output: { postgres: { url: { file: results.url }, table: issues, items: \"/*\", key: /id } }";
    d.write(&y.replace("output: out/issues", rows_into));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let rows = || count(&mut pg.connect(&db).unwrap(), "issues");
    assert_eq!(rows(), 12);
    let mut from = 4;
    for lose in ["DELETE FROM issues", "DROP TABLE issues", "DROP DATABASE"] {
        if lose == "DROP DATABASE" {
            // (a restore from before the table: the database empty)
            let mut c = pg.connect("postgres").unwrap();
            c.batch_execute(&format!("DROP DATABASE \"{db}\"")).unwrap();
            c.batch_execute(&format!("CREATE DATABASE \"{db}\""))
                .unwrap();
        } else {
            pg.connect(&db).unwrap().batch_execute(lose).unwrap();
        }
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{lose}: {r:?}");
        assert_eq!(rows(), 12, "{lose}: {r:?}");
        full_then_304(&up, from, &d);
        from += 6;
    }
}
