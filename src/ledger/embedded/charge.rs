//! The embedded store's charge: one decision inside one immediate
//! transaction, in the steps of `lua/charge.lua` (clock, duplicate, blocked,
//! fit, record, prune), over SQL tables instead of Redis lists. Window sums
//! come from the log's running totals (`log.rs`), so a charge's work does not
//! grow with the log; [`fit`] sums them and finds a full window. The charge
//! it decides is an owned copy ([`OwnedCharge`], in `charge/owned.rs`).

use std::time::Duration;

use rusqlite::{OptionalExtension, params};

mod fit;
mod owned;

use self::fit::{WindowSum, first_full_window, remaining, reserves_kept, used_per_window};
pub(super) use self::owned::OwnedCharge;
use self::owned::OwnedPoolCost;
use super::log::{self, PoolLog};
use super::{CredentialRow, credential_row, local_now};
use crate::ledger::{
    At, ChargeDecision, Held, IDEMPOTENCY_HORIZON, Micros, Receipt, StoreError, WouldRefuse,
};

/// One charge, in the steps of `lua/charge.lua`: clock, duplicate, blocked,
/// fit (a lost log, then the windows), record, prune. All inside the
/// caller's transaction.
pub(super) fn decide(
    tx: &rusqlite::Transaction<'_>,
    c: &OwnedCharge,
    at: At,
) -> Result<ChargeDecision, StoreError> {
    let d = Decision::read(tx, c, at)?;
    if let Some(blocked) = d.blocked() {
        return Ok(blocked);
    }
    // (observe mode: recorded all the same, the refusal reported; a full
    // window outranks a lost log, as in charge.lua)
    let mut observed = match d.lost_log(tx)? {
        Fit::Refused(decision) => return Ok(decision),
        Fit::Observed(o) => Some(o),
        Fit::Fits => None,
    };
    let used = used_per_window(tx, c, &d.logs, d.now)?;
    match d.full_window(tx, &used)? {
        Fit::Refused(decision) => return Ok(decision),
        Fit::Observed(o) => observed = Some(o),
        // (shares: asked once every window fits, as in charge/decide.lua)
        Fit::Fits => match d.reserves(tx, &used)? {
            Fit::Refused(decision) => return Ok(decision),
            Fit::Observed(o) => observed = Some(o),
            Fit::Fits => {}
        },
    }
    d.allow(tx, &used, observed)
}

/// A refusal observe mode lets through: the pool, the full window's length
/// (µs; none for a lost log), and µs until the call would have fitted.
type Observed = (String, Option<Micros>, Micros);

/// Whether a call fits, by one check.
enum Fit {
    Fits,
    /// It does not, and observe mode records it all the same.
    Observed(Observed),
    /// It does not: the decision, its time saved.
    Refused(ChargeDecision),
}

/// A decision as read before it decides: the clock, the credential's row,
/// the logs as they count at this time, a loss, a duplicate.
struct Decision<'c> {
    c: &'c OwnedCharge,
    row: CredentialRow,
    now: Micros,
    /// How far back entries count: the retain stored before this call (at
    /// least the horizon).
    visible: Micros,
    logs: Vec<PoolLog>,
    /// When the credential's log was lost, or 0 when that is over.
    lost_at: Micros,
    duplicate: bool,
}

impl<'c> Decision<'c> {
    /// Clock and duplicate, and what the later steps read.
    fn read(
        tx: &rusqlite::Transaction<'_>,
        c: &'c OwnedCharge,
        at: At,
    ) -> Result<Self, StoreError> {
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
        Ok(Self {
            c,
            row,
            now,
            visible,
            logs,
            lost_at,
            duplicate,
        })
    }

    /// Blocked: the credential is, and this is not a charge already recorded.
    fn blocked(&self) -> Option<ChargeDecision> {
        (!self.duplicate && self.row.blocked_until > self.now).then(|| ChargeDecision::Blocked {
            at: self.now,
            serial: self.row.serial,
            until: self.row.blocked_until,
            reason: self.row.blocked_reason.clone(),
        })
    }

    /// A pool whose log was lost counts as spent until its longest window
    /// passed.
    fn lost_log(&self, tx: &rusqlite::Transaction<'_>) -> Result<Fit, StoreError> {
        let (c, now, lost_at) = (self.c, self.now, self.lost_at);
        let lost = c
            .cost
            .iter()
            .find(|p| lost_at > 0 && lost_at + p.longest() > now);
        Ok(match lost {
            Some(_) if self.duplicate => Fit::Fits,
            None => Fit::Fits,
            Some(lost) if c.observe => {
                Fit::Observed((lost.pool.clone(), None, lost_at + lost.longest() - now))
            }
            Some(lost) => {
                save_time(tx, &c.credential, now, lost_at)?;
                Fit::Refused(ChargeDecision::LogLost {
                    at: now,
                    serial: self.row.serial,
                    pool: lost.pool.clone(),
                    since: lost_at,
                    until: lost_at + lost.longest(),
                })
            }
        })
    }

    /// Fit: the window that keeps the call out longest, if any.
    fn full_window(
        &self,
        tx: &rusqlite::Transaction<'_>,
        used: &[Vec<WindowSum>],
    ) -> Result<Fit, StoreError> {
        if self.duplicate {
            return Ok(Fit::Fits);
        }
        let c = self.c;
        let Some((p, k, retry)) = first_full_window(tx, c, (used, &self.logs), self.now)? else {
            return Ok(Fit::Fits);
        };
        let (pool, per) = (c.cost[p].pool.clone(), c.cost[p].spans[k].0);
        if c.observe {
            return Ok(Fit::Observed((pool, Some(per), retry)));
        }
        save_time(tx, &c.credential, self.now, self.lost_at)?;
        Ok(Fit::Refused(ChargeDecision::Rejected {
            at: self.now,
            serial: self.row.serial,
            pool,
            per: Duration::from_micros(per as u64),
            retry_after: Duration::from_micros(retry.max(0) as u64),
            held: None,
        }))
    }

    /// Shares: the window whose units left are kept for other shares'
    /// unused reserves, the one that keeps the call out longest, if any.
    fn reserves(
        &self,
        tx: &rusqlite::Transaction<'_>,
        used: &[Vec<WindowSum>],
    ) -> Result<Fit, StoreError> {
        let (c, now) = (self.c, self.now);
        let Some(sh) = c.shares.as_ref().filter(|_| !self.duplicate) else {
            return Ok(Fit::Fits);
        };
        let kept = reserves_kept(tx, c, (sh.base, sh.lend, &sh.rows), (used, &self.logs), now)?;
        let Some((p, k, retry, sub, units)) = kept else {
            return Ok(Fit::Fits);
        };
        let (pool, per) = (c.cost[p].pool.clone(), c.cost[p].spans[k].0);
        if c.observe {
            return Ok(Fit::Observed((pool, Some(per), retry)));
        }
        let share = (sh.rows[p].iter().find(|r| r.0 == sub)).map_or(String::new(), |r| r.1.clone());
        save_time(tx, &c.credential, now, self.lost_at)?;
        Ok(Fit::Refused(ChargeDecision::Rejected {
            at: now,
            serial: self.row.serial,
            pool,
            per: Duration::from_micros(per as u64),
            retry_after: Duration::from_micros(retry.max(0) as u64),
            held: Some(Held::Reserve { share, units }),
        }))
    }

    /// Record and prune (unless the call was recorded before), save the
    /// credential's row, and say what was charged.
    fn allow(
        self,
        tx: &rusqlite::Transaction<'_>,
        used: &[Vec<WindowSum>],
        observed: Option<Observed>,
    ) -> Result<ChargeDecision, StoreError> {
        let (c, now, row) = (self.c, self.now, &self.row);
        let (serial, entries) = if self.duplicate {
            (row.serial, Vec::new())
        } else {
            prune(tx, c, now - self.visible, row.serial)?;
            forget_old_ids(tx, &c.credential, now)?;
            (row.serial + 1, record(tx, c, now)?)
        };
        if let Some((pool, _, _)) = &observed {
            log::count_observed(tx, &c.credential, pool, now)?;
        }
        // Only a call recorded now widens the retention (as in charge.lua).
        let retain = if self.duplicate {
            row.retain
        } else {
            c.cost
                .iter()
                .flat_map(|c| c.windows.iter().map(|w| w.0))
                .fold(self.visible, Micros::max)
        };
        tx.execute(
            "INSERT INTO credential (name, last, serial, retain, lost_at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (name) DO UPDATE SET last = ?2, serial = ?3, retain = ?4, lost_at = ?5",
            params![c.credential, now, serial as i64, retain, self.lost_at],
        )?;
        Ok(ChargeDecision::Allowed {
            at: now,
            serial,
            duplicate: self.duplicate,
            remaining: remaining(c, (used, &self.logs), self.duplicate, now),
            // (the charge's time, with the row ids, names its rows)
            receipt: Receipt::new(now as u64, entries, &largest_budgets(c)),
            observed: observed.map(|(pool, per, retry)| WouldRefuse {
                pool,
                per: per.map(|us| Duration::from_micros(us as u64)),
                retry_after: Duration::from_micros(retry.max(0) as u64),
            }),
        })
    }
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
    } in c.cost.iter().take(c.charged)
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

/// A recorded call's prune of each pool it names, at the retention's
/// `cutoff`: every pool's dead mark raised, and one batch of rows deleted
/// in all, not one a pool (a charge as a share records in two logs), the
/// pools taking it in turn from one chosen by the charge's `serial`, as
/// lua/charge/record.lua's trim budget. A charge adds a row a pool and a
/// batch deletes hundreds, so every log still keeps up.
fn prune(
    tx: &rusqlite::Transaction<'_>,
    c: &OwnedCharge,
    cutoff: Micros,
    serial: u64,
) -> Result<(), StoreError> {
    // (a pool only read keeps its dead mark, as in a decision that records
    // nothing)
    let n = c.charged.min(c.cost.len());
    let mut left = log::PRUNE_BATCH;
    for i in 0..n {
        let p = &c.cost[(serial as usize + i) % n];
        left -= log::prune(tx, &c.credential, &p.pool, cutoff, left)?;
    }
    Ok(())
}
