//! [`JobRun`]'s settling: after each answer, the costs a step reserved as
//! estimates are settled to what the response says was spent (issue 13,
//! part 1), or keep their estimates, and the run says why.

use tracing::{debug, warn};

use super::JobRun;
use crate::config::Step;
use crate::ledger::{At, Ledger, Receipt, Settled};
use crate::runner::settle::Actual;

impl JobRun<'_> {
    /// Settle the step's estimated costs of the call `receipt` names to the
    /// `actuals` its response gave (none: no response came).
    pub(super) async fn settle(&self, step: &Step, receipt: &Receipt, actuals: &[Actual]) {
        let Some(store) = self.store else { return };
        for (k, spec) in step.settle.iter().enumerate() {
            let actual = match actuals.get(k) {
                Some(Actual::Units(n)) => *n,
                Some(Actual::Unreadable(why)) => {
                    self.keep_estimate(step, &spec.pool, spec.estimate, why);
                    continue;
                }
                None => {
                    self.keep_estimate(step, &spec.pool, spec.estimate, "no response came");
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
