//! The database and its tables as a job wants them: opened (WAL, a busy
//! timeout, full syncs), the table, `TABLE_runs` and the full-text index
//! made if missing and refused if of another shape, and `check`'s look at
//! all of it without creating anything. Apart from the rows because it
//! runs once a run (or a `check`), not once a page.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior};

use super::index::fill_index;
use super::{SinkError, ident};
use crate::config::{ColumnKind, SqliteOutput};

/// How long a write waits for another writer (a run of another job on the
/// same database, a reader checkpointing) before it fails.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(60);

/// The table's columns, in order; `key` its primary key.
const COLUMNS: [&str; 5] = ["key", "job", "input", "fetched_at", "item"];

/// `check`: whether the database can take the job's rows, creating
/// nothing. An existing file is opened read-write and its tables' shapes
/// read by [`fit`], as a run's open does (a write transaction begun and
/// rolled back, to know it takes writes); else its folder must take a new
/// file. `runs`: the job keeps `TABLE_runs` (a once-job of inputs).
pub fn check(spec: &SqliteOutput, runs: bool) -> Result<(), SinkError> {
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
    super::busy::or_holder(&spec.path, || {
        let mut conn = connect(&spec.path, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        fit(&tx, spec, runs, false)?;
        tx.rollback()?;
        Ok(())
    })
}

/// A database is a regular file, or none yet: SQLite would take a device
/// such as /dev/full (and make `/dev/full-journal` beside it).
pub(super) fn regular_or_absent(path: &Path) -> Result<(), SinkError> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Err(SinkError::Io(std::io::Error::other(if m.is_dir() {
            "a directory, not a database file"
        } else {
            "not a regular file (a device, FIFO or socket): not a database file"
        }))),
        _ => Ok(()),
    }
}

/// A connection to the database, WAL and full syncs, waiting for another
/// writer as an open does ([`super::busy::OPEN_BUSY_TIMEOUT`]).
pub(super) fn connect(path: &Path, flags: OpenFlags) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(super::busy::OPEN_BUSY_TIMEOUT)?;
    crate::atomic_file::wal_mode(&conn, super::busy::OPEN_BUSY_TIMEOUT)?;
    // (FULL: a committed page survives a power loss too, since the
    // cursor that moves after it lives elsewhere)
    conn.pragma_update(None, "synchronous", "FULL")?;
    Ok(conn)
}

/// The tables a job's rows take, as `spec` wants them: the rows' table,
/// its full-text index and (`runs`) `TABLE_runs`, each made if missing
/// (when `create`: a run's open) and refused if of another shape. The one
/// look both `check` and a run take, so `check` refuses what a run would.
pub(super) fn fit(
    tx: &Transaction,
    spec: &SqliteOutput,
    runs: bool,
    create: bool,
) -> Result<(), SinkError> {
    shape(tx, spec, create)?;
    search_shape(tx, spec, create)?;
    if runs {
        runs_shape(tx, spec, create)?;
    }
    Ok(())
}

/// The rows' table as `spec` wants it: made if missing (when `create`),
/// refused if of another shape.
fn shape(tx: &Transaction, spec: &SqliteOutput, create: bool) -> Result<(), SinkError> {
    let t = &spec.table;
    let have = columns(tx, t)?;
    if have.is_empty() {
        if create {
            let typed: String = (spec.columns.iter())
                .map(|c| format!(", {} {}", ident(&c.name), sql_type(c.kind)))
                .collect();
            tx.execute_batch(&format!(
                "CREATE TABLE {} (\"key\" TEXT PRIMARY KEY NOT NULL, \"job\" TEXT NOT NULL, \
                 \"input\" TEXT NOT NULL, \"fetched_at\" TEXT NOT NULL, \"item\" TEXT NOT NULL{typed});",
                ident(t)
            ))?;
        }
    } else {
        let want: Vec<(String, bool)> = COLUMNS
            .iter()
            .map(|c| (c.to_string(), *c == "key"))
            .collect();
        let model: Vec<(String, bool)> = (have.iter().take(COLUMNS.len()))
            .map(|(n, pk, _)| (n.clone(), *pk))
            .collect();
        if model != want {
            let names: Vec<&str> = have.iter().map(|(n, _, _)| n.as_str()).collect();
            return Err(SinkError::Shape(format!(
                "table '{t}' exists with columns ({}), not the rows' ({}, key the primary key): name another table",
                names.join(", "),
                COLUMNS.join(", ")
            )));
        }
        typed_columns(tx, spec, &have[COLUMNS.len()..], create)?;
    }
    if create {
        tx.execute_batch(&format!(
            "CREATE INDEX IF NOT EXISTS {} ON {} (\"job\", \"input\");",
            ident(&format!("{t}_job_input")),
            ident(t)
        ))?;
    }
    Ok(())
}

/// The type a typed column is declared with: one per kind, so a table's
/// columns say which kind each holds (a declared `BOOLEAN` or `TIMESTAMP`
/// has SQLite's numeric affinity, which keeps 0/1 and ISO 8601 text as
/// they are).
fn sql_type(kind: ColumnKind) -> &'static str {
    match kind {
        ColumnKind::Text => "TEXT",
        ColumnKind::Integer => "INTEGER",
        ColumnKind::Real => "REAL",
        ColumnKind::Boolean => "BOOLEAN",
        ColumnKind::Timestamp => "TIMESTAMP",
    }
}

/// An existing table's columns past the row model's (`extra`: name, pk,
/// declared type) as `spec.columns` wants them: one of another type, or
/// one `columns` does not name (its values would go stale as rows are
/// replaced), refused; one missing added (when `create`), NULL in the
/// rows already there.
fn typed_columns(
    tx: &Transaction,
    spec: &SqliteOutput,
    extra: &[(String, bool, String)],
    create: bool,
) -> Result<(), SinkError> {
    let t = &spec.table;
    for (name, _, declared) in extra {
        let Some(c) = (spec.columns.iter()).find(|c| c.name.eq_ignore_ascii_case(name)) else {
            return Err(SinkError::Shape(format!(
                "table '{t}' has a column '{name}' that `columns` does not name: its values would \
                 stay as they are when rows are replaced; name it in `columns` or drop it \
                 (ALTER TABLE {t} DROP COLUMN {name})"
            )));
        };
        if !declared.eq_ignore_ascii_case(sql_type(c.kind)) {
            return Err(SinkError::Shape(format!(
                "table '{t}' has column '{name}' of type {}, where `columns.{}` is {} ({}): \
                 give it that type in `columns`, or another name",
                if declared.is_empty() {
                    "none"
                } else {
                    declared
                },
                c.name,
                c.kind.name(),
                sql_type(c.kind)
            )));
        }
    }
    let missing = (spec.columns.iter()).filter(|c| {
        !extra
            .iter()
            .any(|(n, _, _)| n.eq_ignore_ascii_case(&c.name))
    });
    for c in missing {
        if create {
            tx.execute_batch(&format!(
                "ALTER TABLE {} ADD COLUMN {} {};",
                ident(t),
                ident(&c.name),
                sql_type(c.kind)
            ))?;
        }
    }
    Ok(())
}

/// `TABLE_runs`, made if missing (when `create`): the run that last
/// wrote each input's rows, refused if of another shape.
fn runs_shape(tx: &Transaction, spec: &SqliteOutput, create: bool) -> Result<(), SinkError> {
    let t = format!("{}_runs", spec.table);
    let have: Vec<String> = columns(tx, &t)?.into_iter().map(|(n, _, _)| n).collect();
    if have.is_empty() {
        if create {
            tx.execute_batch(&format!(
                "CREATE TABLE {} (\"job\" TEXT NOT NULL, \"input\" TEXT NOT NULL, \"run\" INTEGER NOT NULL, \
                 PRIMARY KEY (\"job\", \"input\")) WITHOUT ROWID;",
                ident(&t)
            ))?;
        }
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
    let have: Vec<String> = columns(tx, &s)?.into_iter().map(|(n, _, _)| n).collect();
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
            let cols: Vec<String> = spec.search.iter().map(|(c, _)| ident(c)).collect();
            tx.execute_batch(&format!(
                "CREATE VIRTUAL TABLE {} USING fts5(\"key\" UNINDEXED, {});",
                ident(&s),
                cols.join(", ")
            ))?;
            fill_index(tx, spec)?;
        }
        return Ok(());
    }
    if !is_fts5(tx, &s)? {
        return Err(SinkError::Shape(format!(
            "'{s}' is there but is not a full-text (FTS5) index: the rows' index cannot be kept in it; rename or drop it (DROP TABLE {s}) and the next run builds the index from the rows"
        )));
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

/// Whether the table `name` is an FTS5 virtual table (its `CREATE` says
/// so: a plain table of the same columns would take the rows' entries
/// and answer no `MATCH`).
fn is_fts5(tx: &Transaction, name: &str) -> rusqlite::Result<bool> {
    let sql: Option<Option<String>> = tx
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1 COLLATE NOCASE",
            [name],
            |r| r.get(0),
        )
        .optional()?;
    // (a view of that name: no table at all)
    let sql = sql.flatten().unwrap_or_default().to_ascii_lowercase();
    let words: Vec<&str> = sql
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .filter(|w| !w.is_empty())
        .collect();
    Ok(words.starts_with(&["create", "virtual", "table"])
        && words.windows(2).any(|w| w == ["using", "fts5"]))
}

/// The names, primary-key flags and declared types of a table's columns
/// (none: no table).
fn columns(tx: &Transaction, table: &str) -> rusqlite::Result<Vec<(String, bool, String)>> {
    let mut stmt = tx.prepare("SELECT name, pk, type FROM pragma_table_info(?1) ORDER BY cid")?;
    stmt.query_map([table], |r| {
        Ok((r.get(0)?, r.get::<_, i64>(1)? > 0, r.get(2)?))
    })?
    .collect()
}
