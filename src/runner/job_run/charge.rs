//! [`JobRun`]'s side of metering: the [`Meter`](crate::runner::meter)
//! charges, settles and blocks; the run counts what it charged and
//! settled in its report, and stops where the meter says so.

use std::time::Duration;

use tracing::warn;

use super::JobRun;
use crate::Result;
use crate::config::Step;
use crate::ledger::{Micros, Receipt};
use crate::runner::Stop;
use crate::runner::meter::Charged;
use crate::timefmt::local_datetime;
use crate::upstream::settle::Actual;

impl JobRun<'_> {
    /// Charge one attempt of `step` before it is sent, counted.
    pub(super) async fn charge<'s>(&self, step: &'s Step) -> Result<Charged<'s>> {
        let charged = self.meter.charge(step).await?;
        let mut report = self.report.borrow_mut();
        match &charged {
            Charged::Go {
                charged, observed, ..
            } => {
                for c in *charged {
                    *report.units.entry(c.pool.name.clone()).or_default() += c.units;
                }
                report.observed_rejections += u64::from(*observed);
            }
            Charged::Unmetered => report.unmetered += 1,
            Charged::Stop(_) => {}
        }
        Ok(charged)
    }

    /// Settle the step's estimated costs of the call `receipt` names to the
    /// `actuals` its response gave: each pool's units now count what was
    /// spent in place of the estimate.
    pub(super) async fn settle(&self, step: &Step, receipt: &Receipt, actuals: &[Actual]) {
        let settled = self.meter.settle(step, receipt, actuals).await;
        let mut report = self.report.borrow_mut();
        report.estimates_kept += settled.kept;
        for (pool, estimate, spent) in settled.spent {
            let units = report.units.entry(pool.to_string()).or_default();
            *units = (*units + spent).saturating_sub(estimate);
        }
    }

    /// A call answered 304: each pool's charge settled to the endpoint's
    /// `not_modified` units, through the same settle as any actual (the
    /// same log entry; a window's budget frees at once); counted.
    pub(super) async fn settle_not_modified(&self, step: &Step, receipt: &Receipt, units: u64) {
        let settled = self.meter.settle_to(step, receipt, units).await;
        let mut report = self.report.borrow_mut();
        for (pool, cost, spent) in settled.spent {
            let given_back = cost.saturating_sub(spent);
            let charged = report.units.entry(pool.to_string()).or_default();
            *charged = charged.saturating_sub(given_back);
            *report.units_saved.entry(pool.to_string()).or_default() += given_back;
        }
    }

    /// Every settled cost of `step` keeps its estimate, for `why`.
    pub(super) fn keep_estimates(&self, step: &Step, why: &str) {
        let kept = self.meter.keep_estimates(step, why);
        self.report.borrow_mut().estimates_kept += kept;
    }

    /// The upstream said its own quota is spent: block the credential in
    /// the store (so every host stops) until it is back, and stop the run.
    pub(super) async fn upstream_exhausted(
        &self,
        status: u16,
        reason: String,
        retry_after: Option<Duration>,
        charged_at: Option<Micros>,
    ) {
        let until = self
            .meter
            .block(status, &reason, retry_after, charged_at)
            .await;
        // (after the store's word: a backoff's length is the store's)
        warn!(
            job = self.job.name,
            "upstream answered {status} ({reason}): its own quota is spent; blocking credential {} until {}",
            self.cred.name,
            local_datetime(until)
        );
        self.stop(Stop::UpstreamExhausted { reason, until });
    }
}
