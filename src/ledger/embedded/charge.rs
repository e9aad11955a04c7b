//! The embedded store's charge: one decision inside one immediate
//! transaction, in the steps of `lua/charge.lua` (clock, duplicate, blocked,
//! fit, record, prune), over SQL tables instead of Redis lists. Window sums
//! come from the log's running totals (`log.rs`), so a charge's work does not
//! grow with the log.

use std::time::Duration;

use rusqlite::{OptionalExtension, params};

use super::log::{self, PoolLog};
use super::{credential_row, local_now};
use crate::ledger::calendar;
use crate::ledger::{
    At, Charge, ChargeDecision, IDEMPOTENCY_HORIZON, Micros, Receipt, Remaining, StoreError,
    WouldRefuse, tag,
};

/// An owned copy of a charge, to move into the blocking thread.
pub(super) struct OwnedCharge {
    credential: String,
    cost: Vec<OwnedPoolCost>,
    tag: String,
    id: Option<String>,
    seen_serial: u64,
    observe: bool,
}

impl OwnedCharge {
    pub(super) fn new(charge: &Charge<'_>) -> Self {
        Self {
            credential: charge.credential.to_string(),
            cost: charge
                .cost
                .iter()
                .map(|c| OwnedPoolCost {
                    pool: c.pool.name.clone(),
                    units: c.units,
                    estimated: charge.estimated.contains(&c.pool.name.as_str()),
                    windows: c
                        .pool
                        .windows
                        .iter()
                        .map(|w| (w.reach_us(), w.budget()))
                        .collect(),
                    spans: c
                        .pool
                        .windows
                        .iter()
                        .map(|w| (w.len_us(), w.aligned))
                        .collect(),
                })
                .collect(),
            tag: tag(charge.endpoint, charge.job),
            id: charge.id.map(str::to_string),
            seen_serial: charge.seen_serial,
            observe: charge.observe,
        }
    }
}

impl OwnedPoolCost {
    /// Window `k` at `now`: where it starts (entries after count) and, for
    /// a calendar window, when its period ends (see ledger::calendar).
    fn span(&self, k: usize, now: Micros) -> (Micros, Option<Micros>) {
        match self.spans[k] {
            (per, Some(tz)) => {
                let (start, end) = calendar::period(tz, per, now);
                (start - 1, Some(end))
            }
            (per, None) => (now - per, None),
        }
    }

    /// The pool's longest window, µs.
    fn longest(&self) -> Micros {
        self.windows.iter().map(|w| w.0).max().unwrap_or(0)
    }
}

/// One pool's part of an owned charge: windows as (how long an entry counts
/// in it, µs; budget), and as configured (length µs; its time zone when it
/// is a calendar window).
pub(super) struct OwnedPoolCost {
    pool: String,
    units: u64,
    /// An estimate, settled after the call: reserved until then.
    estimated: bool,
    windows: Vec<(Micros, u64)>,
    spans: Vec<(Micros, Option<chrono_tz::Tz>)>,
}

/// One charge, in the steps of `lua/charge.lua`: clock, duplicate, blocked,
/// fit, record, prune. All inside the caller's transaction.
pub(super) fn decide(
    tx: &rusqlite::Transaction<'_>,
    c: &OwnedCharge,
    at: At,
) -> Result<ChargeDecision, StoreError> {
    let row = credential_row(tx, &c.credential)?;
    let now = clock(at, row.last);
    // Retention, the same rule as charge.lua: entries at or before now - R,
    // R the retain stored before this call (at least the horizon), count in
    // no window, even one lengthened since.
    // (a call recorded below raises each pool's dead mark to that cutoff,
    // as in charge.lua; a decision that records nothing only reads by it)
    let visible = row.retain.max(IDEMPOTENCY_HORIZON.as_micros() as Micros);
    let logs = read_logs(tx, c, now - visible)?;
    // The caller saw more charges than the store holds: the log was lost.
    // A loss older than R is over for every window charged so far (as in
    // charge.lua), so a window lengthened later does not bring it back.
    let lost_at = if row.serial < c.seen_serial {
        now
    } else if row.lost_at + visible <= now {
        0
    } else {
        row.lost_at
    };
    let duplicate = match &c.id {
        Some(id) => seen_before(tx, &c.credential, id, now)?,
        None => false,
    };
    if !duplicate && row.blocked_until > now {
        return Ok(ChargeDecision::Blocked {
            at: now,
            serial: row.serial,
            until: row.blocked_until,
            reason: row.blocked_reason,
        });
    }
    // A pool whose log was lost counts as spent until its longest window passed.
    let lost = c
        .cost
        .iter()
        .find(|p| lost_at > 0 && lost_at + p.longest() > now);
    // (observe mode: recorded all the same, the refusal reported; a full
    // window outranks a lost log, as in charge.lua)
    let mut observed = None;
    if !duplicate
        && c.observe
        && let Some(lost) = lost
    {
        observed = Some((lost.pool.clone(), None, lost_at + lost.longest() - now));
    } else if !duplicate && let Some(lost) = lost {
        save_time(tx, &c.credential, now, lost_at)?;
        return Ok(ChargeDecision::LogLost {
            at: now,
            serial: row.serial,
            pool: lost.pool.clone(),
            since: lost_at,
            until: lost_at + lost.longest(),
        });
    }
    let used = used_per_window(tx, c, &logs, now)?;
    let full = if duplicate {
        None
    } else {
        first_full_window(tx, c, (&used, &logs), now)?
    };
    if c.observe
        && let Some((p, k, retry)) = full
    {
        observed = Some((c.cost[p].pool.clone(), Some(c.cost[p].spans[k].0), retry));
    } else if let Some((p, k, retry)) = full {
        save_time(tx, &c.credential, now, lost_at)?;
        return Ok(ChargeDecision::Rejected {
            at: now,
            serial: row.serial,
            pool: c.cost[p].pool.clone(),
            per: Duration::from_micros(c.cost[p].spans[k].0 as u64),
            retry_after: Duration::from_micros(retry.max(0) as u64),
        });
    }
    let (serial, entries) = if duplicate {
        (row.serial, Vec::new())
    } else {
        prune(tx, c, now - visible)?;
        forget_old_ids(tx, &c.credential, now)?;
        (row.serial + 1, record(tx, c, now)?)
    };
    if let Some((pool, _, _)) = &observed {
        log::count_observed(tx, &c.credential, pool, now)?;
    }
    // Only a call recorded now widens the retention (as in charge.lua).
    let retain = if duplicate {
        row.retain
    } else {
        c.cost
            .iter()
            .flat_map(|c| c.windows.iter().map(|w| w.0))
            .fold(visible, Micros::max)
    };
    tx.execute(
        "INSERT INTO credential (name, last, serial, retain, lost_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (name) DO UPDATE SET last = ?2, serial = ?3, retain = ?4, lost_at = ?5",
        params![c.credential, now, serial as i64, retain, lost_at],
    )?;
    Ok(ChargeDecision::Allowed {
        at: now,
        serial,
        duplicate,
        remaining: remaining(c, (&used, &logs), duplicate, now),
        // (the charge's time, with the row ids, names its rows)
        receipt: Receipt::new(now as u64, entries, &largest_budgets(c)),
        observed: observed.map(|(pool, per, retry)| WouldRefuse {
            pool,
            per: per.map(|us| Duration::from_micros(us as u64)),
            retry_after: Duration::from_micros(retry.max(0) as u64),
        }),
    })
}

/// Each pool's largest budget, for a receipt.
fn largest_budgets(c: &OwnedCharge) -> Vec<(&str, u64)> {
    (c.cost.iter())
        .map(|p| {
            (
                p.pool.as_str(),
                p.windows.iter().map(|w| w.1).max().unwrap_or(0),
            )
        })
        .collect()
}

/// Save a decision's time, which later decisions never go below (as in
/// Redis), and a loss just noticed, without recording anything.
fn save_time(
    tx: &rusqlite::Transaction<'_>,
    credential: &str,
    now: Micros,
    lost_at: Micros,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO credential (name, last, lost_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (name) DO UPDATE SET last = ?2, lost_at = ?3",
        params![credential, now, lost_at],
    )?;
    Ok(())
}

/// Clock: the reading `at` asks for, never before the latest decision.
pub(super) fn clock(at: At, last: Micros) -> Micros {
    match at {
        At::StoreClock => local_now(),
        At::Fixed(us) => us,
    }
    .max(last)
}

/// Duplicate: whether this charge id was recorded within the horizon
/// (forgetting the ids that left it).
fn seen_before(
    tx: &rusqlite::Transaction<'_>,
    credential: &str,
    id: &str,
    now: Micros,
) -> Result<bool, StoreError> {
    let horizon = IDEMPOTENCY_HORIZON.as_micros() as Micros;
    // (the lookup ignores the ids not deleted yet: see forget_old_ids)
    Ok(tx
        .query_row(
            "SELECT 1 FROM charge_id WHERE credential = ?1 AND id = ?2 AND at > ?3",
            params![credential, id, now - horizon],
            |_| Ok(()),
        )
        .optional()?
        .is_some())
}

/// Delete a batch of the ids past the horizon. Only a recorded call does,
/// as only a recorded call trims `charge.lua`'s log: a decision that
/// records nothing (a refusal, a block, a duplicate) writes nothing, so a
/// resend that arrives later, at an earlier time on its own clock, is
/// found in both stores alike.
fn forget_old_ids(
    tx: &rusqlite::Transaction<'_>,
    credential: &str,
    now: Micros,
) -> Result<(), StoreError> {
    let horizon = IDEMPOTENCY_HORIZON.as_micros() as Micros;
    tx.prepare_cached(
        "DELETE FROM charge_id WHERE rowid IN (SELECT rowid FROM charge_id
         WHERE credential = ?1 AND at <= ?2 ORDER BY at LIMIT ?3)",
    )?
    .execute(params![credential, now - horizon, log::PRUNE_BATCH])?;
    Ok(())
}

/// One window's sum: the units used in it, and the running total just
/// before its first entry.
#[derive(Clone, Copy)]
struct WindowSum {
    used: u64,
    base: i64,
}

/// Units used in every window of every pool charged, in charge order: the
/// newest running total less the one before the window (or before the
/// pool's `dead` mark, if later).
fn used_per_window(
    tx: &rusqlite::Transaction<'_>,
    c: &OwnedCharge,
    logs: &[PoolLog],
    now: Micros,
) -> Result<Vec<Vec<WindowSum>>, StoreError> {
    let mut sums = Vec::new();
    for (cost, pl) in c.cost.iter().zip(logs) {
        let mut per_pool = Vec::new();
        for k in 0..cost.windows.len() {
            let start = cost.span(k, now).0;
            let base = log::base(tx, &c.credential, &cost.pool, start.max(pl.dead))?;
            let used = (pl.newest - base).max(0) as u64;
            per_pool.push(WindowSum { used, base });
        }
        sums.push(per_pool);
    }
    Ok(sums)
}

/// The units others spent that count in window `k` of `cost`'s pool at
/// `now`: in its longest window only, until the upstream's reset.
fn extra(cost: &OwnedPoolCost, k: usize, log: &PoolLog, now: Micros) -> u64 {
    let longest = cost.windows.iter().map(|w| w.0).max().unwrap_or(0);
    let lw = cost.windows.iter().position(|w| w.0 == longest);
    if lw == Some(k) && log.others.until > now {
        log.others.units
    } else {
        0
    }
}

/// Fit: the window that keeps the call out longest, as (pool, window,
/// µs until enough of it has left), or `None` when the call fits everywhere.
fn first_full_window(
    tx: &rusqlite::Transaction<'_>,
    c: &OwnedCharge,
    (used, logs): (&[Vec<WindowSum>], &[PoolLog]),
    now: Micros,
) -> Result<Option<(usize, usize, Micros)>, StoreError> {
    let mut worst: Option<(usize, usize, Micros)> = None;
    for (p, cost) in c.cost.iter().enumerate() {
        for (k, (len, budget)) in cost.windows.iter().enumerate() {
            let WindowSum { used, base } = used[p][k];
            let extra = extra(cost, k, &logs[p], now);
            let need = (used + extra + cost.units) as i64 - *budget as i64;
            if need <= 0 {
                continue;
            }
            // A calendar window frees its units at once, when its period
            // ends (or when others' units leave, if that is enough and
            // sooner), as in lua/charge.lua.
            if let (_, Some(end)) = cost.span(k, now) {
                let mut at = end;
                if extra > 0 && need as u64 <= extra {
                    at = at.min(now.max(logs[p].others.until));
                }
                if worst.is_none_or(|w| at - now > w.2) {
                    worst = Some((p, k, at - now));
                }
                continue;
            }
            // When `n` units have left: the row by which the window's
            // entries add up to `n`, a window's length on.
            let freed_at = |n: i64| -> Result<Micros, StoreError> {
                let at = log::reached_at(tx, &c.credential, &cost.pool, base + n)?;
                Ok(at.map_or(now + len, |at| at + len))
            };
            // Others' units leave at once at the upstream's reset; until
            // then the pool's own calls must free all that is needed (as in
            // lua/charge.lua).
            let mut at = if extra == 0 {
                freed_at(need)?
            } else {
                let mine = need - extra as i64;
                let after = if mine > 0 { freed_at(mine)? } else { now };
                after.max(logs[p].others.until)
            };
            if extra > 0 && need as u64 <= used {
                at = at.min(freed_at(need)?);
            }
            let retry = at - now;
            if worst.is_none_or(|w| retry > w.2) {
                worst = Some((p, k, retry));
            }
        }
    }
    Ok(worst)
}

/// Record: one log entry per pool charged (their row ids, per pool), and
/// the charge's id.
fn record(
    tx: &rusqlite::Transaction<'_>,
    c: &OwnedCharge,
    now: Micros,
) -> Result<Vec<(String, i64)>, StoreError> {
    let mut entries = Vec::new();
    for OwnedPoolCost {
        pool,
        units,
        estimated,
        ..
    } in &c.cost
    {
        let row = log::append(tx, &c.credential, pool, now, (*units, *estimated), &c.tag)?;
        entries.push((pool.clone(), row));
    }
    if let Some(id) = &c.id {
        // (replacing the same id left from beyond the horizon, not deleted yet)
        tx.execute(
            "INSERT OR REPLACE INTO charge_id (credential, id, at) VALUES (?1, ?2, ?3)",
            params![c.credential, id, now],
        )?;
    }
    Ok(entries)
}

/// Each pool's log as this decision reads it, at the retention's `cutoff`.
fn read_logs(
    tx: &rusqlite::Transaction<'_>,
    c: &OwnedCharge,
    cutoff: Micros,
) -> Result<Vec<PoolLog>, StoreError> {
    c.cost
        .iter()
        .map(|p| log::read(tx, &c.credential, &p.pool, cutoff))
        .collect()
}

/// A recorded call's prune of each pool it names, at the retention's `cutoff`.
fn prune(
    tx: &rusqlite::Transaction<'_>,
    c: &OwnedCharge,
    cutoff: Micros,
) -> Result<(), StoreError> {
    for p in &c.cost {
        log::prune(tx, &c.credential, &p.pool, cutoff)?;
    }
    Ok(())
}

/// What each window has left after an allowed charge.
fn remaining(
    c: &OwnedCharge,
    (used, logs): (&[Vec<WindowSum>], &[PoolLog]),
    duplicate: bool,
    now: Micros,
) -> Vec<Remaining> {
    let mut out = Vec::new();
    for (p, cost) in c.cost.iter().enumerate() {
        for (k, (_, budget)) in cost.windows.iter().enumerate() {
            let others = extra(cost, k, &logs[p], now);
            let spent = used[p][k].used + others + if duplicate { 0 } else { cost.units };
            out.push(Remaining {
                pool: cost.pool.clone(),
                per: Duration::from_micros(cost.spans[k].0 as u64),
                remaining: budget.saturating_sub(spent),
                others,
            });
        }
    }
    out
}
