//! The arithmetic of a schedule, apart from the store and the text so it
//! can be checked on exact numbers: how a job run every D meets each window
//! in steady state, and the fastest schedule that fits. [`super::cost`]
//! says what one run spends, [`super::simulate`] when a day of every
//! scheduled job would run out. Nothing here reads a store or a clock.

use std::collections::BTreeMap;
use std::time::Duration;

use super::cost::units_per_run;
use super::model::WindowNeed;
use crate::config::Job;
use crate::ledger::Pool;

const DAY: Duration = Duration::from_secs(86_400);

/// A scheduled job of the credential, as the arithmetic sees it.
#[derive(Clone, Debug)]
pub struct Scheduled<'a> {
    pub job: &'a str,
    pub every: Duration,
    /// Units per run, per pool.
    pub units: BTreeMap<String, u64>,
}

/// The jobs among `jobs` that have a schedule, in order, each spending
/// its `expected` units a run if it has them (a conditional job's, from
/// its share of 304s), else its worst case.
pub fn scheduled<'a>(
    jobs: &[&'a Job],
    expected: &BTreeMap<String, BTreeMap<String, u64>>,
) -> Vec<Scheduled<'a>> {
    jobs.iter()
        .filter_map(|j| {
            Some(Scheduled {
                job: &j.name,
                every: j.schedule?,
                units: (expected.get(&j.name).cloned()).unwrap_or_else(|| units_per_run(j)),
            })
        })
        .collect()
}

/// Runs a day of a schedule of `every`.
pub fn runs_per_day(every: Duration) -> f64 {
    DAY.as_secs_f64() / every.as_secs_f64()
}

/// Units a day of `units` a run every `every`, rounded up.
pub fn units_per_day(units: u64, every: Duration) -> u64 {
    (units as f64 * DAY.as_secs_f64() / every.as_secs_f64()).ceil() as u64
}

/// Units a day all of `scheduled` need from `pool` (saturating, as every
/// sum of configured numbers here: a worst case past u64 is simply full).
pub fn pool_units_per_day(pool: &str, scheduled: &[Scheduled]) -> u64 {
    scheduled
        .iter()
        .filter_map(|s| Some(units_per_day(*s.units.get(pool)?, s.every)))
        .fold(0, u64::saturating_add)
}

/// Runs every `every` that start inside any window of length `per`.
pub fn runs_in(per: Duration, every: Duration) -> u64 {
    per.as_micros().div_ceil(every.as_micros().max(1)) as u64
}

/// Units `scheduled` need from `pool` in one window of length `per`, each
/// job at its own schedule.
fn units_needed<'s, 'a: 's>(
    per: Duration,
    pool: &str,
    scheduled: impl Iterator<Item = &'s Scheduled<'a>>,
) -> u64 {
    scheduled
        .map(|s| runs_in(per, s.every).saturating_mul(s.units.get(pool).copied().unwrap_or(0)))
        .fold(0, u64::saturating_add)
}

/// For each window of each pool `units` spends from: how a job run every
/// `every` meets it, beside all of `scheduled` together.
pub fn window_needs(
    pools: &[Pool],
    units: &BTreeMap<String, u64>,
    every: Duration,
    scheduled: &[Scheduled],
) -> Vec<WindowNeed> {
    let mut windows = Vec::new();
    for pool in pools.iter().filter(|p| units.contains_key(&p.name)) {
        let own = units[&pool.name];
        for w in &pool.windows {
            let needed = units_needed(w.per, &pool.name, scheduled.iter());
            windows.push(WindowNeed {
                pool: pool.name.clone(),
                per_seconds: w.per.as_secs(),
                budget: w.budget(),
                runs_per_window: runs_in(w.per, every),
                runs_budget_holds: w.budget() / own.max(1),
                units_needed: needed,
                fits: needed <= w.budget(),
            });
        }
    }
    windows
}

/// The shortest `every` (seconds) for `job`, which spends `units` a run,
/// that fits every window in steady state, the other scheduled jobs as they
/// are: in a window of length W a job run every D starts ⌈W/D⌉ times, so
/// with k runs allowed, D ≥ W/k. `None` when not even one run fits.
pub fn fastest(
    pools: &[Pool],
    job: &str,
    units: &BTreeMap<String, u64>,
    scheduled: &[Scheduled],
) -> Option<u64> {
    let mut every = 1u64; // seconds
    for pool in pools.iter().filter(|p| units.contains_key(&p.name)) {
        let own = units[&pool.name];
        for w in &pool.windows {
            let others = units_needed(w.per, &pool.name, scheduled.iter().filter(|s| s.job != job));
            let k = w.budget().saturating_sub(others) / own.max(1);
            if k == 0 {
                return None;
            }
            every = every.max(w.per.as_secs().div_ceil(k));
        }
    }
    // Whole minutes read better, when the answer is a minute or more.
    Some(if every >= 60 {
        every.div_ceil(60).saturating_mul(60)
    } else {
        every
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::plan::fixtures::*;

    /// The pools of the operator tests: units 90 (100 less 10%) a day and
    /// 30 an hour; search 10 a day.
    fn pools() -> Vec<Pool> {
        vec![
            pool("units", &[(DAY_S, 100, 10), (HOUR, 30, 0)]),
            pool("search", &[(DAY_S, 10, 0)]),
        ]
    }

    #[test]
    fn runs_in_a_window_count_every_start() {
        assert_eq!(runs_in(secs(HOUR), secs(30 * MIN)), 2);
        assert_eq!(runs_in(secs(HOUR), secs(30 * MIN + 1)), 2);
        assert_eq!(runs_in(secs(HOUR), secs(30 * MIN - 1)), 3);
        assert_eq!(runs_in(secs(DAY_S), secs(30 * MIN)), 48);
        // A schedule longer than the window still starts once in it.
        assert_eq!(runs_in(secs(HOUR), secs(6 * HOUR)), 1);
        assert_eq!(runs_in(Duration::ZERO, secs(HOUR)), 0);
        // A zero period counts every microsecond rather than dividing by 0.
        assert_eq!(runs_in(secs(1), Duration::ZERO), 1_000_000);
    }

    #[test]
    fn a_day_of_runs_rounds_units_up_per_job() {
        assert_eq!(runs_per_day(secs(30 * MIN)), 48.0);
        assert_eq!(runs_per_day(secs(48 * HOUR)), 0.5);
        assert_eq!(units_per_day(9, secs(30 * MIN)), 432);
        assert_eq!(units_per_day(1, secs(7 * HOUR)), 4); // 3.43 runs
        assert_eq!(units_per_day(5, secs(48 * HOUR)), 3); // half a run of 5
        assert_eq!(units_per_day(0, secs(HOUR)), 0);
        let s = [
            every("a", 7 * HOUR, &[("units", 1)]),
            every("b", 7 * HOUR, &[("units", 1), ("search", 2)]),
        ];
        // 4 + 4, not ⌈6.86⌉: each job's day is rounded up on its own.
        assert_eq!(pool_units_per_day("units", &s), 8);
        assert_eq!(pool_units_per_day("search", &s), 7);
        assert_eq!(pool_units_per_day("other", &s), 0);
    }

    #[test]
    fn each_window_the_job_spends_from_gets_a_need() {
        let s = [
            every("trending", 30 * MIN, &[("units", 9)]),
            every("music", 6 * HOUR, &[("search", 1)]),
        ];
        let need = |pools: &[Pool], k: usize| {
            let w = window_needs(pools, &s[k].units, s[k].every, &s);
            let row = |n: &WindowNeed| {
                let counts = (n.runs_per_window, n.runs_budget_holds, n.units_needed);
                (n.pool.clone(), n.per_seconds, n.budget, counts, n.fits)
            };
            w.iter().map(row).collect::<Vec<_>>()
        };
        let units = |per, budget, counts, fits| ("units".to_string(), per, budget, counts, fits);
        let want = [
            units(DAY_S, 90, (48, 10, 432), false),
            units(HOUR, 30, (2, 3, 18), true),
        ];
        assert_eq!(need(&pools(), 0), want);
        // A schedule longer than the window: one run starts in it.
        let search_hourly = [pool("search", &[(HOUR, 10, 0)])];
        let want = [("search".to_string(), HOUR, 10, (1, 10, 1), true)];
        assert_eq!(need(&search_hourly, 1), want);
        // A window fits up to its budget exactly: 2 runs of 9 in 18.
        assert_eq!(need(&hourly(18), 0), [units(HOUR, 18, (2, 2, 18), true)]);
        assert_eq!(need(&hourly(17), 0), [units(HOUR, 17, (2, 1, 18), false)]);
    }

    #[test]
    fn fastest_is_each_window_over_the_runs_it_holds() {
        let s = [
            every("trending", 30 * MIN, &[("units", 9)]),
            every("music", 6 * HOUR, &[("search", 1)]),
        ];
        // 24h holds 10 runs of 9: every 2h24m (the hour holds 3: 20m).
        assert_eq!(fastest(&pools(), "trending", &s[0].units, &s), Some(8640));
        assert_eq!(fastest(&pools(), "music", &s[1].units, &s), Some(8640));
        let alone = |own| fastest(&hourly(30), "a", &units(&[("units", own)]), &[]);
        assert_eq!(alone(10), Some(20 * MIN)); // 3 runs fill 30 exactly
        assert_eq!(alone(11), Some(30 * MIN)); // 2 runs
        assert_eq!(alone(30), Some(HOUR));
        assert_eq!(alone(31), None); // one run is more than the window
        // A job that spends from no pool could run every second.
        assert_eq!(fastest(&hourly(30), "a", &BTreeMap::new(), &[]), Some(1));
    }

    #[test]
    fn fastest_leaves_the_other_jobs_their_share_but_not_its_own() {
        let own = units(&[("units", 9)]);
        // Its own current schedule does not count against it.
        let s = [every("a", 1, &[("units", 9)])];
        assert_eq!(fastest(&hourly(30), "a", &own, &s), Some(20 * MIN));
        // Another job takes 20 of the 30: one run of 9 an hour is left.
        let s = [every("b", 30 * MIN, &[("units", 10)])];
        assert_eq!(fastest(&hourly(30), "a", &own, &s), Some(HOUR));
        // It takes all 30: nothing fits.
        let s = [every("b", 20 * MIN, &[("units", 10)])];
        assert_eq!(fastest(&hourly(30), "a", &own, &s), None);
    }

    #[test]
    fn fastest_rounds_up_to_whole_minutes_from_a_minute() {
        let one = units(&[("units", 1)]);
        let fast = |per, limit| fastest(&[pool("units", &[(per, limit, 0)])], "a", &one, &[]);
        assert_eq!(fast(HOUR, 7), Some(9 * MIN)); // 514.3 s
        assert_eq!(fast(HOUR, 59), Some(2 * MIN)); // 61.02 s
        assert_eq!(fast(MIN, 1), Some(MIN));
        assert_eq!(fast(MIN, 7), Some(9)); // 8.57 s: seconds, under a minute
    }
}
