//! The arithmetic of a schedule, apart from the store and the text so it
//! can be checked on exact numbers: how a job run every D meets each window
//! in steady state, when a simulated day of every scheduled job would run
//! out, and the fastest schedule that fits. [`super::cost`] says what one
//! run spends. Nothing here reads a store or a clock.

use std::collections::BTreeMap;
use std::time::Duration;

use super::cost::units_per_run;
use super::model::{RunsOut, WindowNeed};
use crate::config::Job;
use crate::ledger::{CredentialLog, Micros, Pool};
use crate::timefmt::rfc3339;

const DAY: Duration = Duration::from_secs(86_400);
/// How far ahead the schedule is simulated.
const HORIZON: Duration = DAY;
/// Runs simulated at most, so a schedule of seconds stays cheap to plan.
const MAX_SIMULATED_RUNS: usize = 20_000;

/// A scheduled job of the credential, as the arithmetic sees it.
#[derive(Clone, Debug)]
pub struct Scheduled<'a> {
    pub job: &'a str,
    pub every: Duration,
    /// Units per run, per pool.
    pub units: BTreeMap<String, u64>,
}

/// The jobs among `jobs` that have a schedule, in order.
pub fn scheduled<'a>(jobs: &[&'a Job]) -> Vec<Scheduled<'a>> {
    jobs.iter()
        .filter_map(|j| {
            Some(Scheduled {
                job: &j.name,
                every: j.schedule?,
                units: units_per_run(j),
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

/// Every run of `scheduled` from `now` to the horizon, as (start, index
/// into `scheduled`), in order of start (then of the job).
fn simulated_runs(now: Micros, scheduled: &[Scheduled]) -> Vec<(Micros, usize)> {
    let end = now + HORIZON.as_micros() as Micros;
    let mut runs = Vec::new();
    for (k, s) in scheduled.iter().enumerate() {
        let step = Micros::try_from(s.every.as_micros().max(1)).unwrap_or(Micros::MAX);
        let mut t = now;
        while t < end && runs.len() < MAX_SIMULATED_RUNS {
            runs.push((t, k));
            t = t.saturating_add(step);
        }
    }
    runs.sort();
    runs
}

/// Simulate the next 24 hours of every scheduled job of the credential on
/// top of the current log (a run spends its worst case at its start); the
/// first run of `job` that would not fit, if any. A run of another job that
/// would not fit is skipped: it spends nothing.
pub fn runs_out(
    pools: &[Pool],
    job: &str,
    scheduled: &[Scheduled],
    log: &CredentialLog,
) -> Option<RunsOut> {
    // Per pool: (time, units) spent, the log's and the simulated runs'.
    let mut spent: BTreeMap<&str, Vec<(Micros, u64)>> = BTreeMap::new();
    for (pool, entries) in pools.iter().zip(&log.pools) {
        spent.insert(&pool.name, entries.iter().map(|s| s.spent()).collect());
    }
    for (t, k) in simulated_runs(log.at, scheduled) {
        let s = &scheduled[k];
        match first_full(pools, &spent, t, &s.units) {
            Some((pool, per)) if s.job == job => {
                return Some(RunsOut {
                    at: rfc3339(t),
                    pool,
                    per_seconds: per.as_secs(),
                });
            }
            Some(_) => {}
            None => {
                for (pool, u) in &s.units {
                    if let Some(v) = spent.get_mut(pool.as_str()) {
                        v.push((t, *u));
                    }
                }
            }
        }
    }
    None
}

/// The first window (pool, length) a run of `units` at `t` would overfill,
/// given what is `spent` (a calendar window: in its period at `t`).
fn first_full(
    pools: &[Pool],
    spent: &BTreeMap<&str, Vec<(Micros, u64)>>,
    t: Micros,
    units: &BTreeMap<String, u64>,
) -> Option<(String, Duration)> {
    for pool in pools.iter().filter(|p| units.contains_key(&p.name)) {
        for w in &pool.windows {
            // (a calendar window counts its period's spending only)
            let from = w.span_at(t).0;
            let used: u64 = spent[pool.name.as_str()]
                .iter()
                .filter(|(at, _)| *at > from && *at <= t)
                .map(|(_, c)| *c)
                .fold(0, u64::saturating_add);
            if used.saturating_add(units[&pool.name]) > w.budget() {
                return Some((pool.name.clone(), w.per));
            }
        }
    }
    None
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
    use crate::ledger::{LogEntry, LogSegment, Window};
    use crate::timefmt::from_rfc3339;

    const MIN: u64 = 60;
    const HOUR: u64 = 3600;
    const DAY_S: u64 = 86_400;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// A pool of windows (seconds, limit, headroom).
    fn pool(name: &str, windows: &[(u64, u64, u64)]) -> Pool {
        let window = |&(per, limit, headroom): &(u64, u64, u64)| Window {
            per: secs(per),
            limit,
            headroom,
            aligned: None,
        };
        Pool {
            name: name.into(),
            windows: windows.iter().map(window).collect(),
        }
    }

    /// The pools of the operator tests: units 90 (100 less 10%) a day and
    /// 30 an hour; search 10 a day.
    fn pools() -> Vec<Pool> {
        vec![
            pool("units", &[(DAY_S, 100, 10), (HOUR, 30, 0)]),
            pool("search", &[(DAY_S, 10, 0)]),
        ]
    }

    fn hourly(limit: u64) -> [Pool; 1] {
        [pool("units", &[(HOUR, limit, 0)])]
    }

    fn units(of: &[(&str, u64)]) -> BTreeMap<String, u64> {
        of.iter().map(|(p, u)| (p.to_string(), *u)).collect()
    }

    fn every(job: &'static str, every: u64, of: &[(&str, u64)]) -> Scheduled<'static> {
        Scheduled {
            job,
            every: secs(every),
            units: units(of),
        }
    }

    fn t0() -> Micros {
        from_rfc3339("2026-11-20T12:00:00Z")
    }

    /// A log of one pool at `t0`, with entries (µs from t0, cost).
    fn log(entries: &[(i64, u64)]) -> CredentialLog {
        let entry = |&(after, cost): &(i64, u64)| {
            LogSegment::Entry(LogEntry {
                at: t0() + after,
                cost,
                tag: 0,
            })
        };
        CredentialLog {
            at: t0(),
            serial: 0,
            blocked_until: 0,
            blocked_reason: String::new(),
            retain: 0,
            tags: vec![("videos.list".into(), "earlier".into())],
            pools: vec![entries.iter().map(entry).collect()],
            lost: vec![0],
            others: vec![Default::default()],
            observed: vec![(0, 0)],
            reserved: vec![Vec::new()],
        }
    }

    /// The budget runs out at `at` (UTC, on 2026-11-20) in pool units.
    fn out(at: &str, per: u64) -> Option<RunsOut> {
        Some(RunsOut {
            at: format!("2026-11-20T{at}Z"),
            pool: "units".into(),
            per_seconds: per,
        })
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
    fn simulated_runs_fill_the_day_in_order() {
        let h = HOUR as Micros * 1_000_000;
        let runs = simulated_runs(t0(), &[every("a", 6 * HOUR, &[])]);
        let want = [0, 6, 12, 18].map(|n| (t0() + n * h, 0));
        assert_eq!(runs, want);
        // Longer than the horizon: the run now, only.
        let runs = simulated_runs(t0(), &[every("a", 25 * HOUR, &[])]);
        assert_eq!(runs, [(t0(), 0)]);
        // Two jobs: by start, then in the file's order.
        let runs = simulated_runs(
            t0(),
            &[every("a", 12 * HOUR, &[]), every("b", 8 * HOUR, &[])],
        );
        let want = [(0, 0), (0, 1), (8, 1), (12, 0), (16, 1)].map(|(n, k)| (t0() + n * h, k));
        assert_eq!(runs, want);
        let runs = simulated_runs(t0(), &[every("a", 1, &[])]);
        assert_eq!(runs.len(), MAX_SIMULATED_RUNS);
    }

    #[test]
    fn the_budget_runs_out_at_the_first_run_that_would_overfill() {
        let a = |every_min: u64, units: u64| [every("a", every_min * MIN, &[("units", units)])];
        let none = log(&[]);
        assert_eq!(runs_out(&hourly(30), "a", &a(30, 9), &none), None);
        // Three runs of 10 an hour fill the 30 exactly; of 11 they do not.
        assert_eq!(runs_out(&hourly(30), "a", &a(20, 10), &none), None);
        let want = out("12:40:00", HOUR);
        assert_eq!(runs_out(&hourly(30), "a", &a(20, 11), &none), want);
        // The log counts: 21 ten minutes ago and 9 now fit; 9 more do not.
        let earlier = log(&[(-600_000_000, 21)]);
        let want = out("12:30:00", HOUR);
        assert_eq!(runs_out(&hourly(30), "a", &a(30, 9), &earlier), want);
        // An entry exactly a window old has left it; a microsecond later, not.
        let hour_ago = -(HOUR as i64) * 1_000_000;
        let earlier = log(&[(hour_ago, 30)]);
        assert_eq!(runs_out(&hourly(30), "a", &a(30, 9), &earlier), None);
        let earlier = log(&[(hour_ago + 1, 30)]);
        let want = out("12:00:00", HOUR);
        assert_eq!(runs_out(&hourly(30), "a", &a(30, 9), &earlier), want);
    }

    #[test]
    fn a_calendar_day_plans_from_its_midnight() {
        // 15 units at 23:00 yesterday: a sliding day still holds them at
        // noon, a calendar day (UTC) has reset at midnight.
        let s = [every("a", 30 * MIN, &[("units", 9)])];
        let yesterday = log(&[(-13 * HOUR as i64 * 1_000_000, 15)]);
        let sliding = [pool("units", &[(DAY_S, 20, 0)])];
        assert_eq!(
            runs_out(&sliding, "a", &s, &yesterday),
            out("12:00:00", DAY_S)
        );
        let mut calendar = sliding.clone();
        calendar[0].windows[0].aligned = Some("UTC".parse().unwrap());
        assert_eq!(
            runs_out(&calendar, "a", &s, &yesterday),
            out("13:00:00", DAY_S)
        );
    }

    #[test]
    fn the_budget_runs_out_in_the_window_that_is_full() {
        let pools = [pool("units", &[(DAY_S, 20, 0), (HOUR, 30, 0)])];
        let s = [every("a", 30 * MIN, &[("units", 9)])];
        let want = out("13:00:00", DAY_S);
        assert_eq!(runs_out(&pools, "a", &s, &log(&[])), want);
    }

    #[test]
    fn other_jobs_spend_first_but_their_refused_runs_spend_nothing() {
        let none = log(&[]);
        let s = [
            every("big", HOUR, &[("units", 31)]),
            every("a", 30 * MIN, &[("units", 9)]),
        ];
        assert_eq!(runs_out(&hourly(30), "a", &s, &none), None);
        let want = out("12:00:00", HOUR);
        assert_eq!(runs_out(&hourly(30), "big", &s, &none), want);
        let s = [
            every("big", HOUR, &[("units", 31)]),
            every("a", 20 * MIN, &[("units", 11)]),
        ];
        let want = out("12:40:00", HOUR);
        assert_eq!(runs_out(&hourly(30), "a", &s, &none), want);
        // At the same start the earlier job goes first: 20 + 11 > 30.
        let s = [
            every("b", HOUR, &[("units", 20)]),
            every("a", HOUR, &[("units", 11)]),
        ];
        let want = out("12:00:00", HOUR);
        assert_eq!(runs_out(&hourly(30), "a", &s, &none), want);
        assert_eq!(runs_out(&hourly(30), "b", &s, &none), None);
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
