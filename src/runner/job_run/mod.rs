//! [`JobRun`]: one run of a job in progress, and its loop: every key once
//! (a region, or an input of the file), from the cursor on, wrapping
//! around; per page, charge → call → write → save the cursor (one request:
//! `request.rs`). Up to `concurrency` keys, and batches of a fan-out, are
//! in flight side by side on this one task (`keys.rs`, `fan_out.rs`),
//! within one limit ([`JobRun::permit`]), so the state they share lives in
//! cells, never borrowed across an await.
//!
//! The loop holds owned parts and hands them what they need; each is
//! tested on its own, without a run:
//!
//! - [`Meter`]: the charges, settles and blocks in the ledger;
//! - [`inputs::Feed`]: where a job of inputs' keys come from, its place and
//!   its breakers; [`round::Round`]: where each key of the round is;
//! - [`crate::runner::job_state::JobState`]: every map the job keeps in the
//!   store; [`conditional::Conditional`]: its validators and incremental
//!   values; [`lists::ValueLists`]: a fan-out's values on their way;
//! - [`crate::sink::Outputs`]: where results go (`outputs.rs` opens them);
//! - [`refusals::Refusals`]: a job of regions' breakers;
//!   [`terminal::ProgressLine`]: the line on a terminal.

use std::cell::RefCell;

use tracing::{debug, warn};

use self::round::Round;
use super::cursor::{Cursor, Place, cursor_text, read_cursor};
use super::lock::RunLock;
use super::meter::Meter;
use super::{JobReport, RunContext, Stop};
use crate::config::{Credential, Fill, InputFields, Job, StorePolicy};
use crate::error::FailClosed;
use crate::ledger::{JobStore, LockOutcome, Store, StoreError};
use crate::page_scan::Found;
use crate::{Error, Result};

mod batches;
mod conditional;
mod fan_out;
mod found;
mod inputs;
mod keys;
mod lists;
mod outputs;
mod refusals;
mod request;
mod round;
mod saving;
mod terminal;
mod waiting;
mod walk;

pub(crate) use self::inputs::{check_file, kept_chunks, needs_check, unrecorded};

/// The state of one run in progress.
pub(super) struct JobRun<'a> {
    ctx: &'a RunContext<'a>,
    job: &'a Job,
    cred: &'a Credential,
    report: RefCell<JobReport>,
    /// The store, the charges, settles and blocks.
    meter: Meter<'a>,
    /// The run lock, while this run holds it.
    lock: Option<RunLock>,
    /// Where each region of the round is: what the cursor says.
    round: RefCell<Round>,
    /// A job of inputs: its file, read as the round needs more.
    feed: RefCell<Option<inputs::Feed>>,
    /// One cursor write at a time, each the newest: the version of the
    /// round last written.
    saving: tokio::sync::Mutex<u64>,
    /// The run's requests in flight, `concurrency` at most: one place per
    /// page or batch, whichever region or fan-out it belongs to.
    permits: tokio::sync::Semaphore,
    /// The breakers of a job of regions: first pages and batches refused.
    refusals: refusals::Refusals,
    /// On a terminal: the run's line of progress.
    progress: terminal::ProgressLine<'a>,
    /// Where the job's results go (written on blocking threads, a page
    /// at a time), open from the start of the round.
    outputs: crate::sink::Outputs,
    /// A job whose inputs go in batches: the slots of each batch in
    /// flight, by its first slot (the one its walk saves).
    input_batches: RefCell<std::collections::HashMap<usize, Vec<usize>>>,
    /// The validators and incremental values the store keeps for the job.
    conditional: conditional::Conditional<'a>,
    /// A fan-out's values on their way, and those lost.
    lists: lists::ValueLists<'a>,
    /// Requests waiting for refused units inside the run, one at a time.
    waiting: waiting::Waiting,
}

/// One region's walk in progress: what its pages found for a fan-out step
/// after them (each region its own, as regions run side by side).
struct Walker {
    /// The values the step being walked finds for the next, a fan-out.
    found: found::FoundValues,
    /// The values a fan-out step about to start has to send.
    pending: Option<batches::Values>,
}

/// A page as the upstream answered it.
struct PageAnswer {
    body: Vec<u8>,
    /// What it holds at the pagination's pointer.
    found: Option<Found>,
    /// Its `Link` header.
    link: Option<String>,
    /// Its `ETag` and `Last-Modified`.
    fresh: (Option<String>, Option<String>),
}

/// Where a walk is: its key (and its place in the round, and an input's
/// fields), step and run.
struct Position<'r> {
    key: &'r str,
    input: Option<&'r InputFields>,
    /// A batch of inputs: their keys, joined (`{batch}` outside a fan-out
    /// step).
    batch: Option<&'r str>,
    slot: usize,
    step: usize,
    run: u64,
}

impl Position<'_> {
    /// Where this walk is, as a message names it: `input K` in a job of
    /// inputs, `region K` otherwise, then the step and page.
    fn describe(&self, page: u32) -> String {
        match (self.key, self.input.is_some() || self.batch.is_some()) {
            ("", _) => format!("step {} page {page}", self.step),
            (key, true) => format!("input {key} step {} page {page}", self.step),
            (key, false) => format!("region {key} step {} page {page}", self.step),
        }
    }

    /// The placeholders' values for a request of the step at `at`.
    fn fill<'f>(
        &'f self,
        cred: &'f Credential,
        job: &'f Job,
        page: u32,
        batch: &'f str,
    ) -> Fill<'f> {
        Fill {
            region: self.key,
            secret: &cred.secret,
            job: &job.name,
            step: self.step,
            page,
            // (a fan-out step's own values, else a batch of inputs')
            batch: if batch.is_empty() {
                self.batch.unwrap_or_default()
            } else {
                batch
            },
            input: self.input,
        }
    }

    /// A cursor of this walk's run and region, at `place`.
    fn cursor(&self, place: Place) -> Cursor {
        Cursor {
            run: self.run,
            key: self.key.to_string(),
            place,
            ahead: Vec::new(),
            input: None,
        }
    }
}

/// How one step's walk of one region ended.
enum Walk {
    Done,
    /// The run stopped cleanly (the cursor points at the page in hand).
    Stopped,
    /// A next page elsewhere was refused: the region ends with an error.
    Refused,
}

impl<'a> JobRun<'a> {
    pub(super) fn new(ctx: &'a RunContext<'a>, job: &'a Job) -> Self {
        let cred = ctx.config.credential(job);
        let waiting = waiting::Waiting::new(ctx.wait.unwrap_or(job.max_wait));
        Self {
            ctx,
            job,
            cred,
            report: RefCell::new(JobReport {
                job: job.name.clone(),
                units: job
                    .steps
                    .iter()
                    .flat_map(|s| s.cost.iter().map(|c| (c.pool.name.clone(), 0)))
                    .collect(),
                // (a job of inputs counts them as it reads them)
                regions_total: match job.inputs {
                    Some(_) => 0,
                    None => job.regions.len().max(1),
                },
                page_files: job.output.is_some(),
                rows: (job.sqlite.as_ref().map(|s| s.table.clone()))
                    .or_else(|| job.postgres.as_ref().map(|p| p.table_name()))
                    .map(|table| crate::runner::report::RowCounts {
                        table,
                        ..Default::default()
                    }),
                // (each sink of rows counted from 0, said even when nothing came)
                upserted: [
                    ("sqlite", job.sqlite.is_some()),
                    ("postgres", job.postgres.is_some()),
                ]
                .into_iter()
                .filter_map(|(sink, writes)| writes.then_some((sink, 0)))
                .collect(),
                ..JobReport::default()
            }),
            meter: Meter::new(
                ctx.config.credential(job),
                &job.name,
                &ctx.store_id,
                ctx.history,
                &ctx.config.file,
            ),
            lock: None,
            round: RefCell::new(Round::default()),
            feed: RefCell::new(None),
            saving: tokio::sync::Mutex::new(0),
            permits: tokio::sync::Semaphore::new(job.concurrency.max(1)),
            refusals: refusals::Refusals::default(),
            progress: terminal::ProgressLine::new(ctx.progress, job, cred, waiting.bound()),
            outputs: crate::sink::Outputs::default(),
            input_batches: RefCell::default(),
            conditional: conditional::Conditional::new(job, &cred.secret),
            lists: lists::ValueLists::new(job, cred),
            waiting,
        }
    }

    /// On a terminal, as an input is over: the progress line, and for a
    /// job of inputs when the rest will be done at the budgets' pace.
    async fn progress(&self) {
        let left = (self.progress).draw(&self.report.borrow(), &mut self.round.borrow_mut());
        if let Some(left) = left {
            self.progress.read_pace(self.meter.store(), left).await;
        }
    }

    /// The job's maps in the store (none: the run has no store).
    fn state(&self) -> Option<crate::runner::job_state::JobState<'_>> {
        (self.meter.store()).map(|s| crate::runner::job_state::JobState::new(s, &self.job.name))
    }

    /// A place for one request among the run's `concurrency` in flight:
    /// held from its charge until its page is written and the cursor says
    /// so, so that a kill redoes at most `concurrency` pages.
    async fn permit(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.permits
            .acquire()
            .await
            .expect("the run's semaphore is never closed")
    }

    pub(super) fn hold(&mut self, store: &'a Store, lock: RunLock) {
        self.meter.hold(store);
        self.lock = Some(lock);
    }

    /// Another run holds the lock: this one stops before it starts, and
    /// says where the job is as its cursor in `store` says (read without
    /// the lock: the holder may move it; a job of inputs without one is at
    /// its first line), in the job's own words (inputs, or regions).
    pub(super) async fn busy(self, store: &Store, busy: LockOutcome) -> JobReport {
        if let LockOutcome::Busy { holder, expires_in } = busy {
            self.report
                .borrow_mut()
                .stop_with(Stop::LockBusy { holder, expires_in });
        }
        let stored = (store.load_cursor(&self.job.name).await.ok().flatten())
            .and_then(|t| read_cursor(&t, &self.cred.secret));
        let first_line = || Cursor {
            input: Some(crate::runner::cursor::InputAt {
                line: 1,
                ..Default::default()
            }),
            ..Cursor::default()
        };
        let resume = stored.or_else(|| self.job.inputs.as_ref().map(|_| first_line()));
        let mut report = self.report.into_inner();
        report.resume = resume;
        report
    }

    /// After the region loop: clear the progress line, update the history,
    /// give the lock back.
    pub(super) async fn finish(mut self, served: Result<()>) -> Result<JobReport> {
        self.progress.clear(self.report.get_mut().pages);
        if let Some((commits, pages)) = self.outputs.commits() {
            debug!(
                job = self.job.name,
                "{pages} page(s)' rows committed in {commits} transaction(s)"
            );
        }
        if let Some(feed) = self.feed.get_mut().as_mut() {
            feed.say_skip_totals(&self.job.name);
        }
        self.meter.check_history();
        let (calls, saved) = {
            let r = self.report.borrow();
            (r.not_modified, r.units_saved.clone())
        };
        let store = self.meter.store();
        if let Err(e) = self
            .conditional
            .count_not_modified(store, calls, saved)
            .await
        {
            warn!(
                job = self.job.name,
                "cannot add this run's calls answered 304 to the counts `status` shows: {e}"
            );
        }
        if let Some(lock) = self.lock.take() {
            lock.release().await;
        }
        let lost = self.lists.lost();
        served.map(|()| {
            let mut report = self.report.into_inner();
            report.values_lost += lost;
            report
        })
    }

    pub(super) fn store_unreachable_at_start(&mut self, why: &str) -> Result<()> {
        let closed: Vec<&str> = self
            .job
            .steps
            .iter()
            .filter(|s| s.on_store_error == StorePolicy::FailClosed)
            .map(|s| s.endpoint.as_str())
            .collect();
        if let Some(endpoint) = closed.first() {
            return Err(Error::StoreUnavailable {
                store: self.ctx.store_id.clone(),
                reason: why.to_string(),
                fail_closed: Some(FailClosed {
                    job: self.job.name.clone(),
                    endpoint: endpoint.to_string(),
                    at_start: true,
                }),
            });
        }
        self.meter.go_unmetered(why);
        Ok(())
    }

    /// The job's cursor as the store keeps it (none: from the start; the
    /// store unreachable: as the job's policy says).
    async fn load_cursor(&mut self) -> Result<Cursor> {
        let Some(store) = self.meter.store() else {
            return Ok(Cursor::default());
        };
        match store.load_cursor(&self.job.name).await {
            Ok(text) => Ok(text
                .as_deref()
                .and_then(|t| read_cursor(t, &self.cred.secret))
                .unwrap_or_default()),
            Err(StoreError::Unavailable(e)) => {
                self.store_unreachable_at_start(&e)?;
                Ok(Cursor::default())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Serve every key once, from the cursor on, wrapping around.
    pub(super) async fn serve_keys(&mut self) -> Result<()> {
        let job = self.job;
        let mut cursor = self.load_cursor().await?;
        self.conditional.load(self.meter.store()).await;
        self.load_lists(&mut cursor).await?;
        let config = &self.ctx.config.file;
        let locked = self.lock.as_ref().is_some_and(|l| !l.is_lost());
        let (outputs, highest_run) = outputs::open(job, config, locked, cursor.run).await?;
        self.outputs = outputs;
        (self.conditional)
            .forget_replaced_output(self.meter.store(), config, &self.outputs)
            .await;
        // A page is never replaced: a run is numbered after every run whose
        // pages are in the folder, even when the store lost the cursor.
        let Some(run_number) = cursor.run.max(highest_run).checked_add(1) else {
            // (a stray file named as a page of the last run there can be)
            return Err(Error::Io {
                what: "number this run's pages in",
                path: job.output.clone().unwrap_or_default(),
                source: std::io::Error::other(format!(
                    "a page there is of run {highest_run}, the last run number there can be: move it away"
                )),
            });
        };
        let round = match &job.inputs {
            Some(inputs) => {
                self.inputs_round(inputs, &cursor, run_number, highest_run)
                    .await?
            }
            None => Round::of_regions(job, &cursor, run_number),
        };
        let resume = Cursor {
            run: cursor.run,
            ..cursor_text(&round.cursor(), &self.cred.secret).0
        };
        self.report.get_mut().resume = Some(resume);
        let changed = round.version() > 0;
        *self.round.get_mut() = round;
        if changed {
            let version = self.round.get_mut().version();
            self.write_cursor(version).await;
        }
        self.serve_round(run_number).await
    }
}

/// A walk's position as messages name it (a key is a "region" there).
fn describe_position(key: &str, step: usize, page: u32) -> String {
    if key.is_empty() {
        format!("step {step} page {page}")
    } else {
        format!("region {key} step {step} page {page}")
    }
}
