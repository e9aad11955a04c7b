//! When a once-job's list will be done, at the pace its credential's
//! windows allow: the operator's "end in sight" (`status`, `run --dry-run`,
//! the progress bar). An estimate, said as one: it assumes the job has the
//! credential to itself from now on, each input costs what the
//! configuration says (a settled cost at its estimate), and a sliding
//! window frees its budget evenly over its length.

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

/// How long until `left` inputs are done: the slowest window of any pool
/// decides. `None`: never (a window with no budget, or an input that
/// costs more than a window's budget).
pub fn time_to_finish(left: u64, pools: &[PoolNow]) -> Option<Duration> {
    let mut longest = Duration::ZERO;
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
            let t = match w.resets_in {
                // whole periods after the next start, the last one partly
                Some(reset) => {
                    let periods = after_now.div_ceil(budget) - 1;
                    reset.saturating_add(mul(w.per, periods))
                }
                None => {
                    let micros = after_now * w.per.as_micros() / budget;
                    Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX))
                }
            };
            longest = longest.max(t);
        }
    }
    Some(longest)
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
