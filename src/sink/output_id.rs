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

/// The file in an output folder that holds its id.
pub const FOLDER_FILE: &str = ".portion-output";

/// The table in an output database that holds its id.
pub const DB_TABLE: &str = "portion-output";

/// A new id: 128 random bits.
pub(crate) fn new_id() -> String {
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
}
