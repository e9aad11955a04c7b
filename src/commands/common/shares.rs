//! Each share's figures (issue 28), per pool and window: its reserve, what
//! it used, and what it can still take now, read through the same read as
//! the pools (a share's usage is the ordinary pool `POOL/SHARE` in the
//! store, [`crate::ledger::shares::share_pool`]), so status, its JSON and
//! its metrics, and `run --dry-run` count alike; the share pools themselves
//! are never shown as pools.

use serde::Serialize;

use crate::config::Credential;
use crate::ledger::shares::{Reserve, held, lend_at, share_pool};
use std::collections::BTreeMap;

use crate::ledger::{CredentialLog, Micros, Pool, PoolUsage, Shares, Window};

/// One share's figures in one window of one pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShareUsage {
    pub share: String,
    pub pool: String,
    /// The window's place in its pool's configuration.
    #[serde(skip)]
    pub index: usize,
    #[serde(skip)]
    pub per: std::time::Duration,
    pub reserve: u64,
    /// The most the share may take of the window (`None`: no limit).
    pub limit: Option<u64>,
    pub used: u64,
    /// What a charge by the share can take now: the least of its limit
    /// left and the window's units left less what every other share's
    /// reserve holds (in a calendar window past its lending point, no more
    /// than the reserve's pace: see the ledger's rule).
    pub available: u64,
}

/// The pools a status read adds for `c`'s shares: per share, per pool,
/// `POOL/SHARE` with the pool's windows (the read counts their sums; the
/// limit is applied here, not by the read).
pub fn pools_of(c: &Credential) -> Vec<Pool> {
    (c.shares.list.iter())
        .flat_map(|s| {
            c.pools.iter().map(|p| Pool {
                name: share_pool(&p.name, &s.name),
                windows: p.windows.clone(),
            })
        })
        .collect()
}

/// What `c`'s shares used of each window, as a read of [`pools_of`]'s
/// pools gave it (empty: nothing charged).
fn used_of(c: &Credential, read: &[PoolUsage], s: usize, p: usize, k: usize) -> u64 {
    (read.get(s * c.pools.len() + p))
        .and_then(|u| u.windows.get(k))
        .map_or(0, |w| w.used)
}

/// Every share's figures, per pool and window in configuration order,
/// from the pools' usage (`base`, as status reads it) and [`pools_of`]'s
/// (`read`) at `now`.
pub fn usage(
    c: &Credential,
    base: &[PoolUsage],
    read: &[PoolUsage],
    now: Micros,
) -> Vec<ShareUsage> {
    let shares = &c.shares;
    let mut out = Vec::new();
    for (s, share) in shares.list.iter().enumerate() {
        for (p, (pool, bu)) in c.pools.iter().zip(base).enumerate() {
            for (k, (w, wu)) in pool.windows.iter().zip(&bu.windows).enumerate() {
                let budget = w.budget();
                let used = used_of(c, read, s, p, k);
                let limit = share.limit.map(|l| l.of(budget));
                let others: u64 = (shares.list.iter().enumerate())
                    .filter(|&(t, _)| t != s)
                    .map(|(t, o)| {
                        holds(
                            shares,
                            w,
                            now,
                            o.reserve.of(budget),
                            used_of(c, read, t, p, k),
                        )
                    })
                    .sum();
                let left = limit.unwrap_or(budget).saturating_sub(used);
                out.push(ShareUsage {
                    share: share.name.clone(),
                    pool: pool.name.clone(),
                    index: k,
                    per: w.per,
                    reserve: share.reserve.of(budget),
                    limit,
                    used,
                    available: left.min(wu.remaining.saturating_sub(others)),
                });
            }
        }
    }
    out
}

/// What a job with no share can take of each window: its units left less
/// every share's unused reserve. Per (pool, window index).
pub fn unshared(c: &Credential, base: &[PoolUsage], read: &[PoolUsage], now: Micros) -> Vec<u64> {
    let mut out = Vec::new();
    for (p, (pool, bu)) in c.pools.iter().zip(base).enumerate() {
        for (k, (w, wu)) in pool.windows.iter().zip(&bu.windows).enumerate() {
            let kept: u64 = (c.shares.list.iter().enumerate())
                .map(|(s, o)| {
                    holds(
                        &c.shares,
                        w,
                        now,
                        o.reserve.of(w.budget()),
                        used_of(c, read, s, p, k),
                    )
                })
                .sum();
            out.push(wu.remaining.saturating_sub(kept));
        }
    }
    out
}

/// What a share's `reserve`, of which it `used` some, holds in window `w`
/// at `now`: its unused reserve, in a calendar window past `lend_after` of
/// its period no more than the reserve's pace (as the ledger decides).
fn holds(shares: &Shares, w: &Window, now: Micros, reserve: u64, used: u64) -> u64 {
    let unused = reserve.saturating_sub(used);
    let lend = shares.lend_after.map_or(-1, i64::from);
    match w.span_at(now) {
        (start, Some(end)) => {
            let r = Reserve { reserve, unused };
            held(r, (start + 1, end), lend_at(start + 1, end, lend), now)
        }
        (_, None) => unused,
    }
}

/// A log read of a credential's pools then [`pools_of`]'s, split in two:
/// the pools' log as status and the plan read it, and the share pools'.
pub fn split_log(mut log: CredentialLog, n: usize) -> (CredentialLog, CredentialLog) {
    let shares = CredentialLog {
        at: log.at,
        serial: log.serial,
        blocked_until: log.blocked_until,
        blocked_reason: log.blocked_reason.clone(),
        retain: log.retain,
        tags: log.tags.clone(),
        pools: log.pools.split_off(n),
        lost: log.lost.split_off(n),
        others: log.others.split_off(n),
        observed: log.observed.split_off(n),
        reserved: log.reserved.split_off(n),
    };
    (log, shares)
}

/// What a run of `job` may take of each window now, by (pool, window's
/// place): its share's [`ShareUsage::available`], else what no share keeps
/// ([`unshared`]). `None`: the credential has no shares.
pub fn caps(
    c: &Credential,
    job: &str,
    base: &[PoolUsage],
    read: &[PoolUsage],
    now: Micros,
) -> Option<BTreeMap<(String, usize), u64>> {
    if c.shares.list.is_empty() {
        return None;
    }
    if c.shares.of(job).is_some() {
        let mine = usage(c, base, read, now)
            .into_iter()
            .filter(|s| s.share == job);
        return Some(mine.map(|s| ((s.pool, s.index), s.available)).collect());
    }
    let places = (c.pools.iter()).flat_map(|p| (0..p.windows.len()).map(|k| (p.name.clone(), k)));
    Some(places.zip(unshared(c, base, read, now)).collect())
}
