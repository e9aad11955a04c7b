//! The full-text index `TABLE_search` (FTS5), kept in step with the rows
//! in their transaction: each row's entry (its key and the text of each
//! field `search` names) replaces the one its key had. Apart from the rows
//! because the index has its own rowids and its own order of writing.

use rusqlite::{OptionalExtension, Transaction};
use serde_json::Value;

use super::Sql;
use crate::config::SqliteOutput;

/// A row's entry in the full-text index: its rowid (the key's hash), key
/// and the text of each field.
#[derive(PartialEq, Eq)]
pub(super) struct Entry {
    id: i64,
    key: String,
    texts: Vec<Option<String>>,
}

impl Entry {
    pub(super) fn of(spec: &SqliteOutput, key: String, item: &Value) -> Self {
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

/// Index every row already in the table (an index added to a table that
/// has rows).
pub(super) fn fill_index(tx: &Transaction, spec: &SqliteOutput) -> rusqlite::Result<()> {
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
pub(super) fn index(tx: &Transaction, sql: &Sql, mut entries: Vec<&Entry>) -> rusqlite::Result<()> {
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

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

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
