//! [`ProgressLine`]: a run on a terminal, its one line of progress and,
//! for a job of inputs, when the rest will be done at the budgets' pace,
//! read from the store now and then. Apart from the loop, which only
//! hands it the report and the round as they are.

use std::cell::Cell;
use std::time::{Duration, Instant};

use super::round::Round;
use crate::config::{Credential, Job};
use crate::inputs::pace;
use crate::ledger::{At, Ledger, Store};
use crate::runner::JobReport;
use crate::runner::job_state::RunWaiting;
use crate::runner::progress;

/// How often a run on a terminal reads the budgets' pace from the store.
const PACE_EVERY: Duration = Duration::from_secs(10);

/// A run's progress line (drawn only on a terminal: none under cron or
/// systemd, where stderr is a file or the journal).
pub(super) struct ProgressLine<'a> {
    /// Whether stderr is a terminal and the line is wanted.
    on: bool,
    job: &'a Job,
    cred: &'a Credential,
    /// How long a refusal is waited out inside the run (`max_wait`, `run
    /// --wait`): the rest's time counts ticks for what it is not.
    max_wait: Duration,
    /// When the budgets' pace was last read from the store.
    read: Cell<Option<Instant>>,
    /// What it said: when a job of inputs' rest will be done (`None`
    /// inside: never; `None`: not read yet).
    finish: Cell<Option<Option<Duration>>>,
}

impl<'a> ProgressLine<'a> {
    pub(super) fn new(on: bool, job: &'a Job, cred: &'a Credential, max_wait: Duration) -> Self {
        Self {
            on,
            job,
            cred,
            max_wait,
            read: Cell::new(None),
            finish: Cell::new(None),
        }
    }

    /// Read when `left` inputs will be done at the budgets' pace, at most
    /// once per [`PACE_EVERY`] (a read of the credential's windows in the
    /// store, as `status` makes): shown at the next page. None without a
    /// store (the run is unmetered). Inputs in flight, whose units are
    /// spent, still count as left: at most `concurrency` more than the
    /// rest, an estimate on the safe side.
    pub(super) async fn read_pace(&self, store: Option<&Store>, left: u64) {
        if (self.read.get()).is_some_and(|t| t.elapsed() < PACE_EVERY) {
            return;
        }
        let Some(store) = store else {
            return;
        };
        self.read.set(Some(Instant::now()));
        let usage = store
            .usage(&self.cred.name, &self.cred.pools, At::StoreClock)
            .await;
        // (a failed read keeps the last time known; tried again later)
        if let Ok(usage) = usage {
            // (in requests: a batch's carries several inputs)
            let per_request = self.job.inputs.as_ref().and_then(|i| i.batch).unwrap_or(1);
            let requests = left.div_ceil(per_request.max(1) as u64);
            let runs = pace::Runs {
                max_wait: self.max_wait,
                every: self.job.schedule,
            };
            let pools = pace::pools_now(self.job, &usage);
            let finish = pace::finish(requests, &pools, runs).map(|f| f.time);
            self.finish.set(Some(finish));
        }
    }

    /// On a terminal, one line that says how far the run is; the inputs
    /// left for a job of inputs.
    pub(super) fn draw(&self, r: &JobReport, round: &mut Round) -> Option<u64> {
        if !self.on {
            return None;
        }
        let units: Vec<String> = r.units.iter().map(|(p, u)| format!("{p} {u}")).collect();
        if let Some(inputs) = &self.job.inputs {
            let at = &round.window_mut()?.at;
            let (done, offset, line) = (at.done + at.skipped, at.offset, at.line);
            // Every item from the first input not done, the front of the
            // window too: read once, on a terminal only.
            let total = || {
                let from = crate::inputs::RecordStart { offset, line };
                let items = crate::inputs::Reader::open(inputs, from)
                    .map(|r| r.map_while(|i| i.ok()).count() as u64);
                done + items.unwrap_or(0)
            };
            let pace = self.finish.get();
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

    /// The line while the run waits for units inside itself.
    pub(super) fn waiting(&self, job: &str, w: &RunWaiting) {
        if !self.on {
            return;
        }
        let until = chrono::DateTime::from_timestamp_micros(w.until)
            .map(|t| crate::timefmt::clock_time(&t.with_timezone(&chrono::Local), true))
            .unwrap_or_default();
        match w.pool.as_str() {
            "" => eprint!("\r\x1b[2K{job}: waiting until {until} ({})", w.why),
            pool => eprint!(
                "\r\x1b[2K{job}: waiting for {} units of pool {pool} until {until}",
                w.units
            ),
        }
    }

    /// The line cleared at the run's end (`pages`: written by it).
    pub(super) fn clear(&self, pages: u64) {
        if progress::clear(&self.job.name) {
            return;
        }
        if self.on && pages > 0 {
            eprint!("\r\x1b[2K");
        }
    }
}
