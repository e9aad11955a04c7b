//! Rows in SQLite (`output.sqlite`): each page's items upserted into the
//! job's table (`key` primary key, `job`, `input`, `fetched_at`, `item`),
//! a page's rows in one transaction, committed before the run moves its
//! cursor, so a redone page writes the same rows again and nothing twice.
//!
//! The full-text index `TABLE_search` (FTS5) is maintained in the same
//! transaction: its rowid is the xxh3 of the row's key, not the table's
//! rowid, which `VACUUM` may renumber (the table's primary key is text);
//! replacing a row replaces its entry. WAL mode, so readers read while a
//! run writes; a busy timeout, so runs of several jobs sharing one database
//! take turns rather than fail.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};
use serde_json::Value;

use crate::config::{SqliteOutput, pointer_parts};

pub mod group;

/// How long a write waits for another writer (a run of another job on the
/// same database, a reader checkpointing) before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(60);

/// The table's columns, in order; `key` its primary key.
const COLUMNS: [&str; 5] = ["key", "job", "input", "fetched_at", "item"];

/// Why the database cannot take the job's rows.
#[derive(Debug)]
pub enum SinkError {
    /// An existing table (or index) of another shape: what differs.
    Shape(String),
    Db(rusqlite::Error),
    Io(std::io::Error),
}

impl std::fmt::Display for SinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Shape(s) => f.write_str(s),
            Self::Db(e) => write!(f, "{e}"),
            Self::Io(e) => write!(f, "{e}"),
        }
    }
}

impl From<rusqlite::Error> for SinkError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Db(e)
    }
}

/// What a page gave its table.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PageRows {
    /// Rows upserted.
    pub rows: u64,
    /// Items without a key at `key`: skipped.
    pub without_key: u64,
    /// The page is not JSON: no rows.
    pub not_json: bool,
    /// Nothing in the page at `items` (not even an empty array): no rows.
    pub no_items: bool,
}

/// A page's rows made ready to write: parsed, keyed and serialized on the
/// page's own thread, so that the writer that commits (for several pages
/// at once, see [`group`]) only runs the statements.
pub struct Prepared {
    input: String,
    fetched_at: String,
    run: u64,
    /// Each row's key and item (JSON text), in the page's order.
    rows: Vec<(String, String)>,
    entries: Vec<Entry>,
    found: PageRows,
}

impl Prepared {
    /// What the page gives the table (its rows, once written).
    pub fn found(&self) -> PageRows {
        self.found
    }
}

/// `page`'s rows for `input` (the key of the input or region it was
/// fetched for), fetched at `fetched_at` by run `run`.
pub fn prepare(
    spec: &SqliteOutput,
    input: &str,
    page: &[u8],
    fetched_at: String,
    run: u64,
) -> Prepared {
    let mut p = Prepared {
        input: input.to_string(),
        fetched_at,
        run,
        rows: Vec::new(),
        entries: Vec::new(),
        found: PageRows::default(),
    };
    let Ok(page) = serde_json::from_slice::<Value>(page) else {
        p.found.not_json = true;
        return p;
    };
    let (items, missed) = items_found(&page, &spec.items);
    // (a page with nothing at all at `items`: another shape than the file
    // expects, said and counted, never silently no rows)
    p.found.no_items = missed && items.is_empty();
    for item in items {
        let Some(key) = row_key(item, &spec.key, input) else {
            p.found.without_key += 1;
            continue;
        };
        if !spec.search.is_empty() {
            p.entries.push(Entry::of(spec, key.clone(), item));
        }
        p.rows.push((key, item.to_string()));
        p.found.rows += 1;
    }
    p
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
    runs: String,
    /// The index: an entry's key and fields, its removal, its insertion.
    entry: String,
    remove: String,
    insert: String,
}

impl Sql {
    fn of(spec: &SqliteOutput) -> Self {
        let (t, s) = (&spec.table, spec.search_table());
        let cols: Vec<&str> = spec.search.iter().map(|(c, _)| c.as_str()).collect();
        let marks: Vec<String> = (0..cols.len()).map(|i| format!("?{}", i + 3)).collect();
        Self {
            upsert: format!(
                "INSERT INTO \"{t}\" (key, job, input, fetched_at, item) VALUES (?1, ?2, ?3, ?4, ?5) \
                 ON CONFLICT(key) DO UPDATE SET job = excluded.job, input = excluded.input, \
                 fetched_at = excluded.fetched_at, item = excluded.item"
            ),
            runs: format!(
                "INSERT INTO \"{t}_runs\" (job, input, run) VALUES (?1, ?2, ?3) \
                 ON CONFLICT(job, input) DO UPDATE SET run = excluded.run"
            ),
            entry: format!(
                "SELECT key, {} FROM \"{s}\" WHERE rowid = ?1",
                if cols.is_empty() {
                    "NULL".to_string()
                } else {
                    cols.join(", ")
                }
            ),
            remove: format!("DELETE FROM \"{s}\" WHERE rowid = ?1"),
            insert: format!(
                "INSERT INTO \"{s}\" (rowid, key, {}) VALUES (?1, ?2, {})",
                cols.join(", "),
                marks.join(", ")
            ),
        }
    }
}

/// A row's entry in the full-text index: its rowid (the key's hash), key
/// and the text of each field.
#[derive(PartialEq, Eq)]
struct Entry {
    id: i64,
    key: String,
    texts: Vec<Option<String>>,
}

impl Entry {
    fn of(spec: &SqliteOutput, key: String, item: &Value) -> Self {
        Self {
            id: index_id(&key),
            texts: spec
                .search
                .iter()
                .map(|(_, p)| item.pointer(p).and_then(text_of))
                .collect(),
            key,
        }
    }
}

impl Sink {
    /// Open (or create) the database, its table and index (and, `runs`,
    /// the table of the run that wrote each input's rows), refusing a
    /// table of another shape.
    pub fn open(spec: &SqliteOutput, job: &str, runs: bool) -> Result<Self, SinkError> {
        if let Some(dir) = spec.path.parent() {
            std::fs::create_dir_all(dir).map_err(SinkError::Io)?;
        }
        regular_or_absent(&spec.path)?;
        let mut conn = connect(&spec.path, OpenFlags::default())?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        shape(&tx, spec, true)?;
        if runs {
            runs_shape(&tx, spec)?;
        }
        tx.commit()?;
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
        let t = format!("{}_runs", self.spec.table);
        self.conn.query_row(
            &format!("SELECT coalesce(max(run), 0) FROM \"{t}\" WHERE job = ?1"),
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
        let t = format!("{}_runs", self.spec.table);
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT run FROM \"{t}\" WHERE job = ?1 AND input = ?2"
        ))?;
        let run: Option<i64> = stmt
            .query_row(params![self.job, input], |r| r.get(0))
            .optional()?;
        Ok(run.is_some_and(|r| r >= 0 && runs.contains(&(r as u64))))
    }

    /// Upsert one page's rows, made ready by [`prepare`], in one
    /// transaction, committed when this returns.
    pub fn write_one(&mut self, page: &Prepared) -> rusqlite::Result<PageRows> {
        self.write_group(std::slice::from_ref(page))
            .map(|()| page.found)
    }

    /// Upsert several pages' rows in one transaction (one commit, one WAL
    /// fsync for all), committed when this returns; the first error
    /// fails them all, nothing of any written.
    pub(crate) fn write_group(&mut self, pages: &[Prepared]) -> rusqlite::Result<()> {
        // (a page that is not JSON has no rows, and marks no input done)
        let pages: Vec<&Prepared> = pages.iter().filter(|p| !p.found.not_json).collect();
        if pages.is_empty() {
            return Ok(());
        }
        let (job, sql, runs) = (&self.job, &self.sql, self.runs);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut upsert = tx.prepare_cached(&sql.upsert)?;
            for p in &pages {
                for (key, item) in &p.rows {
                    upsert.execute(params![key, job, p.input, p.fetched_at, item])?;
                }
                if runs {
                    tx.prepare_cached(&sql.runs)?
                        .execute(params![job, p.input, p.run as i64])?;
                }
            }
        }
        index(&tx, sql, pages.iter().flat_map(|p| &p.entries).collect())?;
        tx.commit()
    }

    /// Whether the rows say which run wrote each input's (`TABLE_runs`):
    /// then an input with rows is done, whatever its page file.
    pub fn marks_inputs(&self) -> bool {
        self.runs
    }

    /// The table's specification.
    pub fn spec(&self) -> &SqliteOutput {
        &self.spec
    }

    /// The inputs with rows of this job in the table: a once-job whose
    /// store lost its place takes them as done.
    pub fn inputs_with_rows(&self) -> rusqlite::Result<HashSet<String>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT DISTINCT input FROM \"{}\" WHERE job = ?1",
            self.spec.table
        ))?;
        stmt.query_map([&self.job], |r| r.get::<_, String>(0))?
            .collect()
    }
}

/// `check`: whether the database can take the job's rows, creating
/// nothing. An existing file is opened read-write and its table's shape
/// read (a write transaction begun and rolled back, to know it takes
/// writes); else its folder must take a new file.
pub fn check(spec: &SqliteOutput) -> Result<(), SinkError> {
    if !spec.path.exists() {
        let dir = spec
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        return crate::config::folder_writable(dir).map_err(|(at, e)| {
            SinkError::Io(std::io::Error::new(
                e.kind(),
                format!("cannot create a file in {}: {e}", at.display()),
            ))
        });
    }
    regular_or_absent(&spec.path)?;
    let mut conn = connect(&spec.path, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    shape(&tx, spec, false)?;
    tx.rollback()?;
    Ok(())
}

/// A database is a regular file, or none yet: SQLite would take a device
/// such as /dev/full (and make `/dev/full-journal` beside it).
fn regular_or_absent(path: &Path) -> Result<(), SinkError> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Err(SinkError::Io(std::io::Error::other(if m.is_dir() {
            "a directory, not a database file"
        } else {
            "not a regular file (a device, FIFO or socket): not a database file"
        }))),
        _ => Ok(()),
    }
}

fn connect(path: &Path, flags: OpenFlags) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // (FULL: a committed page survives a power loss too, since the
    // cursor that moves after it lives elsewhere)
    conn.pragma_update(None, "synchronous", "FULL")?;
    Ok(conn)
}

/// The table and its index as `spec` wants them: made if missing (when
/// `create`), refused if of another shape.
fn shape(tx: &Transaction, spec: &SqliteOutput, create: bool) -> Result<(), SinkError> {
    let t = &spec.table;
    let have = columns(tx, t)?;
    if have.is_empty() {
        if create {
            tx.execute_batch(&format!(
                "CREATE TABLE \"{t}\" (key TEXT PRIMARY KEY NOT NULL, job TEXT NOT NULL, \
                 input TEXT NOT NULL, fetched_at TEXT NOT NULL, item TEXT NOT NULL);"
            ))?;
        }
    } else {
        let want: Vec<(String, bool)> = COLUMNS
            .iter()
            .map(|c| (c.to_string(), *c == "key"))
            .collect();
        if have != want {
            let names: Vec<&str> = have.iter().map(|(n, _)| n.as_str()).collect();
            return Err(SinkError::Shape(format!(
                "table '{t}' exists with columns ({}), not the rows' ({}, key the primary key): name another table",
                names.join(", "),
                COLUMNS.join(", ")
            )));
        }
    }
    if create {
        tx.execute_batch(&format!(
            "CREATE INDEX IF NOT EXISTS \"{t}_job_input\" ON \"{t}\" (job, input);"
        ))?;
    }
    search_shape(tx, spec, create)
}

/// `TABLE_runs`, made if missing: the run that last wrote each input's
/// rows, refused if of another shape.
fn runs_shape(tx: &Transaction, spec: &SqliteOutput) -> Result<(), SinkError> {
    let t = format!("{}_runs", spec.table);
    let have: Vec<String> = columns(tx, &t)?.into_iter().map(|(n, _)| n).collect();
    if have.is_empty() {
        tx.execute_batch(&format!(
            "CREATE TABLE \"{t}\" (job TEXT NOT NULL, input TEXT NOT NULL, run INTEGER NOT NULL, \
             PRIMARY KEY (job, input)) WITHOUT ROWID;"
        ))?;
    } else if have != ["job", "input", "run"] {
        return Err(SinkError::Shape(format!(
            "table '{t}' exists with columns ({}), not (job, input, run), which keeps the run that wrote each input's rows: name another table",
            have.join(", ")
        )));
    }
    Ok(())
}

/// The full-text index: made (and filled from the rows there) if missing,
/// refused if its columns are not the fields `search` names, or if it
/// exists while `search` names none (it would fall out of step).
fn search_shape(tx: &Transaction, spec: &SqliteOutput, create: bool) -> Result<(), SinkError> {
    let s = spec.search_table();
    let have: Vec<String> = columns(tx, &s)?.into_iter().map(|(n, _)| n).collect();
    let want: Vec<String> = std::iter::once("key".to_string())
        .chain(spec.search.iter().map(|(c, _)| c.clone()))
        .collect();
    if spec.search.is_empty() {
        if have.is_empty() {
            return Ok(());
        }
        return Err(SinkError::Shape(format!(
            "the full-text index '{s}' exists but `search` names no field: rows written now would be missing from it; name its fields ({}) or drop it (DROP TABLE {s})",
            have[1..].join(", ")
        )));
    }
    if have.is_empty() {
        if create {
            let cols: Vec<&str> = spec.search.iter().map(|(c, _)| c.as_str()).collect();
            tx.execute_batch(&format!(
                "CREATE VIRTUAL TABLE \"{s}\" USING fts5(key UNINDEXED, {});",
                cols.join(", ")
            ))?;
            fill_index(tx, spec)?;
        }
        return Ok(());
    }
    if have != want {
        return Err(SinkError::Shape(format!(
            "the full-text index '{s}' has columns ({}), `search` names ({}): drop it (DROP TABLE {s}) and the next run builds it again from the rows",
            have.join(", "),
            want.join(", ")
        )));
    }
    Ok(())
}

/// Index every row already in the table (an index added to a table that
/// has rows).
fn fill_index(tx: &Transaction, spec: &SqliteOutput) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare(&format!("SELECT key, item FROM \"{}\"", spec.table))?;
    let rows: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let entries: Vec<Entry> = rows
        .into_iter()
        .map(|(key, item)| {
            let item: Value = serde_json::from_str(&item).unwrap_or(Value::Null);
            Entry::of(spec, key, &item)
        })
        .collect();
    index(tx, &Sql::of(spec), entries.iter().collect())
}

/// Put the rows' entries in the full-text index, each replacing the one
/// its key had, in the order of their rowids: FTS5 writes out the terms
/// it holds whenever a rowid comes lower than the last one, so in that
/// order a page's entries are written out once, at the commit, not one
/// by one (a hash's rowids come in no order). An entry whose key and
/// fields are the index's already is left as it is (a row fetched again
/// unchanged): FTS5's delete reads the old entry's text to take out its
/// terms, and the insert adds them back.
fn index(tx: &Transaction, sql: &Sql, mut entries: Vec<&Entry>) -> rusqlite::Result<()> {
    if entries.is_empty() {
        return Ok(());
    }
    // (stable: a key twice in a page, or in pages written together,
    // keeps its last entry, as the table keeps its last row)
    entries.sort_by_key(|e| e.id);
    let mut kept = tx.prepare_cached(&sql.entry)?;
    let mut remove = tx.prepare_cached(&sql.remove)?;
    let mut insert = tx.prepare_cached(&sql.insert)?;
    let n = entries[0].texts.len();
    for e in entries {
        let old = kept
            .query_row([e.id], |r| {
                Ok(Entry {
                    id: e.id,
                    key: r.get(0)?,
                    texts: (1..=n).map(|i| r.get(i)).collect::<rusqlite::Result<_>>()?,
                })
            })
            .optional()?;
        match old {
            Some(old) if &old == e => continue,
            Some(_) => {
                remove.execute([e.id])?;
            }
            None => {}
        }
        let mut values: Vec<&dyn rusqlite::ToSql> = vec![&e.id, &e.key];
        for t in &e.texts {
            values.push(t);
        }
        insert.execute(values.as_slice())?;
    }
    Ok(())
}

/// The index's rowid for a row: the xxh3 of its key, the same on every
/// host and build.
fn index_id(key: &str) -> i64 {
    xxhash_rust::xxh3::xxh3_64(key.as_bytes()) as i64
}

/// The text a field gives the index: a string as it is, an array's
/// strings one after the other, anything else as JSON.
fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Array(a) if a.iter().all(Value::is_string) => Some(
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        other => Some(other.to_string()),
    }
}

/// The names and primary-key flags of a table's columns (none: no table).
fn columns(tx: &Transaction, table: &str) -> rusqlite::Result<Vec<(String, bool)>> {
    let mut stmt = tx.prepare("SELECT name, pk FROM pragma_table_info(?1) ORDER BY cid")?;
    stmt.query_map([table], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? > 0)))?
        .collect()
}

/// The items of a page at `pointer`, each `*` part every element of the
/// array there (none where there is no array), and whether the pointer led
/// nowhere somewhere (a name not there, a `*` at something not an array),
/// as opposed to an empty array.
fn items_found<'v>(page: &'v Value, pointer: &str) -> (Vec<&'v Value>, bool) {
    let mut at = vec![page];
    let mut missed = false;
    for part in pointer_parts(pointer).unwrap_or_default() {
        let mut next = Vec::new();
        for v in at {
            if part == "*" {
                match v.as_array() {
                    Some(a) => next.extend(a.iter()),
                    None => missed = true,
                }
                continue;
            }
            let found = match v {
                Value::Object(m) => m.get(&part),
                Value::Array(a) => part.parse::<usize>().ok().and_then(|i| a.get(i)),
                _ => None,
            };
            match found {
                Some(x) => next.push(x),
                None => missed = true,
            }
        }
        at = next;
    }
    (at, missed)
}

/// A row's key: the input's (`""`), else the string or number at the
/// pointer; none when it holds neither.
fn row_key(item: &Value, pointer: &str, input: &str) -> Option<String> {
    if pointer.is_empty() {
        return Some(input.to_string());
    }
    match item.pointer(pointer)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_take_every_element_at_a_star() {
        let page: Value =
            serde_json::from_str(r#"{"items":[{"id":"a"},{"id":"b"}],"x":[[1,2],[3]]}"#).unwrap();
        assert_eq!(items_found(&page, "/items/*").0.len(), 2);
        assert_eq!(items_found(&page, "/x/*/*").0.len(), 3);
        assert_eq!(items_found(&page, "").0.len(), 1);
        assert_eq!(items_found(&page, "/nothing/*").0.len(), 0);
        assert!(items_found(&page, "/nothing/*").1);
        assert!(items_found(&page, "/items/0/id/*").1);
        let empty: Value = serde_json::from_str(r#"{"items":[]}"#).unwrap();
        assert_eq!(items_found(&empty, "/items/*"), (vec![], false));
        assert_eq!(items_found(&page, "/items/1/id").0, [&Value::from("b")]);
        assert_eq!(
            row_key(&page["items"][0], "/id", "US").as_deref(),
            Some("a")
        );
        assert_eq!(row_key(&page, "", "US").as_deref(), Some("US"));
        assert_eq!(row_key(&page, "/items", "US"), None);
    }

    #[test]
    fn the_bundled_sqlite_has_fts5() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE VIRTUAL TABLE t USING fts5(a); INSERT INTO t VALUES ('rust lang');",
        )
        .unwrap();
        let n: i64 = conn
            .query_row("SELECT count(*) FROM t WHERE t MATCH 'rust'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(n, 1);
    }
}
