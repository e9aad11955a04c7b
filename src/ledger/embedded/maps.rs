//! A job's maps in the embedded store ([`crate::ledger::Ledger::map_put_new`]):
//! rows of one table, `job_map`, keyed by map and field.

use rusqlite::{OptionalExtension, Transaction, params};

use crate::ledger::StoreError;

pub(super) fn put_new(
    tx: &Transaction,
    map: &str,
    entries: &[(String, String)],
) -> Result<Vec<String>, StoreError> {
    let mut insert =
        tx.prepare_cached("INSERT OR IGNORE INTO job_map (map, field, value) VALUES (?1, ?2, ?3)")?;
    let mut get = tx.prepare_cached("SELECT value FROM job_map WHERE map = ?1 AND field = ?2")?;
    let mut held = Vec::with_capacity(entries.len());
    for (field, value) in entries {
        if insert.execute(params![map, field, value])? == 1 {
            held.push(value.clone());
        } else {
            let v: Option<String> = get
                .query_row(params![map, field], |r| r.get(0))
                .optional()?;
            held.push(v.unwrap_or_else(|| value.clone()));
        }
    }
    Ok(held)
}

pub(super) fn put(tx: &Transaction, map: &str, field: &str, value: &str) -> Result<(), StoreError> {
    tx.execute(
        "INSERT OR REPLACE INTO job_map (map, field, value) VALUES (?1, ?2, ?3)",
        params![map, field, value],
    )?;
    Ok(())
}

pub(super) fn len(tx: &Transaction, map: &str) -> Result<u64, StoreError> {
    let n: i64 = tx.query_row("SELECT COUNT(*) FROM job_map WHERE map = ?1", [map], |r| {
        r.get(0)
    })?;
    Ok(n as u64)
}

pub(super) fn read(tx: &Transaction, map: &str) -> Result<Vec<(String, String)>, StoreError> {
    let mut q = tx.prepare("SELECT field, value FROM job_map WHERE map = ?1 ORDER BY field")?;
    let rows = q.query_map([map], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn get(
    tx: &Transaction,
    map: &str,
    fields: &[String],
) -> Result<Vec<Option<String>>, StoreError> {
    let mut get = tx.prepare_cached("SELECT value FROM job_map WHERE map = ?1 AND field = ?2")?;
    let mut values = Vec::with_capacity(fields.len());
    for field in fields {
        values.push(
            get.query_row(params![map, field], |r| r.get(0))
                .optional()?,
        );
    }
    Ok(values)
}

pub(super) fn forget(tx: &Transaction, map: &str) -> Result<(), StoreError> {
    tx.execute("DELETE FROM job_map WHERE map = ?1", [map])?;
    Ok(())
}
