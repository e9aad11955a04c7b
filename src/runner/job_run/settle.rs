//! [`JobRun`]'s settling: after each answer, the costs a step reserved as
//! estimates are settled to what the response says was spent (issue 13,
//! part 1), or keep their estimates, and the run says why; and the
//! upstream's own counts, where they are lower than the ledger's, are
//! recorded as spent by others (part 2).

use tracing::{debug, info, warn};

use super::JobRun;
use crate::config::Step;
use crate::ledger::{At, BlockEnd, Ledger, Receipt, Remaining, Settled};
use crate::runner::quota_headers::upstream_counts;
use crate::runner::settle::Actual;
use crate::runner::upstream::Reported;
use crate::timefmt::local_datetime;

impl JobRun<'_> {
    /// Settle the step's estimated costs of the call `receipt` names to the
    /// `actuals` its response gave (none: no response came).
    pub(super) async fn settle(&self, step: &Step, receipt: &Receipt, actuals: &[Actual]) {
        let Some(store) = self.store else { return };
        for (k, spec) in step.settle.iter().enumerate() {
            let actual = match actuals.get(k) {
                Some(Actual::Units(n)) => *n,
                unknown => {
                    let why = match unknown {
                        Some(Actual::Unreadable(why)) => why.as_str(),
                        _ => "no response came",
                    };
                    self.keep_estimate(step, &spec.pool, spec.estimate, why);
                    // (settled at the estimate: no longer reserved, as
                    // `status` shows those whose settle never came)
                    let cost = (spec.pool.as_str(), spec.estimate, spec.estimate);
                    let _ = store
                        .settle(&self.cred.name, receipt, cost, At::StoreClock)
                        .await;
                    continue;
                }
            };
            let cost = (spec.pool.as_str(), spec.estimate, actual);
            let settled = store
                .settle(&self.cred.name, receipt, cost, At::StoreClock)
                .await;
            let spent = match settled {
                Ok(Settled::Exact) => {
                    debug!(
                        job = self.job.name,
                        "{}: {} settled from {} to {actual}",
                        step.endpoint,
                        spec.pool,
                        spec.estimate
                    );
                    actual
                }
                Ok(Settled::Late) => {
                    warn!(
                        job = self.job.name,
                        "{}: {} spent {actual} against an estimate of {}, settled late (thousands of calls charged since): {}",
                        step.endpoint,
                        spec.pool,
                        spec.estimate,
                        if actual > spec.estimate {
                            "the excess counts from the newest call"
                        } else {
                            "the estimate stays charged"
                        }
                    );
                    actual.max(spec.estimate)
                }
                Ok(Settled::Gone) => {
                    let why = "its charge is no longer in the log (lost, or past the retention)";
                    self.keep_estimate(step, &spec.pool, spec.estimate, why);
                    continue;
                }
                Err(e) => {
                    let why = format!("the store did not take the settle: {e}");
                    self.keep_estimate(step, &spec.pool, spec.estimate, &why);
                    continue;
                }
            };
            let mut report = self.report.borrow_mut();
            let units = report.units.entry(spec.pool.clone()).or_default();
            *units = (*units + spent).saturating_sub(spec.estimate);
        }
    }

    /// Every settled cost of `step` keeps its estimate, for `why`.
    pub(super) fn keep_estimates(&self, step: &Step, why: &str) {
        for spec in &step.settle {
            self.keep_estimate(step, &spec.pool, spec.estimate, why);
        }
    }

    fn keep_estimate(&self, step: &Step, pool: &str, estimate: u64, why: &str) {
        self.report.borrow_mut().estimates_kept += 1;
        warn!(
            job = self.job.name,
            "{}: {why}: the estimate of {estimate} {pool} stays charged", step.endpoint
        );
    }
}

impl JobRun<'_> {
    /// The upstream's own counts in a response (`upstream_headers`): where
    /// one says fewer units remain than the ledger's own count left after
    /// this call (`remaining`, with the window's headroom), the difference
    /// is recorded as spent by others, until the upstream's reset, so
    /// every host slows down. A count at or above the ledger's costs no
    /// store call, except in a pool whose cost `step` settles (the charge's
    /// `remaining` was counted at the estimate, the store counts the actual)
    /// or where the ledger counts others' units (the store clears them).
    pub(super) async fn upstream_counts(
        &self,
        step: &Step,
        reported: &Reported,
        remaining: &[Remaining],
    ) {
        let (Some(store), Some(headers)) = (self.store, &reported.headers) else {
            return;
        };
        for count in upstream_counts(&self.cred.upstream_headers, headers) {
            let Some(pool) = self.cred.pools.iter().find(|p| p.name == count.pool) else {
                continue;
            };
            let Some(w) = pool.longest_window() else {
                continue;
            };
            if count.limit.is_some_and(|l| l != w.limit) {
                debug!(
                    job = self.job.name,
                    "the upstream's count of {} is of another limit than the {} window's: not applied",
                    pool.name,
                    crate::timefmt::fmt_duration(w.per)
                );
                continue;
            }
            // (a count at or above the ledger's costs no store call, unless
            // the ledger counts others' units: then it may clear them)
            let ours = remaining
                .iter()
                .find(|r| r.pool == pool.name && r.per == w.per)
                .filter(|r| r.others == 0)
                .map(|r| r.remaining + w.headroom);
            let settled = step.settle.iter().any(|s| s.pool == pool.name);
            if !settled && ours.is_some_and(|ours| count.remaining >= ours) {
                continue;
            }
            // (the upstream's count resets within the window it counts: a
            // later reset, a century or an overflow, is capped there, so
            // that no answer holds the pool past its longest window)
            let reset = count.reset.map(|r| BlockEnd::After(r.min(w.per)));
            let recorded = store
                .upstream_remaining(
                    &self.cred.name,
                    pool,
                    count.remaining,
                    reset,
                    At::StoreClock,
                )
                .await;
            match recorded {
                Ok(o) if o.units > 0 => info!(
                    job = self.job.name,
                    "the upstream counts {} {} remaining of {}: {} spent elsewhere, counted until {}",
                    count.remaining,
                    pool.name,
                    w.limit,
                    o.units,
                    local_datetime(o.until)
                ),
                Ok(_) => {}
                Err(e) => warn!(
                    job = self.job.name,
                    "the upstream's count of {} was not recorded: {e}", pool.name
                ),
            }
        }
    }
}
