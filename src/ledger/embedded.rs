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

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{
    At, Charge, ChargeDecision, CredentialLog, IDEMPOTENCY_HORIZON, Ledger, LockOutcome, LogEntry,
    Micros, Pool, Remaining, StoreError, check_fits, tag, untag,
};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS log (
    credential TEXT NOT NULL,
    pool       TEXT NOT NULL,
    at         INTEGER NOT NULL,  -- µs since the epoch
    cost       INTEGER NOT NULL,
    tag        TEXT NOT NULL      -- endpoint<TAB>job
);
CREATE INDEX IF NOT EXISTS log_by_time ON log (credential, pool, at);
CREATE TABLE IF NOT EXISTS credential (
    name           TEXT PRIMARY KEY,
    last           INTEGER NOT NULL DEFAULT 0,  -- latest decision's time: the clock never goes back
    serial         INTEGER NOT NULL DEFAULT 0,  -- charges recorded
    retain         INTEGER NOT NULL DEFAULT 0,  -- longest window seen, µs
    blocked_until  INTEGER NOT NULL DEFAULT 0,
    blocked_reason TEXT NOT NULL DEFAULT ''
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
CREATE TABLE IF NOT EXISTS charge_id (
    credential TEXT NOT NULL,
    id         TEXT NOT NULL,
    at         INTEGER NOT NULL,
    PRIMARY KEY (credential, id)
);
";

/// The ledger in a local SQLite file.
#[derive(Clone)]
pub struct EmbeddedLedger {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
}

fn sql_error(e: rusqlite::Error) -> StoreError {
    StoreError::Other(format!("embedded store: {e}"))
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
}

fn credential_row(conn: &Connection, name: &str) -> rusqlite::Result<CredentialRow> {
    conn.query_row(
        "SELECT last, serial, retain, blocked_until, blocked_reason FROM credential WHERE name = ?1",
        [name],
        |r| {
            Ok(CredentialRow {
                last: r.get(0)?,
                serial: r.get::<_, i64>(1)? as u64,
                retain: r.get(2)?,
                blocked_until: r.get(3)?,
                blocked_reason: r.get(4)?,
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
            return Err(StoreError::Other(
                "no state directory: set STATE_DIRECTORY, XDG_STATE_HOME or HOME, or name a store"
                    .into(),
            ));
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
        let conn = Connection::open(path)
            .map_err(|e| StoreError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
        conn.busy_timeout(Duration::from_secs(10))
            .map_err(sql_error)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql_error)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql_error)?;
        conn.execute_batch(SCHEMA).map_err(sql_error)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            path: path.to_path_buf(),
        })
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
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = conn.lock().unwrap_or_else(|p| p.into_inner());
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql_error)?;
            let out = f(&tx)?;
            tx.commit().map_err(sql_error)?;
            Ok(out)
        })
        .await
        .map_err(|e| StoreError::Other(format!("embedded store task failed: {e}")))?
    }
}

/// An owned copy of a charge, to move into the blocking thread.
struct OwnedCharge {
    credential: String,
    cost: Vec<OwnedPoolCost>,
    tag: String,
    id: Option<String>,
}

/// One pool's part of an owned charge: windows as (length µs, budget).
struct OwnedPoolCost {
    pool: String,
    units: u64,
    windows: Vec<(Micros, u64)>,
}

fn decide(
    tx: &rusqlite::Transaction<'_>,
    c: &OwnedCharge,
    at: At,
) -> Result<ChargeDecision, StoreError> {
    let row = credential_row(tx, &c.credential).map_err(sql_error)?;
    let now = match at {
        At::StoreClock => local_now(),
        At::Fixed(us) => us,
    }
    .max(row.last);
    let retain = c
        .cost
        .iter()
        .flat_map(|c| c.windows.iter().map(|w| w.0))
        .fold(row.retain, Micros::max);

    let mut duplicate = false;
    if let Some(id) = &c.id {
        let horizon = IDEMPOTENCY_HORIZON.as_micros() as Micros;
        tx.execute(
            "DELETE FROM charge_id WHERE credential = ?1 AND at <= ?2",
            params![c.credential, now - horizon],
        )
        .map_err(sql_error)?;
        duplicate = tx
            .query_row(
                "SELECT 1 FROM charge_id WHERE credential = ?1 AND id = ?2",
                params![c.credential, id],
                |_| Ok(()),
            )
            .optional()
            .map_err(sql_error)?
            .is_some();
    }
    if !duplicate && row.blocked_until > now {
        return Ok(ChargeDecision::Blocked {
            at: now,
            serial: row.serial,
            until: row.blocked_until,
            reason: row.blocked_reason,
        });
    }

    // Used units per window, in charge order.
    let mut sums = Vec::new();
    for OwnedPoolCost { pool, windows, .. } in &c.cost {
        let mut per_pool = Vec::new();
        for (len, _) in windows {
            let used: i64 = tx
                .query_row(
                    "SELECT COALESCE(SUM(cost), 0) FROM log WHERE credential = ?1 AND pool = ?2 AND at > ?3",
                    params![c.credential, pool, now - len],
                    |r| r.get(0),
                )
                .map_err(sql_error)?;
            per_pool.push(used as u64);
        }
        sums.push(per_pool);
    }

    if !duplicate {
        // The latest of the times at which each short window has shed enough.
        let mut worst: Option<(usize, usize, Micros)> = None;
        for (
            p,
            OwnedPoolCost {
                pool,
                units,
                windows,
            },
        ) in c.cost.iter().enumerate()
        {
            for (k, (len, budget)) in windows.iter().enumerate() {
                let need = (sums[p][k] + units) as i64 - *budget as i64;
                if need <= 0 {
                    continue;
                }
                let mut stmt = tx
                    .prepare_cached(
                        "SELECT at, cost FROM log WHERE credential = ?1 AND pool = ?2 AND at > ?3 ORDER BY at, rowid",
                    )
                    .map_err(sql_error)?;
                let mut rows = stmt
                    .query(params![c.credential, pool, now - len])
                    .map_err(sql_error)?;
                let (mut freed, mut free_at) = (0i64, now + len);
                while let Some(r) = rows.next().map_err(sql_error)? {
                    freed += r.get::<_, i64>(1).map_err(sql_error)?;
                    if freed >= need {
                        free_at = r.get::<_, i64>(0).map_err(sql_error)? + len;
                        break;
                    }
                }
                let retry = free_at - now;
                if worst.is_none_or(|w| retry > w.2) {
                    worst = Some((p, k, retry));
                }
            }
        }
        if let Some((p, k, retry)) = worst {
            // As in Redis, time never goes back past a decision's reading.
            tx.execute(
                "INSERT INTO credential (name, last) VALUES (?1, ?2)
                 ON CONFLICT (name) DO UPDATE SET last = ?2",
                params![c.credential, now],
            )
            .map_err(sql_error)?;
            return Ok(ChargeDecision::Rejected {
                at: now,
                serial: row.serial,
                pool: c.cost[p].pool.clone(),
                per: Duration::from_micros(c.cost[p].windows[k].0 as u64),
                retry_after: Duration::from_micros(retry.max(0) as u64),
            });
        }
    }

    let mut serial = row.serial;
    if !duplicate {
        serial += 1;
        for OwnedPoolCost { pool, units, .. } in &c.cost {
            tx.execute(
                "INSERT INTO log (credential, pool, at, cost, tag) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![c.credential, pool, now, *units as i64, c.tag],
            )
            .map_err(sql_error)?;
        }
        if let Some(id) = &c.id {
            tx.execute(
                "INSERT INTO charge_id (credential, id, at) VALUES (?1, ?2, ?3)",
                params![c.credential, id, now],
            )
            .map_err(sql_error)?;
        }
    }
    // Entries older than the longest window ever seen are out of every window.
    for OwnedPoolCost { pool, .. } in &c.cost {
        tx.execute(
            "DELETE FROM log WHERE credential = ?1 AND pool = ?2 AND at <= ?3",
            params![c.credential, pool, now - retain],
        )
        .map_err(sql_error)?;
    }
    tx.execute(
        "INSERT INTO credential (name, last, serial, retain) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (name) DO UPDATE SET last = ?2, serial = ?3, retain = ?4",
        params![c.credential, now, serial as i64, retain],
    )
    .map_err(sql_error)?;

    let mut remaining = Vec::new();
    for (
        p,
        OwnedPoolCost {
            pool,
            units,
            windows,
        },
    ) in c.cost.iter().enumerate()
    {
        for (k, (len, budget)) in windows.iter().enumerate() {
            let used = sums[p][k] + if duplicate { 0 } else { *units };
            remaining.push(Remaining {
                pool: pool.clone(),
                per: Duration::from_micros(*len as u64),
                remaining: budget.saturating_sub(used),
            });
        }
    }
    Ok(ChargeDecision::Allowed {
        at: now,
        serial,
        duplicate,
        remaining,
    })
}

impl Ledger for EmbeddedLedger {
    async fn charge(&self, charge: &Charge<'_>, at: At) -> Result<ChargeDecision, StoreError> {
        check_fits(charge.cost)?;
        let owned = OwnedCharge {
            credential: charge.credential.to_string(),
            cost: charge
                .cost
                .iter()
                .map(|c| OwnedPoolCost {
                    pool: c.pool.name.clone(),
                    units: c.units,
                    windows: c
                        .pool
                        .windows
                        .iter()
                        .map(|w| (w.len_us(), w.budget()))
                        .collect(),
                })
                .collect(),
            tag: tag(charge.endpoint, charge.job),
            id: charge.id.map(str::to_string),
        };
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
                let per = charge
                    .cost
                    .iter()
                    .flat_map(|c| c.pool.windows.iter())
                    .map(|w| w.per)
                    .find(|p| p.as_micros() == per.as_micros())
                    .unwrap_or(per);
                ChargeDecision::Rejected {
                    at,
                    serial,
                    pool,
                    per,
                    retry_after,
                }
            }
            other => other,
        })
    }

    async fn block(
        &self,
        credential: &str,
        until: Micros,
        reason: &str,
        _at: At,
    ) -> Result<Micros, StoreError> {
        let (credential, reason) = (credential.to_string(), reason.to_string());
        self.transaction(move |tx| {
            tx.execute(
                "INSERT INTO credential (name, blocked_until, blocked_reason) VALUES (?1, ?2, ?3)
                 ON CONFLICT (name) DO UPDATE SET blocked_until = ?2, blocked_reason = ?3
                 WHERE blocked_until < ?2",
                params![credential, until, reason],
            )
            .map_err(sql_error)?;
            Ok(credential_row(tx, &credential)
                .map_err(sql_error)?
                .blocked_until)
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
                .optional()
                .map_err(sql_error)?;
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
                    )
                    .map_err(sql_error)?;
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
                )
                .map_err(sql_error)?;
            Ok(n == 1)
        })
        .await
    }

    async fn release_lock(&self, job: &str, holder: &str) -> Result<bool, StoreError> {
        let (job, holder) = (job.to_string(), holder.to_string());
        self.transaction(move |tx| {
            let n = tx
                .execute(
                    "DELETE FROM job_lock WHERE job = ?1 AND holder = ?2 AND expires_at > ?3",
                    params![job, holder, local_now()],
                )
                .map_err(sql_error)?;
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
            .map_err(sql_error)
        })
        .await
    }

    async fn save_cursor(&self, job: &str, cursor: &str) -> Result<(), StoreError> {
        let (job, cursor) = (job.to_string(), cursor.to_string());
        self.transaction(move |tx| {
            tx.execute(
                "INSERT OR REPLACE INTO job_cursor (job, cursor) VALUES (?1, ?2)",
                params![job, cursor],
            )
            .map_err(sql_error)?;
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
        self.transaction(move |tx| {
            let row = credential_row(tx, &credential).map_err(sql_error)?;
            let now = match at {
                At::StoreClock => local_now(),
                At::Fixed(us) => us,
            }
            .max(row.last);
            let mut logs = Vec::new();
            let mut stmt = tx
                .prepare_cached(
                    "SELECT at, cost, tag FROM log WHERE credential = ?1 AND pool = ?2 ORDER BY at, rowid",
                )
                .map_err(sql_error)?;
            for pool in &names {
                let entries = stmt
                    .query_map(params![credential, pool], |r| {
                        let (endpoint, job) = untag(&r.get::<_, String>(2)?);
                        Ok(LogEntry {
                            at: r.get(0)?,
                            cost: r.get::<_, i64>(1)? as u64,
                            endpoint,
                            job,
                        })
                    })
                    .map_err(sql_error)?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(sql_error)?;
                logs.push(entries);
            }
            Ok(CredentialLog {
                at: now,
                serial: row.serial,
                blocked_until: row.blocked_until,
                blocked_reason: row.blocked_reason,
                pools: logs,
            })
        })
        .await
    }
}
