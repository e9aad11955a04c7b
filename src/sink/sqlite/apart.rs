//! A job's database is not one of the embedded store's files: the ledger,
//! SQLite's `-wal`, `-shm` and `-journal` beside it, and the history of
//! stores kept beside the default store. The rows would go into the
//! ledger's database (its tables beside the job's, a rollback of one the
//! other's), or a history saved over the database. Apart from `check`'s
//! look at the database because the store is named outside the job
//! (`store:`, `--store`, `$PORTION_STORE`), and any spelling of one file is
//! the same file: `./x` and `x`, `out/../x`, a symlink, a hard link.

use std::path::{Component, Path, PathBuf};

use crate::ledger::{EmbeddedLedger, StoreLocation};

/// The files SQLite keeps beside a database, by their suffix.
const BESIDE: [&str; 3] = ["-wal", "-shm", "-journal"];

/// Why the database at `db` cannot be the job's (one of `store`'s files,
/// or sharing a journal with it); `None`: it is apart.
pub fn store_file(db: &Path, store: &StoreLocation) -> Option<String> {
    let default = EmbeddedLedger::default_path().ok();
    let ledger = match store {
        StoreLocation::Embedded(Some(p)) => Some(p.clone()),
        StoreLocation::Embedded(None) => default.clone(),
        StoreLocation::Redis(_) => None,
    };
    let history = (default.as_deref())
        .and_then(Path::parent)
        .map(|d| d.join("history.json"));
    if let Some(h) = history.filter(|h| one_file(db, h)) {
        return Some(format!(
            "is the history of stores this host keeps beside the default store ({}), \
             which each run saves over: name another file",
            h.display()
        ));
    }
    let ledger = ledger?;
    let (db_files, ledger_files) = (with_journals(db), with_journals(&ledger));
    let shared = db_files
        .iter()
        .any(|d| ledger_files.iter().any(|l| one_file(d, l)));
    shared.then(|| {
        format!(
            "is the embedded store's file {} (or shares its journal files, -wal, -shm, \
             -journal): the rows would go into the ledger's database; name another file",
            ledger.display()
        )
    })
}

/// A database and its journal files, where SQLite makes them: beside the
/// file its path leads to.
fn with_journals(db: &Path) -> Vec<PathBuf> {
    let real = resolved(db, 0);
    let mut files = vec![real.clone()];
    for suffix in BESIDE {
        let mut name = real.clone().into_os_string();
        name.push(suffix);
        files.push(PathBuf::from(name));
    }
    files
}

/// Whether two paths are one file: the same path once resolved, or, both
/// there, the same device and inode (a hard link).
fn one_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if resolved(a, 0) == resolved(b, 0) {
        return true;
    }
    matches!(
        (std::fs::metadata(a), std::fs::metadata(b)),
        (Ok(x), Ok(y)) if (x.dev(), x.ino()) == (y.dev(), y.ino())
    )
}

/// `path` absolute, its symlinks followed, `.` and `..` gone, also where
/// it (or its folder) does not exist yet: the nearest folder that exists
/// resolved and the rest joined to it; a symlink that leads nowhere yet
/// followed to where it leads.
fn resolved(path: &Path, depth: u32) -> PathBuf {
    let abs = match std::env::current_dir() {
        Ok(cwd) if path.is_relative() => cwd.join(path),
        _ => path.to_path_buf(),
    };
    if let Ok(real) = abs.canonicalize() {
        return real;
    }
    // (a loop of symlinks: no file at all, compared as written)
    if depth > 40 {
        return lexical(&abs);
    }
    if let (Ok(to), Some(dir)) = (std::fs::read_link(&abs), abs.parent()) {
        return resolved(&dir.join(to), depth + 1);
    }
    // (the part that does not exist yet, a component at a time: a `..`
    // after a folder not made yet takes out that folder once the part
    // before it is resolved, as the kernel will once the folder is made,
    // not the text before it, which may be a symlink)
    let mut parts = abs.components();
    match parts.next_back() {
        Some(Component::Normal(name)) => resolved(parts.as_path(), depth).join(name),
        Some(Component::ParentDir) => {
            let mut dir = resolved(parts.as_path(), depth);
            dir.pop();
            dir
        }
        _ => lexical(&abs),
    }
}

/// `path` without its `.` parts, each `..` taking out the part before.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One file by any spelling, also before it exists: `./x`, `d/../x`,
    /// a symlink (to a file there, or to one not made yet), a hard link.
    #[test]
    fn one_file_by_any_spelling() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let ledger = d.join("ledger.sqlite3");
        std::fs::create_dir(d.join("out")).unwrap();
        let store = StoreLocation::Embedded(Some(ledger.clone()));
        std::os::unix::fs::symlink(&ledger, d.join("out/early.db")).unwrap();
        std::os::unix::fs::symlink(d.join("out"), d.join("elsewhere")).unwrap();
        for path in ["out/early.db", "./ledger.sqlite3"] {
            assert!(!ledger.exists());
            assert!(store_file(&d.join(path), &store).is_some(), "{path}");
        }
        std::fs::write(&ledger, "").unwrap();
        std::fs::hard_link(&ledger, d.join("out/hard.db")).unwrap();
        for path in [
            "ledger.sqlite3",
            "./ledger.sqlite3",
            "out/../ledger.sqlite3",
            "out/early.db",
            "out/hard.db",
            "ledger.sqlite3-wal",
            "elsewhere/../ledger.sqlite3-shm",
        ] {
            assert!(store_file(&d.join(path), &store).is_some(), "{path}");
        }
        for path in [
            "out/videos.db",
            "ledger.sqlite3x",
            "elsewhere/ledger.sqlite3",
        ] {
            assert_eq!(store_file(&d.join(path), &store), None, "{path}");
        }
        // A `..` after a folder not made yet, behind a symlink: the kernel
        // resolves it from where the symlink leads, not from its text.
        std::fs::create_dir_all(d.join("x/y")).unwrap();
        std::os::unix::fs::symlink(d.join("x/y"), d.join("deep")).unwrap();
        let behind = d.join("deep/not-yet/../../ledger.sqlite3");
        let deep = StoreLocation::Embedded(Some(d.join("x/ledger.sqlite3")));
        assert!(store_file(&behind, &deep).is_some());
        assert_eq!(store_file(&behind, &store), None);
        // A database whose own journal would be the ledger.
        let wal = StoreLocation::Embedded(Some(d.join("rows.db-wal")));
        assert!(store_file(&d.join("rows.db"), &wal).is_some());
        assert_eq!(
            store_file(&ledger, &StoreLocation::Redis("redis://x".into())),
            None
        );
    }
}
