//! The two sinks of rows, for the tests of exactness that run against
//! both (issue 39): a job's `output` naming a SQLite table or a PostgreSQL
//! one (on the test binary's shared server, a database of the test's own,
//! its URL in `results.url` beside the configuration), and the rows read
//! back from either.

use std::collections::{BTreeMap, BTreeSet};

use super::deployment::Deployment;
use super::postgres::shared;

/// Where a test's rows go.
pub enum RowsSink {
    /// `output.sqlite`, the database at the path each call names.
    Sqlite,
    /// `output.postgres`: the URL of this database of the shared server.
    Postgres { db: String },
}

impl RowsSink {
    /// A PostgreSQL sink on a new database.
    pub fn postgres() -> Self {
        RowsSink::Postgres {
            db: shared().database(),
        }
    }

    /// `output` naming table `table` (in the SQLite database at `path`,
    /// relative to the deployment), `fields` its further settings
    /// (`", items: /items/*, key: /id"`, or `""`).
    pub fn output(&self, path: &str, table: &str, fields: &str) -> String {
        match self {
            RowsSink::Sqlite => {
                format!("{{ sqlite: {{ path: {path}, table: {table}{fields} }} }}")
            }
            RowsSink::Postgres { .. } => format!(
                "{{ postgres: {{ url: {{ file: results.url }}, table: {table}{fields} }} }}"
            ),
        }
    }

    /// Make `d` ready for this sink (the URL's file).
    pub fn ready(&self, d: &Deployment) {
        if let RowsSink::Postgres { db } = self {
            let url = shared().url(db);
            std::fs::write(d.path().join("results.url"), format!("{url}\n")).unwrap();
        }
    }

    /// The first column, as text, of the rows `sql` selects from the
    /// database (for SQLite at `path`), which must answer it.
    pub fn texts(&self, d: &Deployment, path: &str, sql: &str) -> Vec<String> {
        match self {
            RowsSink::Sqlite => {
                let c = rusqlite::Connection::open(d.path().join(path)).unwrap();
                let mut stmt = c.prepare(sql).unwrap();
                stmt.query_map([], |r| r.get(0))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect()
            }
            RowsSink::Postgres { db } => {
                let mut c = shared().connect(db).unwrap();
                (c.query(sql, &[]).unwrap().iter())
                    .map(|r| r.get(0))
                    .collect()
            }
        }
    }

    /// `count(*)` of `table`'s rows.
    pub fn count(&self, d: &Deployment, path: &str, table: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM {table}");
        match self {
            RowsSink::Sqlite => rusqlite::Connection::open(d.path().join(path))
                .unwrap()
                .query_row(&sql, [], |r| r.get(0))
                .unwrap(),
            RowsSink::Postgres { db } => {
                let mut c = shared().connect(db).unwrap();
                c.query_one(&sql, &[]).unwrap().get(0)
            }
        }
    }

    /// `(input, key)` of every row of `table` (none before it is made).
    fn rows(&self, d: &Deployment, path: &str, table: &str) -> Vec<(String, String)> {
        let sql = format!("SELECT input, key FROM {table}");
        match self {
            RowsSink::Sqlite => {
                let Ok(c) = rusqlite::Connection::open(d.path().join(path)) else {
                    return Vec::new();
                };
                let Ok(mut stmt) = c.prepare(&sql) else {
                    return Vec::new();
                };
                stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect()
            }
            RowsSink::Postgres { db } => {
                let mut c = shared().connect(db).unwrap();
                match c.query(&sql, &[]) {
                    Ok(rows) => rows.iter().map(|r| (r.get(0), r.get(1))).collect(),
                    Err(_) => Vec::new(),
                }
            }
        }
    }

    /// The inputs with rows in `table`, and how many each.
    pub fn inputs_with_rows(
        &self,
        d: &Deployment,
        path: &str,
        table: &str,
    ) -> BTreeMap<String, usize> {
        let mut by_input = BTreeMap::new();
        for (input, _) in self.rows(d, path, table) {
            *by_input.entry(input).or_default() += 1;
        }
        by_input
    }

    /// The keys of `table`'s rows.
    pub fn keys(&self, d: &Deployment, path: &str, table: &str) -> BTreeSet<String> {
        (self.rows(d, path, table).into_iter())
            .map(|(_, k)| k)
            .collect()
    }
}
