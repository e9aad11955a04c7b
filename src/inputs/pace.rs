//! When a once-job's list will be done, at the pace its credential's
//! windows allow: the operator's "end in sight" (`status`, `run --dry-run`,
//! the progress bar). An estimate, said as one: it assumes the job has the
//! credential to itself from now on, each input costs what the
//! configuration says (a settled cost at its estimate), and a sliding
//! window frees its budget evenly over its length.
//!
//! How a run meets a refusal changes the answer ([`Runs`]): one that waits
//! inside itself (`max_wait`, `run --wait`) goes on at the budgets' pace;
//! one that stops leaves the units freed after it to the schedule's next
//! tick, so its rest is done at whole ticks.

use std::time::Duration;

use crate::config::Job;
use crate::ledger::CredentialUsage;

/// A window of a pool the job spends from, as it stands now.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowNow {
    pub budget: u64,
    pub per: Duration,
    /// Units it would admit now.
    pub remaining: u64,
    /// A calendar window: how long until its period starts afresh (a
    /// sliding window frees units as its entries age out instead).
    pub resets_in: Option<Duration>,
}

/// A pool the job spends from: units per input, and the pool's windows.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolNow {
    pub per_input: u64,
    pub windows: Vec<WindowNow>,
}

/// Each pool `job` spends from as it stands in `usage`, with the units one
/// request costs there (one input's, unless batched).
pub fn pools_now(job: &Job, usage: &CredentialUsage) -> Vec<PoolNow> {
    job.units_per_run()
        .into_iter()
        .filter_map(|(pool, per_input)| {
            let p = usage.pools.iter().find(|p| p.pool == pool)?;
            let windows = p
                .windows
                .iter()
                .map(|w| WindowNow {
                    budget: w.budget,
                    per: w.window.per,
                    remaining: w.remaining,
                    resets_in: w
                        .window
                        .span_at(usage.at)
                        .1
                        .map(|end| Duration::from_micros((end - usage.at).max(0) as u64)),
                })
                .collect();
            Some(PoolNow { per_input, windows })
        })
        .collect()
}

/// How the job's runs meet a refusal of the ledger.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Runs {
    /// The longest a run waits inside itself for refused units
    /// (`max_wait`, or `run --wait`): zero, it stops at the first.
    pub max_wait: Duration,
    /// `schedule: every D`: a run that stopped is followed by the next
    /// tick. `None`: no schedule known, paced as if a run started
    /// whenever units free up.
    pub every: Option<Duration>,
}

/// When the rest will be done, and how the runs get there.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Finish {
    pub time: Duration,
    /// Windows the job needs more of than they hold now, and how many of
    /// them a run waits out (each refusal's wait within `max_wait`): the
    /// others stop the run until the next tick.
    pub windows: usize,
    pub waited: usize,
}

/// How long until `left` inputs are done: the slowest window of any pool
/// decides. `None`: never (a window with no budget, or an input that
/// costs more than a window's budget). At the budgets' pace: a run that
/// waits, or one started whenever units free up ([`finish`] for runs on a
/// schedule that stop).
pub fn time_to_finish(left: u64, pools: &[PoolNow]) -> Option<Duration> {
    finish(left, pools, Runs::default()).map(|f| f.time)
}

/// [`time_to_finish`] for runs that meet a refusal as `runs` says. A
/// window whose longest wait is within `max_wait` (a sliding window's
/// length: after a run spends what it holds at once, its first units free
/// up that long after; a calendar window's next start) is gone through at
/// its pace; one whose wait is longer stops each run, and with a schedule
/// what it frees meanwhile waits for the next tick (ticks counted from a
/// run started now).
pub fn finish(left: u64, pools: &[PoolNow], runs: Runs) -> Option<Finish> {
    let mut f = Finish {
        time: Duration::ZERO,
        windows: 0,
        waited: 0,
    };
    for pool in pools.iter().filter(|p| p.per_input > 0) {
        let need = u128::from(left) * u128::from(pool.per_input);
        for w in &pool.windows {
            if w.budget == 0 || pool.per_input > w.budget {
                return None;
            }
            let after_now = need.saturating_sub(u128::from(w.remaining));
            if after_now == 0 {
                continue;
            }
            let budget = u128::from(w.budget);
            // (whole periods after the next start, the last one partly)
            let periods = after_now.div_ceil(budget);
            let longest_wait = match w.resets_in {
                Some(reset) if periods == 1 => reset,
                _ => w.per,
            };
            let waits = runs.max_wait >= longest_wait;
            f.windows += 1;
            f.waited += usize::from(waits);
            let t = match (runs.every.filter(|_| !waits), w.resets_in) {
                (None, Some(reset)) => reset.saturating_add(mul(w.per, periods - 1)),
                (None, None) => {
                    let micros = after_now * w.per.as_micros() / budget;
                    Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX))
                }
                (Some(every), resets_in) => at_ticks(every, w, after_now, resets_in),
            };
            f.time = f.time.max(t);
        }
    }
    Some(f)
}

/// When the tick that spends the last of `after_now` units of `w` comes,
/// runs every `every` that each spend what the window holds then and stop.
fn at_ticks(
    every: Duration,
    w: &WindowNow,
    after_now: u128,
    resets_in: Option<Duration>,
) -> Duration {
    let budget = u128::from(w.budget);
    let periods = after_now.div_ceil(budget);
    let every_us = every.as_micros().max(1);
    let ticks = match resets_in {
        // a tick a fresh period at most, the first one after its start
        Some(reset) => {
            let starts = reset.as_micros() + w.per.as_micros() * (periods - 1);
            periods.max(starts.div_ceil(every_us))
        }
        // a tick takes what was freed since the last one, the window's
        // budget at most
        None => periods.max((after_now * w.per.as_micros()).div_ceil(budget * every_us)),
    };
    mul(every, ticks)
}

/// Inputs per hour the slowest window allows in the long run (`None`: no
/// pool limits the job, or one never admits an input).
pub fn inputs_per_hour(pools: &[PoolNow]) -> Option<f64> {
    pools
        .iter()
        .filter(|p| p.per_input > 0)
        .flat_map(|p| {
            p.windows.iter().map(move |w| {
                w.budget as f64 / p.per_input as f64 * 3600.0 / w.per.as_secs_f64().max(1e-6)
            })
        })
        .reduce(f64::min)
}

fn mul(d: Duration, n: u128) -> Duration {
    let micros = d.as_micros().saturating_mul(n);
    Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Duration = Duration::from_secs(3600);
    const DAY: Duration = Duration::from_secs(86_400);

    fn sliding(budget: u64, per: Duration, remaining: u64) -> WindowNow {
        WindowNow {
            budget,
            per,
            remaining,
            resets_in: None,
        }
    }

    #[test]
    fn what_fits_now_takes_no_time() {
        let pools = [PoolNow {
            per_input: 2,
            windows: vec![sliding(100, H, 60)],
        }];
        assert_eq!(time_to_finish(30, &pools), Some(Duration::ZERO));
        assert_eq!(time_to_finish(0, &pools), Some(Duration::ZERO));
    }

    #[test]
    fn a_sliding_window_frees_its_budget_over_its_length() {
        // 1,000 inputs at 2 units, 100 a hour, 60 left now: 1,940 units
        // after now, 19.4 hours.
        let pools = [PoolNow {
            per_input: 2,
            windows: vec![sliding(100, H, 60)],
        }];
        assert_eq!(
            time_to_finish(1000, &pools),
            Some(Duration::from_secs(69_840))
        );
        assert_eq!(inputs_per_hour(&pools), Some(50.0));
    }

    #[test]
    fn the_slowest_window_of_every_pool_decides() {
        let pools = [
            PoolNow {
                per_input: 1,
                windows: vec![sliding(10_000, DAY, 0), sliding(1_000, H, 0)],
            },
            PoolNow {
                per_input: 5,
                windows: vec![sliding(1_000, H, 0)],
            },
        ];
        // 10,000 inputs: the day window takes a day; the 5-unit pool takes
        // 50 hours.
        assert_eq!(
            time_to_finish(10_000, &pools),
            Some(Duration::from_secs(50 * 3600))
        );
        assert_eq!(inputs_per_hour(&pools), Some(200.0));
    }

    #[test]
    fn a_calendar_window_counts_whole_periods_from_its_next_start() {
        let w = WindowNow {
            budget: 100,
            per: DAY,
            remaining: 10,
            resets_in: Some(Duration::from_secs(3600)),
        };
        let pools = [PoolNow {
            per_input: 1,
            windows: vec![w],
        }];
        assert_eq!(time_to_finish(10, &pools), Some(Duration::ZERO));
        // 90 after now: all at the next start, in an hour
        assert_eq!(time_to_finish(100, &pools), Some(H));
        // 250 after now: the next start and two more days
        assert_eq!(time_to_finish(260, &pools), Some(H + 2 * DAY));
    }

    const MIN: Duration = Duration::from_secs(60);

    fn runs(max_wait: Duration, every: Option<Duration>) -> Runs {
        Runs { max_wait, every }
    }

    #[test]
    fn a_run_that_stops_leaves_what_frees_up_to_the_next_tick() {
        // 100 inputs, 10 a minute, 10 left now: 9 minutes at the pace.
        let pools = [PoolNow {
            per_input: 1,
            windows: vec![sliding(10, MIN, 10)],
        }];
        let at = |r| finish(100, &pools, r).map(|f| (f.time.as_secs(), f.windows, f.waited));
        assert_eq!(at(Runs::default()), Some((540, 1, 0)));
        // every 10 minutes, a run does 10 and stops: 9 more ticks
        let ticks = Some(10 * MIN);
        assert_eq!(at(runs(Duration::ZERO, ticks)), Some((5400, 1, 0)));
        // a wait shorter than the window's: the same
        assert_eq!(
            at(runs(30 * Duration::from_secs(1), ticks)),
            Some((5400, 1, 0))
        );
        // waits up to the window's length: the run goes at the pace
        assert_eq!(at(runs(MIN, ticks)), Some((540, 1, 1)));
        assert_eq!(at(runs(10 * MIN, ticks)), Some((540, 1, 1)));
    }

    #[test]
    fn ticks_shorter_than_the_window_take_what_it_freed_since_the_last() {
        // 130 at 100 an hour: 78 minutes at the pace, the 8th tick of 10.
        let pools = [PoolNow {
            per_input: 1,
            windows: vec![sliding(100, H, 0)],
        }];
        let stops = runs(Duration::ZERO, Some(10 * MIN));
        assert_eq!(time_to_finish(130, &pools), Some(78 * MIN));
        assert_eq!(finish(130, &pools, stops).unwrap().time, 80 * MIN);
        // what fits now takes no tick
        assert_eq!(finish(0, &pools, stops).unwrap().time, Duration::ZERO);
    }

    #[test]
    fn a_calendar_window_is_spent_at_the_first_tick_of_each_period() {
        // 100 a day, 10 left, the next day in an hour; 260 inputs: the
        // third period starts in 49 hours, its first tick of 6 hours at 54.
        let w = WindowNow {
            budget: 100,
            per: DAY,
            remaining: 10,
            resets_in: Some(H),
        };
        let pools = [PoolNow {
            per_input: 1,
            windows: vec![w],
        }];
        let every = Some(6 * H);
        assert_eq!(
            finish(260, &pools, runs(Duration::ZERO, every))
                .unwrap()
                .time,
            54 * H
        );
        assert_eq!(finish(260, &pools, runs(DAY, every)).unwrap().time, 49 * H);
        // one start away: a wait of an hour reaches it
        assert_eq!(finish(100, &pools, runs(H, every)).unwrap().time, H);
        assert_eq!(
            finish(100, &pools, runs(Duration::ZERO, every))
                .unwrap()
                .time,
            6 * H
        );
        // ticks longer than the period: one period a tick
        assert_eq!(
            finish(260, &pools, runs(Duration::ZERO, Some(2 * DAY)))
                .unwrap()
                .time,
            6 * DAY
        );
    }

    #[test]
    fn a_wait_goes_through_the_windows_it_covers_and_stops_at_the_others() {
        // 10 a minute and 200 a day, 10 and 200 left; every 10 minutes with
        // waits up to 10: the minute window at its pace (9 minutes), the
        // day stops the run, its 300 more freed evenly at 200 a day by the
        // tick at 36 hours.
        let pools = [PoolNow {
            per_input: 1,
            windows: vec![sliding(10, MIN, 10), sliding(200, DAY, 200)],
        }];
        let f = finish(500, &pools, runs(10 * MIN, Some(10 * MIN))).unwrap();
        assert_eq!((f.time, f.windows, f.waited), (36 * H, 2, 1));
        let f = finish(100, &pools, runs(10 * MIN, Some(10 * MIN))).unwrap();
        assert_eq!((f.time, f.windows, f.waited), (9 * MIN, 1, 1));
    }

    #[test]
    fn an_input_no_window_can_hold_is_never_done() {
        let pools = [PoolNow {
            per_input: 200,
            windows: vec![sliding(100, H, 100)],
        }];
        assert_eq!(time_to_finish(1, &pools), None);
        let empty = [PoolNow {
            per_input: 1,
            windows: vec![sliding(0, H, 0)],
        }];
        assert_eq!(time_to_finish(1, &empty), None);
    }
}
