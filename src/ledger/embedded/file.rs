//! The embedded store's file: where it lives, opening or creating it with
//! portion's file mode, its schema and migrations, and the id that tells one
//! store file from another.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

use super::{EmbeddedLedger, log};
use crate::ledger::StoreError;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS log (
    credential TEXT NOT NULL,
    pool       TEXT NOT NULL,
    at         INTEGER NOT NULL,  -- µs since the epoch
    cost       INTEGER NOT NULL,
    tag        TEXT NOT NULL,     -- endpoint<TAB>job
    cum        INTEGER NOT NULL DEFAULT 0,  -- the pool's costs so far, this row's included (log.rs)
    reserved   INTEGER NOT NULL DEFAULT 0   -- 1: an estimate whose settle has not come yet
);
CREATE INDEX IF NOT EXISTS log_by_time ON log (credential, pool, at);
CREATE TABLE IF NOT EXISTS credential (
    name           TEXT PRIMARY KEY,
    last           INTEGER NOT NULL DEFAULT 0,  -- latest decision's time: the clock never goes back
    serial         INTEGER NOT NULL DEFAULT 0,  -- charges recorded
    retain         INTEGER NOT NULL DEFAULT 0,  -- longest window seen, µs
    blocked_until  INTEGER NOT NULL DEFAULT 0,
    blocked_reason TEXT NOT NULL DEFAULT '',
    lost_at        INTEGER NOT NULL DEFAULT 0,  -- when the log was found lost (0: never)
    backoff_until  INTEGER NOT NULL DEFAULT 0,  -- the latest backoff block's end (decision.rs)
    backoff_len    INTEGER NOT NULL DEFAULT 0   -- and its length, µs (0: none)
);
CREATE TABLE IF NOT EXISTS job_lock (
    job        TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at INTEGER NOT NULL       -- µs since the epoch, local clock
);
CREATE TABLE IF NOT EXISTS job_cursor (
    job    TEXT PRIMARY KEY,
    cursor TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS job_map (
    map   TEXT NOT NULL,              -- a job's map (Ledger::map_put_new)
    field TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (map, field)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,           -- 'store_id': this store's random id
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS charge_id (
    credential TEXT NOT NULL,
    id         TEXT NOT NULL,
    at         INTEGER NOT NULL,
    PRIMARY KEY (credential, id)
);
";

/// How long a transaction waits for another process's write lock on the
/// file before the store counts as unavailable (SQLite's busy timeout).
pub(in crate::ledger) const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

impl EmbeddedLedger {
    /// Where the store lives by default: `$STATE_DIRECTORY` (systemd's
    /// `StateDirectory=`), else `$XDG_STATE_HOME/portion`, else
    /// `~/.local/state/portion`.
    pub fn default_path() -> Result<PathBuf, StoreError> {
        let dir = if let Some(d) = std::env::var_os("STATE_DIRECTORY").filter(|d| !d.is_empty()) {
            // systemd may pass several, colon-separated: the first is ours.
            let d = d.to_string_lossy().into_owned();
            PathBuf::from(d.split(':').next().unwrap_or_default())
        } else if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
            PathBuf::from(d).join("portion")
        } else if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
            PathBuf::from(home).join(".local/state/portion")
        } else {
            return Err(StoreError::NoStateDirectory);
        };
        Ok(dir.join("ledger.sqlite3"))
    }

    /// Open (creating if needed) the store file at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        // A new store file (and its folders) is made with portion's file mode
        // (0640 unless PORTION_FILE_MODE says otherwise, less the umask), not
        // SQLite's 0644: SQLite gives its -wal and -shm files the same mode.
        crate::atomic_file::create_database(path).map_err(|e| {
            StoreError::Unavailable(format!("cannot create {}: {e}", path.display()))
        })?;
        let conn = Connection::open_with_flags(path, crate::atomic_file::open_existing())
            .map_err(|e| StoreError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
        Self::init(conn, path)
    }

    /// Open the store file at `path` if there is one, creating nothing (no
    /// folder, no file): `Ok(None)` when it does not exist.
    pub fn open_existing(path: &Path) -> Result<Option<Self>, StoreError> {
        match std::fs::metadata(path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(StoreError::Unavailable(format!(
                    "cannot open {}: {e}",
                    path.display()
                )));
            }
        }
        // (a file removed since is an error, not a new store)
        let conn = Connection::open_with_flags(path, crate::atomic_file::open_existing())
            .map_err(|e| StoreError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
        Self::init(conn, path).map(Some)
    }

    /// Set up a connection to the store file at `path`.
    fn init(conn: Connection, path: &Path) -> Result<Self, StoreError> {
        conn.busy_timeout(BUSY_TIMEOUT)?;
        let began = std::time::Instant::now();
        crate::atomic_file::wal_mode(&conn, BUSY_TIMEOUT)
            .map_err(|e| crate::ledger::error::busy_after(e, began.elapsed()))?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.execute_batch(SCHEMA)?;
        // A store made before the loss time had no `lost_at`: add it.
        // (and before the backoff, none of its columns)
        for column in ["lost_at", "backoff_until", "backoff_len"] {
            let has = conn
                .prepare("SELECT 1 FROM pragma_table_info('credential') WHERE name = ?1")?
                .exists([column])?;
            if !has {
                conn.execute_batch(&format!(
                    "ALTER TABLE credential ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0"
                ))?;
            }
        }
        log::migrate(&conn)?;
        // The store's id, written once, when the store is made (or first
        // opened by a build that writes one): a file removed and made again
        // is another store, a copy restored from a backup is the same one.
        conn.execute(
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('store_id', ?1)",
            [format!("{:032x}", rand::random::<u128>())],
        )?;
        let id: String =
            conn.query_row("SELECT value FROM meta WHERE key = 'store_id'", [], |r| {
                r.get(0)
            })?;
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        Ok(Self {
            worker: Arc::new(super::worker::Worker::start(conn).map_err(|e| {
                StoreError::Unavailable(format!("cannot start the store's thread: {e}"))
            })?),
            path: path.to_path_buf(),
            identity: format!("embedded {} #{id}", canonical.display()),
        })
    }

    /// What this host's history (`history.json`) knows the store by: its
    /// file's canonical path and the id written inside it,
    /// `embedded PATH #ID`. A store file deleted and made again (the demo
    /// does this) is a new store with nothing forgotten; an older copy of
    /// the same store put back is the same store, and the history notices
    /// the charges it lacks.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The file the store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
