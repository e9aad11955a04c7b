//! An owned copy of a charge, its pools and its shares' reserves: what the
//! embedded store moves into its blocking thread, with each window as the
//! charge's steps read it (how long an entry counts, budget, calendar span).

use crate::ledger::shares::SharedCharge;
use crate::ledger::{Charge, Micros, calendar, tag};

/// An owned copy of a charge, to move into the blocking thread.
pub(in crate::ledger::embedded) struct OwnedCharge {
    pub(super) credential: String,
    pub(super) cost: Vec<OwnedPoolCost>,
    pub(super) tag: String,
    pub(super) id: Option<String>,
    pub(super) seen_serial: u64,
    pub(super) observe: bool,
    /// Shares: the reserves to keep (see ledger::shares).
    pub(super) shares: Option<OwnedShares>,
    /// The pools recorded, the first (the rest, other shares' pools, are
    /// only read: see ledger::shares::SharedCharge).
    pub(super) charged: usize,
}

/// A planned charge's reserves: how many of its pools are its own, when a
/// calendar period lends, and per own pool (share pool, share, reserve per
/// window) of every other share.
pub(in crate::ledger::embedded) struct OwnedShares {
    pub(super) base: usize,
    pub(super) lend: i64,
    pub(super) rows: Vec<Vec<(usize, String, Vec<u64>)>>,
}

impl OwnedCharge {
    /// `charge` as planned (its cost `plan`'s, when it has shares).
    pub(in crate::ledger::embedded) fn new(
        charge: &Charge<'_>,
        plan: Option<&SharedCharge>,
    ) -> Self {
        let shares = plan.map(|p| OwnedShares {
            base: p.base,
            lend: p.lend,
            rows: (p.rows.iter())
                .map(|rows| {
                    (rows.iter())
                        .map(|r| (r.sub, r.share.clone(), r.reserves.clone()))
                        .collect()
                })
                .collect(),
        });
        Self {
            shares,
            charged: plan.map_or(charge.cost.len(), |p| p.charged),
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
    pub(super) fn span(&self, k: usize, now: Micros) -> (Micros, Option<Micros>) {
        match self.spans[k] {
            (per, Some(tz)) => {
                let (start, end) = calendar::period(tz, per, now);
                (start - 1, Some(end))
            }
            (per, None) => (now - per, None),
        }
    }

    /// The pool's longest window, µs.
    pub(super) fn longest(&self) -> Micros {
        self.windows.iter().map(|w| w.0).max().unwrap_or(0)
    }
}

/// One pool's part of an owned charge: windows as (how long an entry counts
/// in it, µs; budget), and as configured (length µs; its time zone when it
/// is a calendar window).
pub(in crate::ledger::embedded) struct OwnedPoolCost {
    pub(super) pool: String,
    pub(super) units: u64,
    /// An estimate, settled after the call: reserved until then.
    pub(super) estimated: bool,
    pub(super) windows: Vec<(Micros, u64)>,
    pub(super) spans: Vec<(Micros, Option<chrono_tz::Tz>)>,
}
