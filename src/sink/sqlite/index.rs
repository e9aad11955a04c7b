//! The full-text index `TABLE_search` (FTS5), kept in step with the rows
//! in their transaction: each row's entry (its key and the text of each
//! field `search` names) replaces the one its key had. Apart from the rows
//! because the index has its own rowids and its own order of writing.

use rusqlite::{OptionalExtension, Transaction};

use super::{Sql, ident};
use crate::config::SqliteOutput;
use crate::page_scan;

/// The width of the hash that places an entry: 64 bits, the whole xxh3
/// (a narrower one only in tests, to make two keys share a hash).
const HOME_BITS: u32 = 64;

/// A row's entry in the full-text index: where it belongs (its home: the
/// key's hash), key and the text of each field.
pub(super) struct Entry {
    home: i64,
    key: String,
    texts: Vec<Option<String>>,
}

impl Entry {
    /// `item`: the row's item, its JSON text (read at each field's
    /// pointer on its own, never as a tree).
    pub(super) fn of(spec: &SqliteOutput, key: String, item: &str) -> Self {
        Self::placed(spec, key, item, HOME_BITS)
    }

    /// The entry, its home a hash of `bits` bits.
    fn placed(spec: &SqliteOutput, key: String, item: &str, bits: u32) -> Self {
        Self {
            home: home_id(&key, bits),
            texts: spec
                .search
                .iter()
                .map(|(_, p)| page_scan::raw_at(item, p).and_then(text_of))
                .collect(),
            key,
        }
    }
}

/// Index every row already in the table (an index added to a table that
/// has rows).
pub(super) fn fill_index(tx: &Transaction, spec: &SqliteOutput) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare(&format!(
        "SELECT \"key\", \"item\" FROM {}",
        ident(&spec.table)
    ))?;
    let rows: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let entries: Vec<Entry> = rows
        .into_iter()
        .map(|(key, item)| Entry::of(spec, key, &item))
        .collect();
    index(tx, &Sql::of(spec), entries.iter().collect())
}

/// Put the rows' entries in the full-text index, each replacing the one
/// its key had, in the order of their homes: FTS5 writes out the terms
/// it holds whenever a rowid comes lower than the last one, so in that
/// order a page's entries are written out once, at the commit, not one
/// by one (a hash's rowids come in no order). An entry whose fields are
/// the index's already is left as it is (a row fetched again unchanged):
/// FTS5's delete reads the old entry's text to take out its terms, and
/// the insert adds them back.
pub(super) fn index(tx: &Transaction, sql: &Sql, mut entries: Vec<&Entry>) -> rusqlite::Result<()> {
    if entries.is_empty() {
        return Ok(());
    }
    // (stable: a key twice in a page, or in pages written together,
    // keeps its last entry, as the table keeps its last row)
    entries.sort_by_key(|e| e.home);
    let mut kept = tx.prepare_cached(&sql.entry)?;
    let mut remove = tx.prepare_cached(&sql.remove)?;
    let mut insert = tx.prepare_cached(&sql.insert)?;
    let n = entries[0].texts.len();
    for e in entries {
        let (id, old) = slot(&mut kept, e, n)?;
        match old {
            Some(old) if old == e.texts => continue,
            Some(_) => {
                remove.execute([id])?;
            }
            None => {}
        }
        let mut values: Vec<&dyn rusqlite::ToSql> = vec![&id, &e.key];
        for t in &e.texts {
            values.push(t);
        }
        insert.execute(values.as_slice())?;
    }
    Ok(())
}

/// Where `e`'s key has its entry (and that entry's texts), else the free
/// rowid it takes: from its home on, the first rowid that holds its key
/// or nothing. Two keys of one hash take its home and the rowid after
/// (the key kept in each entry tells them apart), so replacing one never
/// takes out the other's entry. An entry is only ever replaced at its
/// rowid, never removed, so no rowid between a key's home and its entry
/// is free. In a database written before keys were probed, each entry is
/// at its home, where this looks first.
fn slot(
    kept: &mut rusqlite::CachedStatement,
    e: &Entry,
    n: usize,
) -> rusqlite::Result<(i64, Option<Vec<Option<String>>>)> {
    let mut id = e.home;
    loop {
        let found = kept
            .query_row([id], |r| {
                let key: String = r.get(0)?;
                let texts = (1..=n).map(|i| r.get(i)).collect::<rusqlite::Result<_>>()?;
                Ok((key, texts))
            })
            .optional()?;
        match found {
            None => return Ok((id, None)),
            Some((key, texts)) if key == e.key => return Ok((id, Some(texts))),
            // (another key's, of the same hash)
            Some(_) => id = id.wrapping_add(1),
        }
    }
}

/// A key's home in the index: the xxh3 of the key (its low `bits` bits),
/// the same on every host and build.
fn home_id(key: &str, bits: u32) -> i64 {
    let h = xxhash_rust::xxh3::xxh3_64(key.as_bytes());
    (if bits >= 64 { h } else { h & ((1 << bits) - 1) }) as i64
}

/// The text a field gives the index (`raw`: its JSON text): a string as
/// it is, an array's strings one after the other, anything else as JSON
/// (numbers as written).
fn text_of(raw: &str) -> Option<String> {
    match raw.as_bytes().first() {
        Some(b'n') => None,
        Some(b'"') => {
            Some(serde_json::from_str::<String>(raw).unwrap_or_else(|_| page_scan::compact(raw)))
        }
        Some(b'[') => Some(
            serde_json::from_str::<Vec<String>>(raw)
                .map_or_else(|_| page_scan::compact(raw), |a| a.join(" ")),
        ),
        _ => Some(page_scan::compact(raw)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use rusqlite::Connection;

    use super::*;

    fn spec() -> SqliteOutput {
        SqliteOutput {
            path: "rows.db".into(),
            table: "t".into(),
            items: "/items/*".into(),
            key: "/id".into(),
            search: vec![("title".into(), "/title".into())],
            columns: Vec::new(),
        }
    }

    /// Two keys whose hashes share their low 12 bits.
    fn colliding() -> (String, String) {
        let mut seen = HashMap::new();
        for i in 0.. {
            let k = format!("k{i}");
            if let Some(first) = seen.insert(home_id(&k, 12), k.clone()) {
                return (first, k);
            }
        }
        unreachable!()
    }

    /// `entries` (key, title) indexed in one transaction, homes of 12 bits.
    fn write(c: &mut Connection, entries: &[(&str, &str)]) {
        let spec = spec();
        let tx = c.transaction().unwrap();
        let entries: Vec<Entry> = (entries.iter())
            .map(|(k, t)| {
                let item = serde_json::json!({ "id": k, "title": t }).to_string();
                Entry::placed(&spec, k.to_string(), &item, 12)
            })
            .collect();
        index(&tx, &Sql::of(&spec), entries.iter().collect()).unwrap();
        tx.commit().unwrap();
    }

    fn matched(c: &Connection, word: &str) -> BTreeSet<String> {
        let mut stmt = c
            .prepare("SELECT key FROM t_search WHERE t_search MATCH ?1")
            .unwrap();
        stmt.query_map([word], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// Two keys of one hash (12 bits here, 64 in a run) keep an entry
    /// each: replacing either leaves the other's, and `MATCH` finds
    /// exactly the rows whose title holds the word.
    #[test]
    fn two_keys_of_one_hash_keep_an_entry_each() {
        let (a, b) = colliding();
        assert_ne!(a, b);
        assert_eq!(home_id(&a, 12), home_id(&b, 12));
        let mut c = Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE VIRTUAL TABLE t_search USING fts5(key UNINDEXED, title);")
            .unwrap();
        let set =
            |keys: &[&String]| -> BTreeSet<String> { keys.iter().map(|k| k.to_string()).collect() };
        write(&mut c, &[(&a, "apple"), (&b, "banana")]);
        assert_eq!(matched(&c, "apple"), set(&[&a]));
        assert_eq!(matched(&c, "banana"), set(&[&b]));
        write(&mut c, &[(&a, "cherry")]);
        assert_eq!(matched(&c, "apple"), set(&[]));
        assert_eq!(matched(&c, "cherry"), set(&[&a]));
        assert_eq!(matched(&c, "banana"), set(&[&b]));
        write(&mut c, &[(&b, "cherry damson")]);
        assert_eq!(matched(&c, "banana"), set(&[]));
        assert_eq!(matched(&c, "cherry"), set(&[&a, &b]));
        assert_eq!(matched(&c, "damson"), set(&[&b]));
        let n: i64 = c
            .query_row("SELECT count(*) FROM t_search", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2, "one entry a key");
    }

    /// A key's home at 64 bits is the rowid its entry had before keys were
    /// probed: a database written then is read in place.
    #[test]
    fn a_home_is_the_rowid_of_earlier_builds() {
        let key = "US01000";
        let before = xxhash_rust::xxh3::xxh3_64(key.as_bytes()) as i64;
        assert_eq!(home_id(key, HOME_BITS), before);
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
