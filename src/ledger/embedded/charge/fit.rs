//! The fit of an embedded charge: each window's sum from the log's running
//! totals, the window that keeps a call out longest (and until when), and
//! what each window has left after a call. As in `lua/charge.lua`, others'
//! units (the upstream's own count) weigh in a pool's longest window only.

use std::time::Duration;

use super::super::log::{self, PoolLog};
use super::{OwnedCharge, OwnedPoolCost};
use crate::ledger::{Micros, Remaining, StoreError, shares};

/// One window's sum: the units used in it, and the running total just
/// before its first entry.
#[derive(Clone, Copy)]
pub(super) struct WindowSum {
    used: u64,
    base: i64,
}

/// Units used in every window of every pool charged, in charge order: the
/// newest running total less the one before the window (or before the
/// pool's `dead` mark, if later).
pub(super) fn used_per_window(
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
pub(super) fn first_full_window(
    tx: &rusqlite::Transaction<'_>,
    c: &OwnedCharge,
    (used, logs): (&[Vec<WindowSum>], &[PoolLog]),
    now: Micros,
) -> Result<Option<(usize, usize, Micros)>, StoreError> {
    let mut worst: Option<(usize, usize, Micros)> = None;
    // (other shares' pools are only read: they keep no call out)
    for (p, cost) in c.cost.iter().enumerate().take(c.charged) {
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

/// Per own pool of a charge with shares: (share pool, share, reserve per
/// window) of every other share.
type Rows = [Vec<(usize, String, Vec<u64>)>];

/// A window that keeps a call out for other shares: (pool, window, µs until
/// it may fit, the share pool of the largest reserve kept, its units).
pub(super) type KeptForShares = (usize, usize, Micros, usize, u64);

/// Shares (issue 28), once every window fits: the window whose units left
/// after the call do not cover what every other share holds (its unused
/// reserve; past a calendar window's lending point, no more than its
/// reserve's pace: [`shares::held`]), the one that keeps the call out
/// longest ([`KeptForShares`]); as lua/charge/decide.lua. It may fit when enough of
/// the window has left (sliding; optimistic, as others' calls may come
/// first) or when enough has opened ([`shares::opens_at`]).
pub(super) fn reserves_kept(
    tx: &rusqlite::Transaction<'_>,
    c: &OwnedCharge,
    (base, lend, rows): (usize, i64, &Rows),
    (used, logs): (&[Vec<WindowSum>], &[PoolLog]),
    now: Micros,
) -> Result<Option<KeptForShares>, StoreError> {
    let mut worst: Option<KeptForShares> = None;
    for (p, cost) in c.cost.iter().enumerate().take(base) {
        for (k, &(len, budget)) in cost.windows.iter().enumerate() {
            let (start, end) = cost.span(k, now);
            let period = end.map(|end| (start + 1, end));
            let lend_at = period.and_then(|(s, e)| shares::lend_at(s, e, lend));
            let reserves: Vec<shares::Reserve> = (rows[p].iter())
                .map(|(sub, _, reserves)| shares::Reserve {
                    reserve: reserves[k],
                    unused: reserves[k].saturating_sub(used[*sub][k].used),
                })
                .collect();
            let spent = used[p][k].used + extra(cost, k, &logs[p], now) + cost.units;
            // (the fit before made sure the call fits the budget)
            let room = budget.saturating_sub(spent);
            // (no period, no lending: `lend_at` is None and the period unread)
            let (held, j, most) =
                shares::held_all(&reserves, period.unwrap_or_default(), lend_at, now);
            if held <= room {
                continue;
            }
            let at = match period {
                Some(period) => shares::opens_at(&reserves, period, lend_at, room, now),
                None => log::reached_at(
                    tx,
                    &c.credential,
                    &cost.pool,
                    used[p][k].base + (held - room) as i64,
                )?
                .map_or(now + len, |at| at + len),
            };
            if worst.is_none_or(|w| at - now > w.2) {
                worst = Some((p, k, at - now, rows[p][j].0, most));
            }
        }
    }
    Ok(worst)
}

/// What each window has left after an allowed charge.
pub(super) fn remaining(
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
