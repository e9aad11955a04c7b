//! The embedded single-host store: the ledger in a SQLite file (bundled
//! SQLite, no server). Every decision is one `BEGIN IMMEDIATE` transaction, so
//! several processes on one host can charge at once; the clock is the local one.
//!
//! It implements the semantics of `lua/charge.lua` line for line, over tables
//! instead of lists; the conformance suite checks that both give the same
//! answers to the same sequence of charges and clock readings.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod charge;
mod log;

use self::charge::{OwnedCharge, clock, decide};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{
    At, BlockEnd, Charge, ChargeDecision, CredentialLog, IDEMPOTENCY_HORIZON, Ledger, LockOutcome,
    LogEntry, LogSegment, Micros, Others, Pool, Receipt, Settled, StoreError, check_fits, untag,
};

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
    lost_at        INTEGER NOT NULL DEFAULT 0   -- when the log was found lost (0: never)
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

/// The ledger in a local SQLite file.
#[derive(Clone)]
pub struct EmbeddedLedger {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
    /// What this host's history knows the store by: see [`Self::identity`].
    identity: String,
}

fn local_now() -> Micros {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as Micros)
        .unwrap_or(0)
}

/// One credential's row, as a decision reads it.
struct CredentialRow {
    last: Micros,
    serial: u64,
    retain: Micros,
    blocked_until: Micros,
    blocked_reason: String,
    lost_at: Micros,
}

fn credential_row(conn: &Connection, name: &str) -> rusqlite::Result<CredentialRow> {
    conn.query_row(
        "SELECT last, serial, retain, blocked_until, blocked_reason, lost_at FROM credential WHERE name = ?1",
        [name],
        |r| {
            Ok(CredentialRow {
                last: r.get(0)?,
                serial: r.get::<_, i64>(1)? as u64,
                retain: r.get(2)?,
                blocked_until: r.get(3)?,
                blocked_reason: r.get(4)?,
                lost_at: r.get(5)?,
            })
        },
    )
    .optional()
    .map(|row| {
        row.unwrap_or(CredentialRow {
            last: 0,
            serial: 0,
            retain: 0,
            blocked_until: 0,
            blocked_reason: String::new(),
            lost_at: 0,
        })
    })
}

impl EmbeddedLedger {
    /// Where the store lives by default: `$STATE_DIRECTORY` (systemd's
    /// `StateDirectory=`), else `$XDG_STATE_HOME/quota`, else
    /// `~/.local/state/quota`.
    pub fn default_path() -> Result<PathBuf, StoreError> {
        let dir = if let Some(d) = std::env::var_os("STATE_DIRECTORY").filter(|d| !d.is_empty()) {
            // systemd may pass several, colon-separated: the first is ours.
            let d = d.to_string_lossy().into_owned();
            PathBuf::from(d.split(':').next().unwrap_or_default())
        } else if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
            PathBuf::from(d).join("quota")
        } else if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
            PathBuf::from(home).join(".local/state/quota")
        } else {
            return Err(StoreError::NoStateDirectory);
        };
        Ok(dir.join("ledger.sqlite3"))
    }

    /// Open (creating if needed) the store file at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::Unavailable(format!("cannot create {}: {e}", dir.display()))
            })?;
        }
        // A new store file is made here, with quota's file mode (0640 unless
        // QUOTA_FILE_MODE says otherwise, less the umask), not SQLite's 0644:
        // SQLite gives its -wal and -shm files the same mode.
        let mode = crate::atomic_file::file_mode().unwrap_or(crate::atomic_file::DEFAULT_FILE_MODE);
        match crate::atomic_file::create_exclusive(path, mode) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(StoreError::Unavailable(format!(
                    "cannot create {}: {e}",
                    path.display()
                )));
            }
        }
        let conn = Connection::open(path)
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
        // The default flags without SQLITE_OPEN_CREATE: a file removed
        // since is an error, not a new store.
        let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
            | rusqlite::OpenFlags::SQLITE_OPEN_URI
            | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags)
            .map_err(|e| StoreError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
        Self::init(conn, path).map(Some)
    }

    /// Set up a connection to the store file at `path`.
    fn init(conn: Connection, path: &Path) -> Result<Self, StoreError> {
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.execute_batch(SCHEMA)?;
        // A store made before the loss time had no `lost_at`: add it.
        let has_lost_at = conn
            .prepare("SELECT 1 FROM pragma_table_info('credential') WHERE name = 'lost_at'")?
            .exists([])?;
        if !has_lost_at {
            conn.execute_batch(
                "ALTER TABLE credential ADD COLUMN lost_at INTEGER NOT NULL DEFAULT 0",
            )?;
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
            conn: Arc::new(Mutex::new(conn)),
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

    /// Run `f` on the connection in a blocking thread, inside one immediate
    /// (write-locked) transaction.
    async fn transaction<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Transaction<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        self.transaction_with(TransactionBehavior::Immediate, f)
            .await
    }

    /// Run `f` in a blocking thread inside one transaction of `behavior`:
    /// a read that writes nothing takes a deferred one, a snapshot that
    /// never holds the write lock (a status of a long log takes a few
    /// hundred ms, which no charge from another process should wait for).
    async fn transaction_with<T, F>(
        &self,
        behavior: TransactionBehavior,
        f: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Transaction<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = conn.lock().unwrap_or_else(|p| p.into_inner());
            let tx = conn.transaction_with_behavior(behavior)?;
            let out = f(&tx)?;
            tx.commit()?;
            Ok(out)
        })
        .await?
    }
}

/// The configured duration of a window the transaction named by its µs.
fn configured_per(charge: &Charge<'_>, per: Duration) -> Duration {
    charge
        .cost
        .iter()
        .flat_map(|c| c.pool.windows.iter())
        .map(|w| w.per)
        .find(|p| p.as_micros() == per.as_micros())
        .unwrap_or(per)
}

impl Ledger for EmbeddedLedger {
    async fn charge(&self, charge: &Charge<'_>, at: At) -> Result<ChargeDecision, StoreError> {
        check_fits(charge.cost)?;
        let owned = OwnedCharge::new(charge);
        let decision = self.transaction(move |tx| decide(tx, &owned, at)).await?;
        // The transaction reports windows by microseconds; give back the
        // configured durations so both stores answer identically.
        Ok(match decision {
            ChargeDecision::Rejected {
                at,
                serial,
                pool,
                per,
                retry_after,
            } => {
                let per = configured_per(charge, per);
                ChargeDecision::Rejected {
                    at,
                    serial,
                    pool,
                    per,
                    retry_after,
                }
            }
            ChargeDecision::Allowed {
                at,
                serial,
                duplicate,
                remaining,
                receipt,
                observed,
            } => ChargeDecision::Allowed {
                at,
                serial,
                duplicate,
                remaining,
                receipt,
                observed: observed.map(|mut w| {
                    w.per = w.per.map(|per| configured_per(charge, per));
                    w
                }),
            },
            other => other,
        })
    }

    async fn block(
        &self,
        credential: &str,
        end: impl Into<BlockEnd> + Send,
        reason: &str,
        at: At,
    ) -> Result<Micros, StoreError> {
        let (credential, reason, end) = (credential.to_string(), reason.to_string(), end.into());
        self.transaction(move |tx| {
            let until = end.end_at(clock(at, credential_row(tx, &credential)?.last));
            tx.execute(
                "INSERT INTO credential (name, blocked_until, blocked_reason) VALUES (?1, ?2, ?3)
                 ON CONFLICT (name) DO UPDATE SET blocked_until = ?2, blocked_reason = ?3
                 WHERE blocked_until < ?2",
                params![credential, until, reason],
            )?;
            Ok(credential_row(tx, &credential)?.blocked_until)
        })
        .await
    }

    async fn upstream_remaining(
        &self,
        credential: &str,
        pool: &Pool,
        remaining: u64,
        reset: Option<BlockEnd>,
        at: At,
    ) -> Result<Others, StoreError> {
        let (credential, name) = (credential.to_string(), pool.name.clone());
        let longest = pool.longest().as_micros() as Micros;
        let limit = pool.longest_window().map_or(0, |w| w.limit);
        self.transaction(move |tx| {
            let row = credential_row(tx, &credential)?;
            let now = clock(at, row.last);
            // The longest window as a charge slides it (charge.rs).
            let visible = row.retain.max(IDEMPOTENCY_HORIZON.as_micros() as Micros);
            let cutoff =
                (now - longest)
                    .max(now - visible)
                    .max(log::dead_mark(tx, &credential, &name)?);
            let until = reset.map_or(now + longest, |r| r.end_at(now));
            let others =
                log::record_others(tx, &credential, &name, (cutoff, limit), remaining, until)?;
            // (the decision's time, which later ones never go below, as in Redis)
            tx.execute(
                "INSERT INTO credential (name, last) VALUES (?1, ?2)
                 ON CONFLICT (name) DO UPDATE SET last = max(last, excluded.last)",
                params![credential, now],
            )?;
            Ok(others)
        })
        .await
    }

    async fn settle(
        &self,
        credential: &str,
        receipt: &Receipt,
        (pool, estimate, actual): (&str, u64, u64),
        at: At,
    ) -> Result<Settled, StoreError> {
        let Some(row) = receipt.entry(pool) else {
            return Ok(Settled::Gone);
        };
        let (credential, pool) = (credential.to_string(), pool.to_string());
        let charged = receipt.id as Micros;
        self.transaction(move |tx| {
            let now = clock(at, credential_row(tx, &credential)?.last);
            log::settle(
                tx,
                &credential,
                &pool,
                (row, charged),
                (estimate, actual),
                now,
            )
        })
        .await
    }

    async fn unblock(&self, credential: &str) -> Result<Option<(Micros, String)>, StoreError> {
        let credential = credential.to_string();
        self.transaction(move |tx| {
            let row = credential_row(tx, &credential)?;
            tx.execute(
                "UPDATE credential SET blocked_until = 0, blocked_reason = '' WHERE name = ?1",
                [&credential],
            )?;
            Ok((row.blocked_until > 0).then_some((row.blocked_until, row.blocked_reason)))
        })
        .await
    }

    async fn take_lock(
        &self,
        job: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<LockOutcome, StoreError> {
        let (job, holder) = (job.to_string(), holder.to_string());
        self.transaction(move |tx| {
            let now = local_now();
            let current: Option<(String, Micros)> = tx
                .query_row(
                    "SELECT holder, expires_at FROM job_lock WHERE job = ?1",
                    [&job],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            match current {
                Some((other, expires_at)) if other != holder && expires_at > now => {
                    Ok(LockOutcome::Busy {
                        holder: other,
                        expires_in: Duration::from_micros((expires_at - now) as u64),
                    })
                }
                _ => {
                    tx.execute(
                        "INSERT OR REPLACE INTO job_lock (job, holder, expires_at) VALUES (?1, ?2, ?3)",
                        params![job, holder, now + ttl.as_micros() as Micros],
                    )?;
                    Ok(LockOutcome::Held)
                }
            }
        })
        .await
    }

    async fn renew_lock(&self, job: &str, holder: &str, ttl: Duration) -> Result<bool, StoreError> {
        let (job, holder) = (job.to_string(), holder.to_string());
        self.transaction(move |tx| {
            let now = local_now();
            let n = tx
                .execute(
                    "UPDATE job_lock SET expires_at = ?3 WHERE job = ?1 AND holder = ?2 AND expires_at > ?4",
                    params![job, holder, now + ttl.as_micros() as Micros, now],
                )?;
            Ok(n == 1)
        })
        .await
    }

    async fn release_lock(&self, job: &str, holder: &str) -> Result<bool, StoreError> {
        let (job, holder) = (job.to_string(), holder.to_string());
        self.transaction(move |tx| {
            let n = tx.execute(
                "DELETE FROM job_lock WHERE job = ?1 AND holder = ?2 AND expires_at > ?3",
                params![job, holder, local_now()],
            )?;
            Ok(n == 1)
        })
        .await
    }

    async fn load_cursor(&self, job: &str) -> Result<Option<String>, StoreError> {
        let job = job.to_string();
        self.transaction(move |tx| {
            tx.query_row(
                "SELECT cursor FROM job_cursor WHERE job = ?1",
                [&job],
                |r| r.get(0),
            )
            .optional()
            .map_err(StoreError::from)
        })
        .await
    }

    async fn save_cursor(&self, job: &str, cursor: &str) -> Result<(), StoreError> {
        let (job, cursor) = (job.to_string(), cursor.to_string());
        self.transaction(move |tx| {
            tx.execute(
                "INSERT OR REPLACE INTO job_cursor (job, cursor) VALUES (?1, ?2)",
                params![job, cursor],
            )?;
            Ok(())
        })
        .await
    }

    async fn read(
        &self,
        credential: &str,
        pools: &[Pool],
        at: At,
    ) -> Result<CredentialLog, StoreError> {
        let credential = credential.to_string();
        let names: Vec<String> = pools.iter().map(|p| p.name.clone()).collect();
        self.transaction_with(TransactionBehavior::Deferred, move |tx| {
            let row = credential_row(tx, &credential)?;
            let now = clock(at, row.last);
            // Entries at or before now - R count in no window (as in charge.rs),
            // nor do those at or before a pool's dead mark: not read.
            let visible = now - row.retain.max(IDEMPOTENCY_HORIZON.as_micros() as Micros);
            let mut tags: Vec<String> = Vec::new();
            let (mut logs, mut others, mut observed) = (Vec::new(), Vec::new(), Vec::new());
            let mut reserved = Vec::new();
            for pool in &names {
                let after = log::dead_mark(tx, &credential, pool)?.max(visible);
                logs.push(read_pool(tx, &credential, pool, after, &mut tags)?);
                others.push(log::others(tx, &credential, pool)?);
                observed.push(log::observed(tx, &credential, pool)?);
                reserved.push(log::reserved(tx, &credential, pool, after)?);
            }
            Ok(CredentialLog {
                at: now,
                serial: row.serial,
                blocked_until: row.blocked_until,
                blocked_reason: row.blocked_reason,
                retain: row.retain,
                lost: vec![row.lost_at; logs.len()],
                others,
                observed,
                reserved,
                tags: tags.iter().map(|t| untag(t)).collect(),
                pools: logs,
            })
        })
        .await
    }
}

/// One pool's entries after `after`, oldest first, their tags interned in
/// `tags` (rows read in place: no string is copied per row).
fn read_pool(
    tx: &rusqlite::Transaction<'_>,
    credential: &str,
    pool: &str,
    after: Micros,
    tags: &mut Vec<String>,
) -> Result<Vec<LogSegment>, StoreError> {
    let mut stmt = tx.prepare_cached(
        "SELECT at, cost, tag FROM log WHERE credential = ?1 AND pool = ?2 AND at > ?3
         ORDER BY at, rowid",
    )?;
    let mut rows = stmt.query(params![credential, pool, after])?;
    let mut entries = Vec::new();
    let mut last: Option<usize> = None;
    while let Some(r) = rows.next()? {
        let name = r.get_ref(2)?.as_str().map_err(rusqlite::Error::from)?;
        // Runs of one tag are the rule: check the last one first.
        let tag = match last.filter(|&i| tags[i] == name) {
            Some(i) => i,
            None => match tags.iter().position(|t| t == name) {
                Some(i) => i,
                None => {
                    tags.push(name.to_string());
                    tags.len() - 1
                }
            },
        };
        last = Some(tag);
        entries.push(LogSegment::Entry(LogEntry {
            at: r.get(0)?,
            cost: r.get::<_, i64>(1)? as u64,
            tag: tag as u32,
        }));
    }
    Ok(entries)
}
