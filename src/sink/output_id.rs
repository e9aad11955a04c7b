//! An output's identity (probe finding F-304): a random id made with the
//! output and kept in it, so a run can tell that the folder or database
//! it writes is no longer the one its job's kept validators describe (lost,
//! moved away, rebuilt). A folder keeps it in [`FOLDER_FILE`], which no
//! page scan takes for a page (a page is `JOB.rRUN.….json`, a leftover
//! `.OWNER~NAME~RANDOM.tmp`); a database in the one-row table
//! [`DB_TABLE`], whose `-` no job's table can have in its name (letters,
//! digits and `_` only), so it never meets one.
//!
//! Read and made only by a run that holds its job's lock and reached the
//! store (`check` and `run --dry-run` never come here): an id made when the
//! store could not record it would look like a replaced output next time.

use std::io::ErrorKind;
use std::path::Path;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

// (the sink's: a run of another job may be writing the database)
use super::sqlite::BUSY_TIMEOUT;

/// The file in an output folder that holds its id.
pub const FOLDER_FILE: &str = ".portion-output";

/// The table in an output database that holds its id.
pub const DB_TABLE: &str = "portion-output";

/// A new id: 128 random bits.
fn new_id() -> String {
    format!(
        "{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    )
}

/// The id of the folder `dir` (which exists), made if it has none. Two
/// runs of jobs sharing the folder may make one at once: the file is
/// created only if absent, so both end with the same.
pub fn folder_id(dir: &Path) -> std::io::Result<String> {
    let path = dir.join(FOLDER_FILE);
    for _ in 0..2 {
        match std::fs::read_to_string(&path) {
            Ok(text) if !text.trim().is_empty() => {
                return Ok(text.trim().to_string());
            }
            // (an empty file: a write cut short before its name, which
            // cannot be, or a hand's; replaced by a new id)
            Ok(_) => {
                let id = new_id();
                crate::atomic_file::write_atomically(
                    dir,
                    "+output",
                    FOLDER_FILE,
                    format!("{id}\n").as_bytes(),
                    mode()?,
                )?;
                return Ok(id);
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let id = new_id();
                let text = format!("{id}\n");
                match crate::atomic_file::write_new(
                    dir,
                    "+output",
                    FOLDER_FILE,
                    text.as_bytes(),
                    mode()?,
                ) {
                    Ok(_) => return Ok(id),
                    // (another run made it first: read its)
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!(
        "{} is there but cannot be read as an id",
        path.display()
    )))
}

fn mode() -> std::io::Result<u32> {
    crate::atomic_file::file_mode().map_err(std::io::Error::other)
}

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
        &format!("SELECT 1 FROM \"{table}\" WHERE job = ?1 LIMIT 1"),
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
    fn a_folder_keeps_its_id_and_a_new_one_gets_another() {
        let dir = tempfile::tempdir().unwrap();
        let first = folder_id(dir.path()).unwrap();
        assert_eq!(first.len(), 32);
        assert_eq!(folder_id(dir.path()).unwrap(), first);
        std::fs::remove_file(dir.path().join(FOLDER_FILE)).unwrap();
        assert_ne!(folder_id(dir.path()).unwrap(), first);
        // (no temporary file left: only the id)
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [FOLDER_FILE]);
    }

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
