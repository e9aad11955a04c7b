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
//! calendar window whose period has run `lend_after`.

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
pub(crate) struct Plan {
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
    pub rows: Vec<Vec<Row>>,
}

/// Another share's reserve in one pool: the index of its pool in
/// [`Plan::cost`], its name, and its reserve per window.
pub(crate) struct Row {
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
pub(crate) fn planned<'a>(charge: &Charge<'a>, plan: &'a Plan) -> Charge<'a> {
    Charge {
        cost: &plan.cost,
        ..charge.clone()
    }
}

/// The charge both stores send for `charge` (none: it has no shares to
/// keep).
pub(crate) fn plan(charge: &Charge<'_>) -> Option<Plan> {
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
    let mut rows: Vec<Vec<Row>> = charge.cost.iter().map(|_| Vec::new()).collect();
    let others = (shares.list.iter()).filter(|s| Some(*s) != mine && s.reserve.of(u64::MAX) > 0);
    for share in others {
        for (p, c) in charge.cost.iter().enumerate() {
            rows[p].push(Row {
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
    Some(Plan {
        cost,
        base: charge.cost.len(),
        charged,
        lend: shares.lend_after.map_or(-1, i64::from),
        rows,
    })
}

/// When a calendar period [start, stop) starts lending: `lend` hundredths
/// of a percent of its length on, rounded down, exactly (as
/// lua/charge/decide.lua computes it in doubles; none: never).
pub(crate) fn lend_at(start: i64, stop: i64, lend: i64) -> Option<i64> {
    (lend >= 0).then(|| start + (i128::from(stop - start) * i128::from(lend) / 10_000) as i64)
}

/// One other share's reserve in a window: the reserve, and what of it is
/// unused (the reserve less what the share used of the window).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reserve {
    pub reserve: u64,
    pub unused: u64,
}

/// What a calendar window still holds of `r` at `t` in its period `[start,
/// stop)`, lending from `lend_at`: before it, the whole unused reserve;
/// after, no more than the reserve times the part of the period left
/// after `t`, rounded down (what the share would still need at its
/// reserve's own pace stays kept, and its last unit opens once less than
/// a unit's share of the period is left, not at the period's last
/// instant, which no timer hits: nothing is wasted). Exact, as
/// lua/charge/decide.lua's.
pub(crate) fn held(r: Reserve, (start, stop): (i64, i64), lend_at: Option<i64>, t: i64) -> u64 {
    match lend_at {
        Some(from) if t >= from => {
            let left = (stop - 1 - t).max(0) as u128;
            let len = (stop - start).max(1) as u128;
            let pace = u128::from(r.reserve) * left / len;
            r.unused.min(pace as u64)
        }
        _ => r.unused,
    }
}

/// What `rows` hold together at `t`, and the one that holds most (the
/// first of the largest): (sum, index, its units).
pub(crate) fn held_all(
    rows: &[Reserve],
    period: (i64, i64),
    lend_at: Option<i64>,
    t: i64,
) -> (u64, usize, u64) {
    let mut out = (0, 0, 0);
    for (j, r) in rows.iter().enumerate() {
        let h = held(*r, period, lend_at, t);
        out.0 += h;
        if h > out.2 {
            (out.1, out.2) = (j, h);
        }
    }
    out
}

/// The first instant after `now` at which what `rows` hold in a calendar
/// period fits in `room` units, if no one charges first: nothing is held
/// at the period's end (when it lends at all), so at the latest then. A
/// binary search over the instants, as lua/charge/decide.lua's.
pub(crate) fn opens_at(
    rows: &[Reserve],
    period: (i64, i64),
    lend_at: Option<i64>,
    room: u64,
    now: i64,
) -> i64 {
    let stop = period.1;
    // (held at `lo` is more than the room; at `hi`, it fits)
    let mut lo = match lend_at {
        None => stop - 1,
        Some(from) if from > now => (from - 1).min(stop - 1),
        Some(_) => now,
    };
    let mut hi = stop;
    while hi - lo > 1 {
        let mid = (lo + hi).div_euclid(2);
        if held_all(rows, period, lend_at, mid).0 <= room {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// A store's decision on a planned charge, as the charge's caller sees it:
/// only its own pools; a refusal by its share's pool is its pool's, at the
/// share's limit.
pub(crate) fn answer(plan: &Plan, decision: ChargeDecision) -> ChargeDecision {
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
    fn planned_by(job: &str, test: impl FnOnce(&Plan)) {
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

    fn refused_by(plan: &Plan, pool: &str) -> ChargeDecision {
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

    #[test]
    fn lending_starts_at_its_part_of_the_period() {
        assert_eq!(lend_at(1_000, 2_000, 8_000), Some(1_800));
        assert_eq!(lend_at(1_000, 2_000, -1), None);
        // A month in µs: the product (2.7e16) is past 2^53; in doubles the
        // point came out a µs late.
        let month = 31 * 86_400_000_000_i64 + 1;
        let start = 1_790_000_000_000_000;
        assert_eq!(
            lend_at(start, start + month, 9_999),
            Some(start + 2_678_132_160_000)
        );
    }

    #[test]
    fn a_reserve_opens_at_its_own_pace_after_the_lending_point() {
        let (start, stop) = (0, 60_000_000);
        let r = Reserve {
            reserve: 360,
            unused: 300,
        };
        let lend = lend_at(start, stop, 8_000);
        // Before the point: all of it unused; at 90%, 10% of 360 rounded
        // down (35: the instants left after now are one short of 10%).
        assert_eq!(held(r, (start, stop), lend, 47_999_999), 300);
        assert_eq!(held(r, (start, stop), lend, 54_000_000), 35);
        assert_eq!(held(r, (start, stop), lend, stop - 1), 0);
        assert_eq!(held(r, (start, stop), None, stop - 1), 300);
        // Units near 2^53 and a long period: exact, rounded down.
        let big = Reserve {
            reserve: (1 << 53) - 1,
            unused: 1 << 53,
        };
        let len = 31 * 86_400_000_000_i64;
        let t = len - 1 - len / 3;
        let exact = u128::from(big.reserve) * (len / 3) as u128 / len as u128;
        assert_eq!(held(big, (0, len), Some(0), t), exact as u64);
    }

    /// The whole reserve is open before the period ends (issue 36): 10
    /// units over 20 s keep their last unit only while 2 s or more are
    /// left, so a timer that ticks before the period's last instant takes
    /// it (rounded up, it opened at that instant only: one unit a period
    /// wasted).
    #[test]
    fn the_whole_reserve_is_open_before_the_period_ends() {
        let r = Reserve {
            reserve: 10,
            unused: 10,
        };
        let period = (0, 20_000_000);
        let lend = lend_at(0, 20_000_000, 5_000);
        assert_eq!(held(r, period, lend, 20_000_000 - 1 - 2_000_000), 1);
        assert_eq!(held(r, period, lend, 20_000_000 - 1 - 1_999_999), 0);
        assert_eq!(opens_at(&[r], period, lend, 0, 10_000_000), 18_000_000);
    }

    #[test]
    fn a_refused_call_is_told_when_enough_has_opened() {
        let period = (0, 60_000_000);
        let rows = [Reserve {
            reserve: 60,
            unused: 60,
        }];
        let lend = lend_at(0, 60_000_000, 8_000);
        // Before the point, 60 held: with room for 12, not until 48 s,
        // where 60 x (12 s - 1 µs) / 60 s rounds down to 11.
        assert_eq!(opens_at(&rows, period, lend, 12, 1), 48_000_000);
        // Room for 6: where less than 7 s are left after the instant.
        assert_eq!(opens_at(&rows, period, lend, 6, 50_000_000), 53_000_000);
        // No room: where less than 1 s (a unit's part) is left, before the
        // period's last instant; not lending: its end.
        assert_eq!(opens_at(&rows, period, lend, 0, 50_000_000), 59_000_000);
        assert_eq!(opens_at(&rows, period, None, 30, 1), 60_000_000);
    }
}
