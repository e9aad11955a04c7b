//! The embedded store's log, read in bounded work at any length (issue 11):
//! every row carries `cum`, the running total of its pool's costs in
//! insertion order, so a window's sum and the time enough of it leaves are
//! two index lookups instead of a scan; rows that left the retention are
//! deleted a bounded batch at a time, and every read stops at each pool's
//! `dead` mark (the retention's cutoff at its latest recorded call, as in
//! `lua/charge.lua`), so a row not deleted yet counts exactly as if it were.

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use crate::ledger::{
    IDEMPOTENCY_HORIZON, Micros, Others, RESERVED, SETTLE_REACH, Settled, StoreError,
};

/// Most rows one charge deletes in all the logs it records in (and ids per
/// credential): enough to outpace any insertion rate (a row a log a
/// charge), small enough to keep a charge within a few ms.
pub(super) const PRUNE_BATCH: i64 = 256;

/// The tables and indexes the running totals need, made after `migrate`.
pub(super) const SCHEMA: &str = "
CREATE INDEX IF NOT EXISTS log_by_cum ON log (credential, pool, cum);
CREATE INDEX IF NOT EXISTS log_reserved ON log (credential, pool, at) WHERE reserved = 1;
CREATE INDEX IF NOT EXISTS charge_id_by_time ON charge_id (credential, at);
CREATE TABLE IF NOT EXISTS log_pool (
    credential   TEXT NOT NULL,
    pool         TEXT NOT NULL,
    dead         INTEGER NOT NULL,  -- rows at or before count in no window (pruned or not)
    others       INTEGER NOT NULL DEFAULT 0,  -- units spent by others, per the upstream
    others_until INTEGER NOT NULL DEFAULT 0,  -- until its count resets
    observed     INTEGER NOT NULL DEFAULT 0,  -- observe mode: calls that did not fit
    observed_at  INTEGER NOT NULL DEFAULT 0,  -- the latest of them
    PRIMARY KEY (credential, pool)
);
";

/// Columns added to `log_pool` since it was first made.
const LOG_POOL_ADDED: [&str; 4] = ["others", "others_until", "observed", "observed_at"];

/// A store made before the running totals has no `cum`: add it, and fill it
/// once for the rows it holds, in one transaction (two processes may open
/// the file at once). Its logs were pruned in full, so no `dead` is needed.
pub(super) fn migrate(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let out = (|| -> Result<(), rusqlite::Error> {
        let has_cum = conn
            .prepare("SELECT 1 FROM pragma_table_info('log') WHERE name = 'cum'")?
            .exists([])?;
        if !has_cum {
            conn.execute_batch(
                "ALTER TABLE log ADD COLUMN cum INTEGER NOT NULL DEFAULT 0;
                 UPDATE log SET cum = s.cum FROM (
                     SELECT rowid AS id,
                            SUM(cost) OVER (PARTITION BY credential, pool ORDER BY at, rowid) AS cum
                     FROM log) AS s
                 WHERE log.rowid = s.id;",
            )?;
        }
        let has_reserved = conn
            .prepare("SELECT 1 FROM pragma_table_info('log') WHERE name = 'reserved'")?
            .exists([])?;
        if !has_reserved {
            conn.execute_batch("ALTER TABLE log ADD COLUMN reserved INTEGER NOT NULL DEFAULT 0")?;
        }
        conn.execute_batch(SCHEMA)?;
        for column in LOG_POOL_ADDED {
            let has = conn
                .prepare("SELECT 1 FROM pragma_table_info('log_pool') WHERE name = ?1")?
                .exists([column])?;
            if !has {
                conn.execute_batch(&format!(
                    "ALTER TABLE log_pool ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0"
                ))?;
            }
        }
        Ok(())
    })();
    match out {
        Ok(()) => conn.execute_batch("COMMIT")?,
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e.into());
        }
    }
    Ok(())
}

/// One pool's log as a charge reads it: its `dead` mark, the running
/// total of its newest row (0 when empty), and the units others spent.
pub(super) struct PoolLog {
    pub dead: Micros,
    pub newest: i64,
    pub others: Others,
}

/// A pool's log as a charge reads it at the retention's `cutoff`: its
/// `dead` mark counted as raised to `cutoff` (entries at or before count in
/// no window of this decision), nothing written. Only a recorded call
/// raises the mark for good ([`prune`]), as in `lua/charge.lua`: a pool
/// named by a charge that records nothing (a duplicate, a refusal, a block,
/// a lost log) keeps its mark, and calls past the cutoff count again if a
/// recorded call lengthens the retention before the pool's next one.
pub(super) fn read(
    tx: &Transaction<'_>,
    credential: &str,
    pool: &str,
    cutoff: Micros,
) -> Result<PoolLog, StoreError> {
    let (dead, others): (Micros, Others) = tx
        .prepare_cached(
            "SELECT dead, others, others_until FROM log_pool WHERE credential = ?1 AND pool = ?2",
        )?
        .query_row(params![credential, pool], |r| {
            let units: i64 = r.get(1)?;
            Ok((
                r.get(0)?,
                Others {
                    units: units as u64,
                    until: r.get(2)?,
                },
            ))
        })
        .optional()?
        .unwrap_or((Micros::MIN, Others::default()));
    Ok(PoolLog {
        dead: dead.max(cutoff),
        newest: newest(tx, credential, pool)?,
        others,
    })
}

/// Prune, for a recorded call: raise the pool's `dead` mark to `cutoff`
/// (entries at or before it count in no window) and delete at most `limit`
/// of the oldest such rows; how many it deleted.
pub(super) fn prune(
    tx: &Transaction<'_>,
    credential: &str,
    pool: &str,
    cutoff: Micros,
    limit: i64,
) -> Result<i64, StoreError> {
    let dead: Micros = tx
        .prepare_cached(
            "INSERT INTO log_pool (credential, pool, dead) VALUES (?1, ?2, ?3)
             ON CONFLICT (credential, pool) DO UPDATE SET dead = max(dead, excluded.dead)
             RETURNING dead",
        )?
        .query_row(params![credential, pool, cutoff], |r| r.get(0))?;
    // Oldest first, so the rows left are always a suffix of the log.
    tx.prepare_cached(
        "DELETE FROM log WHERE rowid IN (SELECT rowid FROM log
         WHERE credential = ?1 AND pool = ?2 AND at <= ?3 ORDER BY at, rowid LIMIT ?4)",
    )?
    .execute(params![credential, pool, dead, limit.max(0)])
    .map(|deleted| deleted as i64)
    .map_err(Into::into)
}

/// The running total of the pool's newest row (0 when empty).
fn newest(tx: &Transaction<'_>, credential: &str, pool: &str) -> Result<i64, StoreError> {
    Ok(tx
        .prepare_cached(
            "SELECT cum FROM log WHERE credential = ?1 AND pool = ?2
             ORDER BY at DESC, rowid DESC LIMIT 1",
        )?
        .query_row(params![credential, pool], |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}

/// The running total just before the first row after `cutoff`: the last
/// row's at or before it, else what preceded the oldest row left.
pub(super) fn base(
    tx: &Transaction<'_>,
    credential: &str,
    pool: &str,
    cutoff: Micros,
) -> Result<i64, StoreError> {
    let before: Option<i64> = tx
        .prepare_cached(
            "SELECT cum FROM log WHERE credential = ?1 AND pool = ?2 AND at <= ?3
             ORDER BY at DESC, rowid DESC LIMIT 1",
        )?
        .query_row(params![credential, pool, cutoff], |r| r.get(0))
        .optional()?;
    if let Some(cum) = before {
        return Ok(cum);
    }
    let oldest: Option<i64> = tx
        .prepare_cached(
            "SELECT cum - cost FROM log WHERE credential = ?1 AND pool = ?2
             ORDER BY at, rowid LIMIT 1",
        )?
        .query_row(params![credential, pool], |r| r.get(0))
        .optional()?;
    Ok(oldest.unwrap_or(0))
}

/// The time of the first row whose running total reaches `total` (the row
/// by which that much has been spent), if any.
pub(super) fn reached_at(
    tx: &Transaction<'_>,
    credential: &str,
    pool: &str,
    total: i64,
) -> Result<Option<Micros>, StoreError> {
    // Totals never decrease along the log, so the least total is the first row.
    Ok(tx
        .prepare_cached(
            "SELECT at FROM log WHERE credential = ?1 AND pool = ?2 AND cum >= ?3
             ORDER BY cum, rowid LIMIT 1",
        )?
        .query_row(params![credential, pool, total], |r| r.get(0))
        .optional()?)
}

/// Append one entry, its running total continuing the pool's newest row's.
/// Returns its row id.
pub(super) fn append(
    tx: &Transaction<'_>,
    credential: &str,
    pool: &str,
    at: Micros,
    (cost, reserved): (u64, bool),
    tag: &str,
) -> Result<i64, StoreError> {
    tx.prepare_cached(
        "INSERT INTO log (credential, pool, at, cost, tag, reserved, cum)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6,
         ?4 + COALESCE((SELECT cum FROM log WHERE credential = ?1 AND pool = ?2
                        ORDER BY at DESC, rowid DESC LIMIT 1), 0))",
    )?
    .execute(params![credential, pool, at, cost as i64, tag, reserved])?;
    Ok(tx.last_insert_rowid())
}

/// Settle row `row`, charged at `at` with `estimate` units, to `actual`
/// (lua/settle.lua does the same in Redis): its cost, and the running
/// totals from it on, move by the difference; more than [`SETTLE_REACH`]
/// rows behind the pool's newest, an excess goes on the newest row and a
/// refund is dropped.
pub(super) fn settle(
    tx: &Transaction<'_>,
    credential: &str,
    pool: &str,
    (row, at): (i64, Micros),
    (estimate, actual): (u64, u64),
    now: Micros,
) -> Result<Settled, StoreError> {
    // (whatever the outcome, the reservation is over, as in lua/settle.lua)
    tx.prepare_cached("UPDATE log SET reserved = 0 WHERE rowid = ?1 AND reserved = 1")?
        .execute(params![row])?;
    let cost: Option<i64> = tx
        .prepare_cached(
            "SELECT cost FROM log WHERE rowid = ?1 AND credential = ?2 AND pool = ?3 AND at = ?4",
        )?
        .query_row(params![row, credential, pool, at], |r| r.get(0))
        .optional()?;
    let (estimate, actual) = (estimate as i64, actual as i64);
    // (past the pool's dead mark, or the retention now, a row counts in no
    // window: as in lua/settle.lua)
    let retain: Micros = tx
        .prepare_cached("SELECT retain FROM credential WHERE name = ?1")?
        .query_row(params![credential], |r| r.get(0))
        .optional()?
        .unwrap_or(0);
    let horizon = IDEMPOTENCY_HORIZON.as_micros() as Micros;
    let cutoff = dead_mark(tx, credential, pool)?.max(now - retain.max(horizon));
    match cost {
        Some(_) if at <= cutoff => return Ok(Settled::Gone),
        Some(c) if c == actual => return Ok(Settled::Exact),
        Some(c) if c == estimate => {}
        _ => return Ok(Settled::Gone),
    }
    let delta = actual - estimate;
    let later: i64 = tx
        .prepare_cached(
            "SELECT count(*) FROM (SELECT 1 FROM log WHERE credential = ?1 AND pool = ?2
             AND at >= ?3 AND (at > ?3 OR rowid > ?4) LIMIT ?5)",
        )?
        .query_row(
            params![credential, pool, at, row, SETTLE_REACH as i64 + 1],
            |r| r.get(0),
        )?;
    if later > SETTLE_REACH as i64 {
        if delta > 0 {
            tx.prepare_cached(
                "UPDATE log SET cost = cost + ?3, cum = cum + ?3 WHERE rowid = (
                 SELECT rowid FROM log WHERE credential = ?1 AND pool = ?2
                 ORDER BY at DESC, rowid DESC LIMIT 1)",
            )?
            .execute(params![credential, pool, delta])?;
        }
        return Ok(Settled::Late);
    }
    tx.prepare_cached("UPDATE log SET cost = ?2 WHERE rowid = ?1")?
        .execute(params![row, actual])?;
    tx.prepare_cached(
        "UPDATE log SET cum = cum + ?5 WHERE credential = ?1 AND pool = ?2
         AND at >= ?3 AND (at > ?3 OR rowid >= ?4)",
    )?
    .execute(params![credential, pool, at, row, delta])?;
    Ok(Settled::Exact)
}

/// The units others spent in a pool, as last recorded (none: zero).
pub(super) fn others(
    conn: &Connection,
    credential: &str,
    pool: &str,
) -> Result<Others, StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT others, others_until FROM log_pool WHERE credential = ?1 AND pool = ?2",
        )?
        .query_row(params![credential, pool], |r| {
            let units: i64 = r.get(0)?;
            Ok(Others {
                units: units as u64,
                until: r.get(1)?,
            })
        })
        .optional()?
        .unwrap_or_default())
}

/// Record what the upstream says others spent in a pool (`lua/charge.lua`,
/// observe): its count above the ledger's own in the longest window
/// (`limit`), after `cutoff` (the window's start, the retention and the
/// dead mark), until `until` (`from_reset`: the upstream's reset), as
/// [`Others::after_count`] keeps it against what was recorded before.
pub(super) fn record_others(
    tx: &Transaction<'_>,
    (credential, pool): (&str, &str),
    (cutoff, limit): (Micros, u64),
    remaining: u64,
    (until, from_reset): (Micros, bool),
    now: Micros,
) -> Result<Others, StoreError> {
    let newest: i64 = tx
        .prepare_cached(
            "SELECT cum FROM log WHERE credential = ?1 AND pool = ?2
             ORDER BY at DESC, rowid DESC LIMIT 1",
        )?
        .query_row(params![credential, pool], |r| r.get(0))
        .optional()?
        .unwrap_or(0);
    let used = (newest - base(tx, credential, pool, cutoff)?).max(0);
    let counted = (limit as i64 - used - remaining as i64).max(0) as u64;
    let others = others(tx, credential, pool)?.after_count(counted, until, from_reset, now);
    tx.prepare_cached(
        "INSERT INTO log_pool (credential, pool, dead, others, others_until)
         VALUES (?1, ?2, ?5, ?3, ?4)
         ON CONFLICT (credential, pool) DO UPDATE SET others = ?3, others_until = ?4",
    )?
    .execute(params![
        credential,
        pool,
        others.units as i64,
        others.until,
        Micros::MIN
    ])?;
    Ok(others)
}

/// Observe mode: one more call of `pool` recorded though it did not fit.
pub(super) fn count_observed(
    tx: &Transaction<'_>,
    credential: &str,
    pool: &str,
    now: Micros,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "UPDATE log_pool SET observed = observed + 1, observed_at = ?3
         WHERE credential = ?1 AND pool = ?2",
    )?
    .execute(params![credential, pool, now])?;
    Ok(())
}

/// Observe mode: how many calls of `pool` were recorded though they did
/// not fit, and when the latest was (0: never).
pub(super) fn observed(
    conn: &Connection,
    credential: &str,
    pool: &str,
) -> Result<(u64, Micros), StoreError> {
    Ok(conn
        .prepare_cached(
            "SELECT observed, observed_at FROM log_pool WHERE credential = ?1 AND pool = ?2",
        )?
        .query_row(params![credential, pool], |r| {
            let n: i64 = r.get(0)?;
            Ok((n as u64, r.get(1)?))
        })
        .optional()?
        .unwrap_or((0, 0)))
}

/// The time and units of a pool's reservations not settled yet, after
/// `after`, oldest first: the newest [`RESERVED`] only, as Redis keeps them.
pub(super) fn reserved(
    conn: &Connection,
    credential: &str,
    pool: &str,
    after: Micros,
) -> Result<Vec<(Micros, u64)>, StoreError> {
    let mut out = conn
        .prepare_cached(
            "SELECT at, cost FROM log WHERE credential = ?1 AND pool = ?2 AND reserved = 1
             AND at > ?3 ORDER BY at DESC, rowid DESC LIMIT ?4",
        )?
        .query_map(params![credential, pool, after, RESERVED as i64], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    out.reverse();
    Ok(out)
}

/// A pool's `dead` mark for a read (none yet: nothing is dead).
pub(super) fn dead_mark(
    conn: &Connection,
    credential: &str,
    pool: &str,
) -> Result<Micros, StoreError> {
    Ok(conn
        .prepare_cached("SELECT dead FROM log_pool WHERE credential = ?1 AND pool = ?2")?
        .query_row(params![credential, pool], |r| r.get(0))
        .optional()?
        .unwrap_or(Micros::MIN))
}
