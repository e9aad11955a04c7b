//! Pacing advice: whether a pool's shorter windows spread its longest
//! window's budget, and if not, the window to add so a burst cannot spend
//! a day's budget at once. Pure arithmetic on the pool's windows, apart so
//! it can be checked on exact numbers.

use super::model::Pacing;
use crate::ledger::Pool;

/// Whether some window spreads the pool's longest-window budget: if the
/// shorter windows let the whole budget go in under half the longest
/// window, a burst can repeat every day: propose a window that allows one
/// round (the largest job's units per run) per equal slice of it.
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
    let rounds = budget / round;
    if rounds < 2 {
        return None;
    }
    let per = longest
        .per
        .as_secs()
        .div_ceil(rounds)
        .div_ceil(60)
        .saturating_mul(60);
    Some(Pacing {
        longest_seconds: longest.per.as_secs(),
        budget,
        spendable_in_seconds: spendable_in,
        propose_limit: round,
        propose_per_seconds: per,
    })
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

    fn pace(longest: u64, budget: u64, spendable: u64, limit: u64, per: u64) -> Option<Pacing> {
        Some(Pacing {
            longest_seconds: longest,
            budget,
            spendable_in_seconds: spendable,
            propose_limit: limit,
            propose_per_seconds: per,
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
        let want = pace(longest, max, 0, 1, 60);
        assert_eq!(propose(&pool(&[(longest, max, 0)]), 1), want);
    }

    #[test]
    fn a_proposed_window_is_rounded_up_to_whole_minutes() {
        // 14 rounds of 7 in 100: 6171.4 s, so 6172 s, so 103 minutes.
        let want = pace(DAY, 100, 0, 7, 103 * MIN);
        assert_eq!(propose(&pool(&[(DAY, 100, 0)]), 7), want);
    }
}
