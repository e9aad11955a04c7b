//! A results database's id (see [`crate::sink::output_id`]): kept in the
//! one-row table [`DB_TABLE`], made with the database's first run that
//! reaches the store.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

// (the sink's: a run of another job may be writing the database)
use super::BUSY_TIMEOUT;
use crate::sink::output_id::{DB_TABLE, new_id};

/// The id of the database at `path` (which the sink has opened, so it
/// exists), made if it has none, in one transaction.
pub fn db_id(path: &Path) -> rusqlite::Result<String> {
    let mut conn = Connection::open_with_flags(path, crate::atomic_file::open_existing())?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS \"{DB_TABLE}\" (id TEXT NOT NULL)"
    ))?;
    let had: Option<String> = tx
        .query_row(
            &format!("SELECT id FROM \"{DB_TABLE}\" WHERE id <> '' LIMIT 1"),
            [],
            |r| r.get(0),
        )
        .optional()?;
    let id = match had {
        Some(id) => id,
        None => {
            let id = new_id();
            tx.execute(&format!("DELETE FROM \"{DB_TABLE}\""), [])?;
            tx.execute(
                &format!("INSERT INTO \"{DB_TABLE}\" (id) VALUES (?1)"),
                [&id],
            )?;
            id
        }
    };
    tx.commit()?;
    Ok(id)
}

/// Whether `table` of the database at `path` holds a row of `job`.
pub fn db_has_rows(path: &Path, table: &str, job: &str) -> rusqlite::Result<bool> {
    let conn = Connection::open_with_flags(path, crate::atomic_file::open_existing())?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.query_row(
        &format!(
            "SELECT 1 FROM {} WHERE job = ?1 LIMIT 1",
            super::ident(table)
        ),
        [job],
        |_| Ok(()),
    )
    .optional()
    .map(|found| found.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_keeps_its_id_and_a_rebuilt_one_gets_another() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("o.db");
        crate::atomic_file::create_database(&path).unwrap();
        let first = db_id(&path).unwrap();
        assert_eq!(db_id(&path).unwrap(), first);
        std::fs::remove_file(&path).unwrap();
        assert!(
            db_id(&path).is_err(),
            "a database removed is not made again"
        );
        crate::atomic_file::create_database(&path).unwrap();
        assert_ne!(db_id(&path).unwrap(), first);
    }
}
