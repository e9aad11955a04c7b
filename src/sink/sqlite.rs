//! Rows in SQLite (`output.sqlite`): each page's items upserted into the
//! job's table (`key` primary key, `job`, `input`, `fetched_at`, `item`,
//! then the typed columns `columns` names, set by the same upsert), a
//! page's rows in one transaction, committed before the run moves its
//! cursor, so a redone page writes the same rows again and nothing twice.
//!
//! The full-text index `TABLE_search` (FTS5) is maintained in the same
//! transaction: its rowid is the xxh3 of the row's key (the next free one
//! after it when two keys share a hash, the key in each entry telling them
//! apart), not the table's rowid, which `VACUUM` may renumber (the table's
//! primary key is text); replacing a row replaces its entry. WAL mode, so readers read while a
//! run writes; a busy timeout, so runs of several jobs sharing one database
//! take turns rather than fail.
//!
//! Here the open table and a transaction of pages' rows; a page's rows are
//! made ready in [`prepare`], the tables' shapes and `check` are in
//! `shape`, the index's entries in `index`, pages committed together in
//! [`group`].

use std::collections::HashSet;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::config::SqliteOutput;
use crate::sink::columns::Typed;

pub mod apart;
mod busy;
pub mod group;
mod id;
mod index;
mod prepare;
mod shape;
mod table;

pub(crate) use self::shape::BUSY_TIMEOUT;

pub use super::output::PageRows;
pub use prepare::{PreparedRows, prepare};
pub use shape::check;
use shape::{connect, fit, regular_or_absent};
pub use table::Sqlite;

/// Why the database cannot take the job's rows.
#[derive(Debug)]
pub enum SinkError {
    /// An existing table (or index) of another shape: what differs.
    Shape(String),
    Db(rusqlite::Error),
    Io(std::io::Error),
    /// Another writer held the database past the open's short wait: who
    /// (`process PID (NAME)`, or `another process`).
    Busy(String),
}

impl std::fmt::Display for SinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Shape(s) => f.write_str(s),
            Self::Db(e) => write!(f, "{e}"),
            Self::Io(e) => write!(f, "{e}"),
            Self::Busy(holder) => write!(
                f,
                "busy: {holder} holds its write lock (waited {}s)",
                busy::OPEN_BUSY_TIMEOUT.as_secs()
            ),
        }
    }
}

impl From<rusqlite::Error> for SinkError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Db(e)
    }
}

/// A job's table, open for its run.
pub struct Sink {
    conn: Connection,
    spec: SqliteOutput,
    job: String,
    /// A once-job of inputs: `TABLE_runs` says which run wrote each
    /// input's rows, as a page file's name does.
    runs: bool,
    sql: Sql,
}

/// The statements a page's rows take, made once (each is prepared once
/// too, cached by the connection).
struct Sql {
    upsert: String,
    /// Whether the table has a row of a key (before its upsert).
    exists: String,
    runs: String,
    /// The index: an entry's key and fields, its removal, its insertion.
    entry: String,
    remove: String,
    insert: String,
}

/// A typed column's value as SQLite keeps it: a boolean 0 or 1, a
/// timestamp its ISO 8601 UTC text (which the date functions read).
struct SqlTyped<'a>(&'a Typed);

impl rusqlite::ToSql for SqlTyped<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value as Sql, ValueRef};
        Ok(ToSqlOutput::Owned(match self.0 {
            Typed::Text(t) => return Ok(ToSqlOutput::Borrowed(ValueRef::Text(t.as_bytes()))),
            Typed::Integer(n) => Sql::Integer(*n),
            Typed::Real(r) => Sql::Real(*r),
            Typed::Boolean(b) => Sql::Integer(i64::from(*b)),
            Typed::Timestamp(t) => Sql::Text(Typed::timestamp_text(t)),
        }))
    }
}

/// `name` as an SQL identifier, quoted: a field named like a keyword
/// (`/from`, `/order`) is a column like any other. Names are letters,
/// digits and `_` (the configuration's check), the doubling of `"` is
/// for whatever else reaches here.
pub(crate) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl Sql {
    fn of(spec: &SqliteOutput) -> Self {
        let (t, s) = (ident(&spec.table), ident(&spec.search_table()));
        let runs = ident(&format!("{}_runs", spec.table));
        let cols: Vec<String> = spec.search.iter().map(|(c, _)| ident(c)).collect();
        let marks: Vec<String> = (0..cols.len()).map(|i| format!("?{}", i + 3)).collect();
        // (typed columns after the row model's, set again by the upsert:
        // a replaced row replaces its columns too)
        let typed: Vec<String> = spec.columns.iter().map(|c| ident(&c.name)).collect();
        let typed_marks: String = (0..typed.len()).map(|i| format!(", ?{}", i + 6)).collect();
        let typed_cols: String = typed.iter().map(|c| format!(", {c}")).collect();
        let typed_set: String = typed
            .iter()
            .map(|c| format!(", {c} = excluded.{c}"))
            .collect();
        Self {
            upsert: format!(
                "INSERT INTO {t} (\"key\", \"job\", \"input\", \"fetched_at\", \"item\"{typed_cols}) \
                 VALUES (?1, ?2, ?3, ?4, ?5{typed_marks}) \
                 ON CONFLICT(\"key\") DO UPDATE SET \"job\" = excluded.\"job\", \"input\" = excluded.\"input\", \
                 \"fetched_at\" = excluded.\"fetched_at\", \"item\" = excluded.\"item\"{typed_set}"
            ),
            exists: format!("SELECT 1 FROM {t} WHERE \"key\" = ?1"),
            runs: format!(
                "INSERT INTO {runs} (\"job\", \"input\", \"run\") VALUES (?1, ?2, ?3) \
                 ON CONFLICT(\"job\", \"input\") DO UPDATE SET \"run\" = excluded.\"run\""
            ),
            entry: format!(
                "SELECT \"key\", {} FROM {s} WHERE rowid = ?1",
                if cols.is_empty() {
                    "NULL".to_string()
                } else {
                    cols.join(", ")
                }
            ),
            remove: format!("DELETE FROM {s} WHERE rowid = ?1"),
            insert: format!(
                "INSERT INTO {s} (rowid, \"key\", {}) VALUES (?1, ?2, {})",
                cols.join(", "),
                marks.join(", ")
            ),
        }
    }
}

impl Sink {
    /// Open (or create) the database, its table and index (and, `runs`,
    /// the table of the run that wrote each input's rows), refusing a
    /// table of another shape.
    pub fn open(spec: &SqliteOutput, job: &str, runs: bool) -> Result<Self, SinkError> {
        regular_or_absent(&spec.path)?;
        // (the file and its folders made with portion's modes, never
        // SQLite's 0644 or the umask's 0777)
        crate::atomic_file::create_database(&spec.path).map_err(SinkError::Io)?;
        let conn = busy::or_holder(&spec.path, || {
            let mut conn = connect(&spec.path, crate::atomic_file::open_existing())?;
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            fit(&tx, spec, runs, true)?;
            tx.commit()?;
            // (the rows wait for other writers longer than the open did)
            conn.busy_timeout(BUSY_TIMEOUT)?;
            Ok(conn)
        })?;
        Ok(Self {
            conn,
            spec: spec.clone(),
            job: job.to_string(),
            runs,
            sql: Sql::of(spec),
        })
    }

    /// The highest run that wrote rows of this job's inputs (0: none): a
    /// run is numbered after it, as after the pages in a folder.
    pub fn highest_run(&self) -> rusqlite::Result<u64> {
        if !self.runs {
            return Ok(0);
        }
        let t = ident(&format!("{}_runs", self.spec.table));
        self.conn.query_row(
            &format!("SELECT coalesce(max(\"run\"), 0) FROM {t} WHERE \"job\" = ?1"),
            [&self.job],
            |r| r.get::<_, i64>(0).map(|n| n.max(0) as u64),
        )
    }

    /// Whether one of `runs` wrote `input`'s rows: an input a run killed
    /// before its cursor's save had done.
    pub fn rows_of_runs(
        &self,
        input: &str,
        runs: &std::ops::RangeInclusive<u64>,
    ) -> rusqlite::Result<bool> {
        if !self.runs {
            return Ok(false);
        }
        let t = ident(&format!("{}_runs", self.spec.table));
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT \"run\" FROM {t} WHERE \"job\" = ?1 AND \"input\" = ?2"
        ))?;
        let run: Option<i64> = stmt
            .query_row(params![self.job, input], |r| r.get(0))
            .optional()?;
        Ok(run.is_some_and(|r| r >= 0 && runs.contains(&(r as u64))))
    }

    /// Upsert one page's rows, made ready by [`prepare`], in one
    /// transaction, committed when this returns.
    pub fn write_one(&mut self, page: &PreparedRows) -> rusqlite::Result<PageRows> {
        let mut found = self.write_group(std::slice::from_ref(page))?;
        Ok(found.pop().unwrap_or_else(|| page.found()))
    }

    /// Upsert several pages' rows in one transaction (one commit, one WAL
    /// fsync for all), committed when this returns; the first error
    /// fails them all, nothing of any written. What each page gave, its
    /// new rows counted.
    pub(crate) fn write_group(&mut self, all: &[PreparedRows]) -> rusqlite::Result<Vec<PageRows>> {
        let mut found: Vec<PageRows> = all.iter().map(PreparedRows::found).collect();
        // (a page that is not JSON has no rows, and marks no input done)
        let pages: Vec<(usize, &PreparedRows)> = (all.iter().enumerate())
            .filter(|(_, p)| !p.found.not_json)
            .collect();
        if pages.is_empty() {
            return Ok(found);
        }
        let (job, sql, runs) = (&self.job, &self.sql, self.runs);
        let width = self.spec.columns.len();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut upsert = tx.prepare_cached(&sql.upsert)?;
            // (one lookup of the key a row, in the pages the upsert reads
            // next: the summary's new and replaced rows, exact)
            let mut exists = tx.prepare_cached(&sql.exists)?;
            for (i, p) in &pages {
                for (r, (key, item)) in p.rows.iter().enumerate() {
                    found[*i].new += u64::from(!exists.exists([key])?);
                    let cells: Vec<Option<SqlTyped>> = (p.cells(r, width).iter())
                        .map(|c| c.as_ref().map(SqlTyped))
                        .collect();
                    let mut values: Vec<&dyn rusqlite::ToSql> =
                        vec![key, job, &p.input, &p.fetched_at, item];
                    values.extend(cells.iter().map(|c| c as &dyn rusqlite::ToSql));
                    upsert.execute(values.as_slice())?;
                }
                if runs {
                    tx.prepare_cached(&sql.runs)?
                        .execute(params![job, p.input, p.run as i64])?;
                }
            }
        }
        index::index(
            &tx,
            sql,
            pages.iter().flat_map(|(_, p)| &p.entries).collect(),
        )?;
        tx.commit()?;
        Ok(found)
    }

    /// Whether the rows say which run wrote each input's (`TABLE_runs`):
    /// then an input with rows is done, whatever its page file.
    pub fn marks_inputs(&self) -> bool {
        self.runs
    }

    /// The job whose rows it writes.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The table's specification.
    pub fn spec(&self) -> &SqliteOutput {
        &self.spec
    }

    /// Whether the table holds the row of `key` (its primary key): a
    /// page's validators stand for its rows.
    pub fn has_row(&self, key: &str) -> rusqlite::Result<bool> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT EXISTS (SELECT 1 FROM {} WHERE \"key\" = ?1)",
            ident(&self.spec.table)
        ))?;
        stmt.query_row([key], |r| r.get(0))
    }

    /// The inputs with rows of this job in the table: a once-job whose
    /// store lost its place takes them as done.
    pub fn inputs_with_rows(&self) -> rusqlite::Result<HashSet<String>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT DISTINCT \"input\" FROM {} WHERE \"job\" = ?1",
            ident(&self.spec.table)
        ))?;
        stmt.query_map([&self.job], |r| r.get::<_, String>(0))?
            .collect()
    }
}
