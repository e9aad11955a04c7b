//! A day of a credential's schedules, simulated on its log: every run of
//! every scheduled job from now to a day ahead, each spending its worst case
//! at its start, until the first run of a job that would not fit. Apart
//! from the store and the text so it can be checked on exact numbers;
//! [`super::schedule`] is the steady state. Nothing here reads a store or
//! a clock.

use std::collections::BTreeMap;
use std::time::Duration;

use super::model::RunsOut;
use super::schedule::Scheduled;
use crate::ledger::{CredentialLog, Micros, Pool};
use crate::timefmt::rfc3339;

/// How far ahead the schedule is simulated: a day.
const HORIZON: Duration = Duration::from_secs(86_400);
/// Runs simulated at most, so a schedule of seconds stays cheap to plan.
const MAX_SIMULATED_RUNS: usize = 20_000;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::plan::fixtures::*;
    use crate::ledger::{LogEntry, LogSegment};
    use crate::timefmt::from_rfc3339;

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
}
