//! Shares of a credential (issue 28): a job's reserve (units of every window
//! no one else may take) and limit (the most it may take of any window).
//!
//! What a share used in a window is kept the way every window's sum is: each
//! share has, per pool `P`, a pool of its own, `P/SHARE` (a `/` is in no
//! configured name), with `P`'s windows. A charge by a job with a share is
//! charged to `P` and to its share's pool, whose budget is the share's limit;
//! every other share's pool with a reserve is named at cost 0, so the same
//! atomic step slides it to now and reads its sums, without logging it
//! (alike in both stores: as a pool of a decision that records nothing).
//! No step walks the log. [`plan`] builds that charge
//! once for both stores; each store then checks the reserves (after every
//! window fits): in every window of every pool charged, the units left after
//! the call must cover every other share's unused reserve, except in a
//! calendar window whose period has run `lend_after` (what a reserve still
//! holds then is `shares/lending.rs`).

mod lending;

pub(crate) use self::lending::{Reserve, held, held_all, lend_at, opens_at};
use super::{Charge, ChargeDecision, Held, Pool, PoolCost, Window};

/// A share's amount: units, or hundredths of a percent of each window's
/// budget (rounded down, so that reserves of at most 100% in all never pass
/// the budget).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Amount {
    Units(u64),
    Basis(u32),
}

impl Amount {
    /// The units of a window of `budget` units.
    pub fn of(self, budget: u64) -> u64 {
        match self {
            Self::Units(n) => n.min(budget),
            Self::Basis(bp) => (u128::from(budget) * u128::from(bp) / 10_000) as u64,
        }
    }
}

/// One share: the job (or `--job` name) it is for, its reserve and limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Share {
    pub name: String,
    pub reserve: Amount,
    pub limit: Option<Amount>,
}

/// A credential's shares, and when its calendar windows lend unused
/// reserves to all (hundredths of a percent of the period; none: never).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shares {
    pub list: Vec<Share>,
    pub lend_after: Option<u32>,
}

impl Shares {
    /// The share a charge by `job` spends as.
    pub fn of(&self, job: &str) -> Option<&Share> {
        self.list.iter().find(|s| s.name == job)
    }
}

/// The pool that counts what `share` spent of `pool`.
pub fn share_pool(pool: &str, share: &str) -> String {
    format!("{pool}/{share}")
}

/// A charge with shares, as both stores send it: the pools to charge
/// (the charge's own first, `base` of them, then its share's, `charged` in
/// all, then every other reserve's at cost 0, only read), and per pool of
/// the charge's own the reserves to keep.
pub(crate) struct SharedCharge {
    pub cost: Vec<PoolCost>,
    pub base: usize,
    /// The pools recorded: the rest are slid and read, never logged (no
    /// 0-unit entry), nor checked for fit: a decision that records nothing
    /// in them, as a refusal is for every pool.
    pub charged: usize,
    /// Hundredths of a percent of a calendar period after which it lends;
    /// -1: never.
    pub lend: i64,
    /// Per pool of the charge's own, in order: every other share's reserve.
    pub rows: Vec<Vec<ShareReserve>>,
}

/// Another share's reserve in one pool: the index of its pool in
/// [`SharedCharge::cost`], its name, and its reserve per window.
pub(crate) struct ShareReserve {
    pub sub: usize,
    pub share: String,
    pub reserves: Vec<u64>,
}

/// The windows of a share's pool: the pool's, each with the budget `of`
/// gives (no headroom).
fn windows_of(pool: &Pool, of: impl Fn(u64) -> u64) -> Vec<Window> {
    (pool.windows.iter())
        .map(|w| Window {
            limit: of(w.budget()),
            headroom: 0,
            ..w.clone()
        })
        .collect()
}

/// `charge` as `plan` says: its share's pools added to its cost.
pub(crate) fn planned<'a>(charge: &Charge<'a>, plan: &'a SharedCharge) -> Charge<'a> {
    Charge {
        cost: &plan.cost,
        ..charge.clone()
    }
}

/// The charge both stores send for `charge` (none: it has no shares to
/// keep).
pub(crate) fn plan(charge: &Charge<'_>) -> Option<SharedCharge> {
    let shares = charge.shares.filter(|s| !s.list.is_empty())?;
    let mut cost: Vec<PoolCost> = charge.cost.to_vec();
    let mine = shares.of(charge.job);
    if let Some(share) = mine {
        for c in charge.cost {
            let limit = share.limit.unwrap_or(Amount::Basis(10_000));
            cost.push(PoolCost {
                pool: Pool {
                    name: share_pool(&c.pool.name, &share.name),
                    windows: windows_of(&c.pool, |b| limit.of(b)),
                },
                units: c.units,
            });
        }
    }
    let charged = cost.len();
    let mut rows: Vec<Vec<ShareReserve>> = charge.cost.iter().map(|_| Vec::new()).collect();
    let others = (shares.list.iter()).filter(|s| Some(*s) != mine && s.reserve.of(u64::MAX) > 0);
    for share in others {
        for (p, c) in charge.cost.iter().enumerate() {
            rows[p].push(ShareReserve {
                sub: cost.len(),
                share: share.name.clone(),
                reserves: (c.pool.windows.iter())
                    .map(|w| share.reserve.of(w.budget()))
                    .collect(),
            });
            cost.push(PoolCost {
                pool: Pool {
                    name: share_pool(&c.pool.name, &share.name),
                    windows: windows_of(&c.pool, |b| b),
                },
                units: 0,
            });
        }
    }
    Some(SharedCharge {
        cost,
        base: charge.cost.len(),
        charged,
        lend: shares.lend_after.map_or(-1, i64::from),
        rows,
    })
}

/// A store's decision on a planned charge, as the charge's caller sees it:
/// only its own pools; a refusal by its share's pool is its pool's, at the
/// share's limit.
pub(crate) fn answer(plan: &SharedCharge, decision: ChargeDecision) -> ChargeDecision {
    // (a share's pool: its base pool, the share, and the pool's index)
    let base_of = |name: &str| -> Option<(String, String, usize)> {
        let i = plan.cost.iter().position(|c| c.pool.name == name)?;
        if i < plan.base {
            return None;
        }
        let (pool, share) = name.split_once('/')?;
        Some((pool.to_string(), share.to_string(), i))
    };
    // (the share's limit in the window of `per`)
    let limit_of = |i: usize, per: std::time::Duration| -> u64 {
        let windows = &plan.cost[i].pool.windows;
        (windows.iter().find(|w| w.per == per)).map_or(0, |w| w.budget())
    };
    match decision {
        ChargeDecision::Rejected {
            at,
            serial,
            pool,
            per,
            retry_after,
            held,
        } => {
            // (only the charging job's own share has a limit here: another
            // share's pool is only read, and names no limit)
            let (pool, held) = match base_of(&pool) {
                Some((base, share, i)) if i < plan.charged => {
                    let units = limit_of(i, per);
                    (base, Some(Held::Limit { share, units }))
                }
                Some((base, _, _)) => (base, held),
                None => (pool, held),
            };
            ChargeDecision::Rejected {
                at,
                serial,
                pool,
                per,
                retry_after,
                held,
            }
        }
        ChargeDecision::Allowed {
            at,
            serial,
            duplicate,
            mut remaining,
            receipt,
            mut observed,
        } => {
            remaining.retain(|r| !r.pool.contains('/'));
            if let Some(o) = observed.as_mut()
                && let Some((base, _, _)) = base_of(&o.pool)
            {
                o.pool = base;
            }
            ChargeDecision::Allowed {
                at,
                serial,
                duplicate,
                remaining,
                receipt,
                observed,
            }
        }
        ChargeDecision::LogLost {
            at,
            serial,
            pool,
            since,
            until,
        } => ChargeDecision::LogLost {
            at,
            serial,
            pool: base_of(&pool).map_or(pool, |(base, _, _)| base),
            since,
            until,
        },
        other => other,
    }
}

/// The share pools a receipt of `pool` holds entries in: settled with it.
pub(crate) fn settled_with<'r>(
    receipt: &'r super::Receipt,
    pool: &'r str,
) -> impl Iterator<Item = &'r str> + 'r {
    (receipt.entries.iter())
        .map(|(name, _)| name.as_str())
        .filter(move |name| name.split_once('/').is_some_and(|(p, _)| p == pool))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_down_and_units_stop_at_the_budget() {
        assert_eq!(Amount::Basis(6_000).of(600), 360);
        assert_eq!(Amount::Basis(3_333).of(100), 33);
        assert_eq!(Amount::Units(50).of(30), 30);
    }

    /// A charge by `job` of 10 units of a pool of 100 a minute, and the
    /// plan of it with trending (reserve 60) and search (limit 30).
    fn planned_by(job: &str, test: impl FnOnce(&SharedCharge)) {
        let shares = Shares {
            list: vec![
                Share {
                    name: "trending".into(),
                    reserve: Amount::Units(60),
                    limit: None,
                },
                Share {
                    name: "search".into(),
                    reserve: Amount::Units(0),
                    limit: Some(Amount::Units(30)),
                },
            ],
            lend_after: None,
        };
        let window = Window {
            per: std::time::Duration::from_secs(60),
            limit: 100,
            headroom: 0,
            aligned: None,
        };
        let cost = [PoolCost {
            pool: Pool {
                name: "units".into(),
                windows: vec![window],
            },
            units: 10,
        }];
        let charge = Charge {
            credential: "c",
            cost: &cost,
            endpoint: "",
            job,
            id: None,
            seen_serial: 0,
            observe: false,
            estimated: &[],
            shares: Some(&shares),
        };
        test(&plan(&charge).expect("a plan"));
    }

    fn refused_by(plan: &SharedCharge, pool: &str) -> ChargeDecision {
        answer(
            plan,
            ChargeDecision::Rejected {
                at: 0,
                serial: 0,
                pool: pool.into(),
                per: std::time::Duration::from_secs(60),
                retry_after: std::time::Duration::ZERO,
                held: None,
            },
        )
    }

    #[test]
    fn a_refusal_names_the_limit_of_the_charging_share_only() {
        let held = |d: &ChargeDecision| match d {
            ChargeDecision::Rejected { pool, held, .. } => (pool.clone(), held.clone()),
            other => panic!("{other:?}"),
        };
        planned_by("search", |plan| {
            let d = refused_by(plan, "units/search");
            let limit = Held::Limit {
                share: "search".into(),
                units: 30,
            };
            assert_eq!(held(&d), ("units".into(), Some(limit.clone())));
            assert_eq!(limit.to_string(), "at the limit of search: 30 units");
            // Trending's pool is only read: whatever it says names no limit
            // of trending's.
            assert_eq!(
                held(&refused_by(plan, "units/trending")),
                ("units".into(), None)
            );
        });
        planned_by("backfill", |plan| {
            assert_eq!((plan.base, plan.charged, plan.cost.len()), (1, 1, 2));
            assert_eq!(
                held(&refused_by(plan, "units/trending")),
                ("units".into(), None)
            );
        });
    }
}
