//! A run on a terminal: its progress line and, for a job of inputs, when
//! the rest will be done at the budgets' pace, read from the store now and
//! then.

use super::JobRun;
use crate::inputs::pace;
use crate::ledger::{At, Ledger};
use crate::runner::progress;

/// How often a run on a terminal reads the budgets' pace from the store.
const PACE_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// When a job of inputs' rest will be done at the budgets' pace.
#[derive(Default)]
pub(super) struct Pace {
    /// When last read from the store.
    read: Option<std::time::Instant>,
    /// What it said (`None` inside: never).
    finish: Option<Option<std::time::Duration>>,
}

impl JobRun<'_> {
    /// On a terminal, for a job of inputs as an input is over: the line,
    /// and when the rest will be done at the budgets' pace (inputs in
    /// flight, whose units are spent, still counted as left: at most
    /// `concurrency` more than the rest, an estimate on the safe side).
    pub(super) async fn progress(&self) {
        if let Some(left) = self.draw_progress() {
            self.read_pace(left).await;
        }
    }

    /// Read when `left` inputs will be done at the budgets' pace, at most
    /// once per [`PACE_EVERY`] (a read of the credential's windows in the
    /// store, as `status` makes): shown at the next page. None without a
    /// store (the run is unmetered).
    async fn read_pace(&self, left: u64) {
        let last = self.pace.borrow().read;
        if last.is_some_and(|t| t.elapsed() < PACE_EVERY) {
            return;
        }
        let Some(store) = self.meter.store() else {
            return;
        };
        self.pace.borrow_mut().read = Some(std::time::Instant::now());
        let usage = store
            .usage(&self.cred.name, &self.cred.pools, At::StoreClock)
            .await;
        // (a failed read keeps the last time known; tried again later)
        if let Ok(usage) = usage {
            // (in requests: a batch's carries several inputs)
            let per_request = self.job.inputs.as_ref().and_then(|i| i.batch).unwrap_or(1);
            let requests = left.div_ceil(per_request.max(1) as u64);
            let finish = pace::time_to_finish(requests, &pace::pools_now(self.job, &usage));
            self.pace.borrow_mut().finish = Some(finish);
        }
    }

    /// On a terminal, one line that says how far the run is (none under
    /// cron or systemd, where stderr is a file or the journal); the inputs
    /// left for a job of inputs.
    pub(super) fn draw_progress(&self) -> Option<u64> {
        if !self.ctx.progress {
            return None;
        }
        let r = self.report.borrow();
        let units: Vec<String> = r.units.iter().map(|(p, u)| format!("{p} {u}")).collect();
        if let Some(inputs) = &self.job.inputs {
            let mut round = self.round.borrow_mut();
            let at = &round.window_mut()?.at;
            let (done, offset, line) = (at.done + at.skipped, at.offset, at.line);
            drop(round);
            // Every item from the first input not done, the front of the
            // window too: read once, on a terminal only.
            let total = || {
                let from = crate::inputs::RecordStart { offset, line };
                let items = crate::inputs::Reader::open(inputs, from)
                    .map(|r| r.map_while(|i| i.ok()).count() as u64);
                done + items.unwrap_or(0)
            };
            let pace = self.pace.borrow().finish;
            return Some(progress::inputs(
                &r.job,
                done,
                total,
                pace,
                &units.join(", "),
            ));
        }
        eprint!(
            "\r\x1b[2K{}: regions {}/{}, {} calls, spent {}",
            r.job,
            r.regions_done,
            r.regions_total,
            r.calls,
            units.join(", ")
        );
        None
    }

    pub(super) fn clear_progress(&self) {
        if progress::clear(&self.job.name) {
            return;
        }
        if self.ctx.progress && self.report.borrow().pages > 0 {
            eprint!("\r\x1b[2K");
        }
    }
}
