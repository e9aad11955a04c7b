//! Pacing advice: whether a pool's shorter windows spread its longest
//! window's budget, and if not, the window to add so a burst cannot spend
//! a day's budget at once. Pure arithmetic on the pool's windows, apart so
//! it can be checked on exact numbers.
//!
//! The proposed window goes at the budget's own rate, never below it (a
//! slower one would leave part of the budget unspent every longest
//! window), and holds one round (the largest job's run) so a run is not
//! cut short by it. Whole seconds: a window is at least 1s long.

use super::model::Pacing;
use crate::ledger::Pool;

/// A proposed window may hold this many rounds at most to go at exactly
/// the budget's rate; past that, a window of one round a little faster
/// than the budget spreads it better.
const EXACT_UP_TO_ROUNDS: u128 = 4;

/// Whether some window spreads the pool's longest-window budget: if the
/// shorter windows let the whole budget go in under half the longest
/// window, a burst can repeat every day: propose a window that lets one
/// round at a time go at the budget's rate ([`window`]).
pub fn propose(pool: &Pool, round: u64) -> Option<Pacing> {
    let longest = pool.windows.iter().max_by_key(|w| w.per)?;
    let budget = longest.budget();
    // The fastest the budget can go: each window allows budget_w per per_w.
    let spendable_in = pool
        .windows
        .iter()
        .filter(|w| w.per < longest.per)
        .map(|w| {
            let slices = budget.div_ceil(w.budget().max(1)).saturating_sub(1);
            // Saturating: a budget of many slices of a long window
            // is "longer than the longest window", never a panic.
            w.per.as_secs().saturating_mul(slices)
        })
        .max()
        .unwrap_or(0);
    if spendable_in.saturating_mul(2) >= longest.per.as_secs() || round == 0 {
        return None;
    }
    if budget / round < 2 {
        return None;
    }
    let (limit, per) = window(budget, longest.per.as_secs(), round)?;
    Some(Pacing {
        longest_seconds: longest.per.as_secs(),
        budget,
        spendable_in_seconds: spendable_in,
        propose_limit: limit,
        propose_per_seconds: per,
        round,
    })
}

/// The window (limit, per in seconds) that spreads `budget` units per
/// `longest` seconds in rounds of `round` units: its rate (limit / per)
/// never below the budget's, its limit never below a round, and at most
/// half the longest window (else it spreads nothing; `None`).
///
/// At exactly the budget's rate when a window of at most
/// [`EXACT_UP_TO_ROUNDS`] rounds does it (250 a minute in rounds of 10:
/// 25 per 6s); otherwise the whole seconds either side of one round's
/// share of the longest window, whichever is the slower at or above the
/// budget's rate (7 an hour in rounds of 1: 1 per 514s, 7.003 an hour).
fn window(budget: u64, longest: u64, round: u64) -> Option<(u64, u64)> {
    let (b, l, r) = (u128::from(budget), u128::from(longest), u128::from(round));
    if b == 0 || l == 0 || r == 0 {
        return None;
    }
    // The budget's rate in lowest terms, and the fewest of it that hold a round.
    let g = gcd(b, l);
    let k = r.div_ceil(b / g);
    let exact = (k * (b / g), k * (l / g));
    let spreads = |(_, per): (u128, u128)| per * 2 <= l;
    let pick = if exact.0 <= EXACT_UP_TO_ROUNDS * r && spreads(exact) {
        exact
    } else {
        // One round's share of the longest window, in whole seconds below
        // and above; each with the fewest units at or above the budget's
        // rate (and at least a round).
        let share = r * l / b;
        let candidate = |per: u128| {
            let per = per.max(1);
            (r.max((b * per).div_ceil(l)), per)
        };
        let (below, above) = (candidate(share), candidate(share + 1));
        // the slower of the two: limit/per compared as limit·per'
        if below.0 * above.1 <= above.0 * below.1 {
            below
        } else {
            above
        }
    };
    if !spreads(pick) {
        return None;
    }
    Some((u64::try_from(pick.0).ok()?, u64::try_from(pick.1).ok()?))
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ledger::Window;

    const MIN: u64 = 60;
    const HOUR: u64 = 3600;
    const DAY: u64 = 86_400;

    /// A pool of windows (seconds, limit, headroom).
    fn pool(windows: &[(u64, u64, u64)]) -> Pool {
        let window = |&(per, limit, headroom): &(u64, u64, u64)| Window {
            per: Duration::from_secs(per),
            limit,
            headroom,
            aligned: None,
        };
        Pool {
            name: "units".into(),
            windows: windows.iter().map(window).collect(),
        }
    }

    /// The operator tests' units: 90 a day (100 less 10%), 30 an hour.
    fn units() -> Pool {
        pool(&[(DAY, 100, 10), (HOUR, 30, 0)])
    }

    /// The pacing proposed for rounds of `limit` units (those of these
    /// tests: the proposal's limit is one round).
    fn pace(longest: u64, budget: u64, spendable: u64, limit: u64, per: u64) -> Option<Pacing> {
        paced(longest, budget, spendable, (limit, per), limit)
    }

    fn paced(
        longest: u64,
        budget: u64,
        spendable: u64,
        (limit, per): (u64, u64),
        round: u64,
    ) -> Option<Pacing> {
        Some(Pacing {
            longest_seconds: longest,
            budget,
            spendable_in_seconds: spendable,
            propose_limit: limit,
            propose_per_seconds: per,
            round,
        })
    }

    #[test]
    fn a_window_is_proposed_when_the_budget_can_go_in_a_burst() {
        // The hour lets 90 go in 3 hours' starts: 2h after the first.
        let want = pace(DAY, 90, 2 * HOUR, 9, 8640);
        assert_eq!(propose(&units(), 9), want);
        // Whatever order the windows come in.
        let reordered = pool(&[(HOUR, 30, 0), (DAY, 100, 10)]);
        assert_eq!(propose(&reordered, 9), want);
        // One window: it all goes at once.
        assert_eq!(
            propose(&pool(&[(DAY, 10, 0)]), 1),
            pace(DAY, 10, 0, 1, 8640)
        );
        // Two rounds: one per half day; one round: nothing to pace.
        let want = pace(DAY, 90, 2 * HOUR, 45, 12 * HOUR);
        assert_eq!(propose(&units(), 45), want);
        assert_eq!(propose(&units(), 46), None);
        assert_eq!(propose(&units(), 0), None);
        assert_eq!(propose(&pool(&[]), 9), None);
    }

    #[test]
    fn no_window_is_proposed_when_a_window_spreads_half_the_day() {
        let day_and_hour = |hourly| pool(&[(DAY, 90, 0), (HOUR, hourly, 0)]);
        // 8 an hour: 90 goes in 12 hours' starts, 11h after the first.
        let want = pace(DAY, 90, 11 * HOUR, 9, 8640);
        assert_eq!(propose(&day_and_hour(8), 9), want);
        // 7 an hour: 13 hours' starts, 12h: exactly half the day.
        assert_eq!(propose(&day_and_hour(7), 9), None);
    }

    #[test]
    fn the_largest_budgets_and_windows_saturate_instead_of_panicking() {
        // What validation accepts at most: 2^53 - 1 units, 3650 days.
        let (max, longest) = ((1 << 53) - 1, 3650 * DAY);
        // A budget of 2^53 slices of a window of years: past u64 seconds.
        let p = pool(&[(longest, max, 0), (longest - HOUR, 1, 0)]);
        assert_eq!(propose(&p, 1), None);
        // One unit a round, 2^53 of them in ten years: 28,562 a second.
        let want = paced(longest, max, 0, (max.div_ceil(longest), 1), 1);
        assert_eq!(propose(&pool(&[(longest, max, 0)]), 1), want);
    }

    #[test]
    fn a_proposed_window_keeps_its_seconds() {
        // 100 a day in rounds of 7: 7 per 1h40m48s (6048 s) is the day's
        // rate; 103 minutes (rounded up) let only 97.9 go a day.
        let want = pace(DAY, 100, 0, 7, 6048);
        assert_eq!(propose(&pool(&[(DAY, 100, 0)]), 7), want);
    }

    /// (limit, per) proposed for a pool of one window of `limit` per
    /// `per` seconds and rounds of `round`.
    fn proposed(limit: u64, per: u64, round: u64) -> Option<(u64, u64)> {
        let p = propose(&pool(&[(per, limit, 0)]), round)?;
        Some((p.propose_limit, p.propose_per_seconds))
    }

    #[test]
    fn the_proposed_rate_is_the_budgets() {
        // 250 a minute in rounds of 10 was { limit: 10, per: 1m }: a 25th
        // of the budget; 250 an hour was { limit: 10, per: 3m }: 200 an hour.
        assert_eq!(proposed(250, MIN, 10), Some((25, 6)));
        assert_eq!(proposed(250, HOUR, 10), Some((10, 144)));
        assert_eq!(proposed(5000, HOUR, 10), Some((25, 18)));
        assert_eq!(proposed(5000, HOUR, 100), Some((100, 72)));
        assert_eq!(proposed(10, 10, 1), Some((1, 1)));
        for (limit, per, round) in [
            (250, MIN, 10),
            (250, HOUR, 10),
            (5000, HOUR, 10),
            (10, 10, 1),
        ] {
            let (l, p) = proposed(limit, per, round).unwrap();
            assert_eq!(
                l * per,
                limit * p,
                "{limit}/{per}s in rounds of {round}: {l}/{p}s"
            );
        }
        // 10 a second: a second is the shortest window there is, and the
        // pool's own already spreads the budget as finely as one can.
        assert_eq!(proposed(10, 1, 1), None);
        assert_eq!(proposed(10, 1, 5), None);
        // No window at the exact rate spreads it (7 an hour: 7 per 1h):
        // one round per the whole seconds below its share, a little faster.
        assert_eq!(proposed(7, HOUR, 1), Some((1, 514)));
    }

    #[test]
    fn a_proposed_window_never_cuts_the_budget_and_holds_a_round() {
        let budgets = [2, 7, 10, 90, 98, 100, 250, 1009, 5000, 9500, (1 << 53) - 1];
        let pers = [1, 2, 10, MIN, 97, HOUR, DAY, 7 * DAY, 3650 * DAY];
        for budget in budgets {
            for per in pers {
                for round in [1, 2, 7, 10, 45, 808, 4999] {
                    let Some((l, p)) = proposed(budget, per, round) else {
                        continue;
                    };
                    let case = format!("{budget}/{per}s in rounds of {round}: {l}/{p}s");
                    let (l, p, b, w) = (l as u128, p as u128, budget as u128, per as u128);
                    assert!(l * w >= b * p, "below the budget's rate: {case}");
                    assert!(l >= u128::from(round), "a round does not fit: {case}");
                    assert!(p >= 1 && p * 2 <= w, "spreads nothing: {case}");
                    // a little faster than the budget at most (by under a unit a second)
                    assert!(
                        l * w < (b + w) * p + b,
                        "far above the budget's rate: {case}"
                    );
                }
            }
        }
    }
}
