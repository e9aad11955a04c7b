//! [`JobRun`]: the state of one run of a job in progress, and its loop:
//! every region once, from the cursor on, wrapping around; per page, charge
//! → call → write → save the cursor (one request: `request.rs`). Up to
//! `concurrency` regions, and batches of a fan-out, are in flight side by
//! side on this one task (`keys.rs`, `fan_out.rs`), within one limit
//! ([`JobRun::permit`]), so the state they share lives in cells, never
//! borrowed across an await.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use tracing::{info, warn};

use self::round::Round;
use self::terminal::Pace;
use super::cursor::{Cursor, Place, cursor_text, read_cursor};
use super::lock::RunLock;
use super::meter::Meter;
use super::{JobReport, RunContext, Stop};
use crate::config::{Credential, Fill, InputFields, Job, StorePolicy};
use crate::error::FailClosed;
use crate::ledger::{JobStore, LockOutcome, Store, StoreError};
use crate::page_scan::Found;
use crate::sink::Files;
use crate::{Error, Result};

mod batches;
mod charge;
mod conditional;
mod fan_out;
mod found;
mod inputs;
mod keys;
mod lists;
mod request;
mod round;
mod rows;
mod saving;
mod terminal;
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
    /// Regions in a row whose first page the upstream refused, no page
    /// written since: at [`walk::FIRST_PAGES_REFUSED`] the job stops.
    first_refused: Cell<u32>,
    /// Per region and fan-out step: batches refused in a row, and whether
    /// one was accepted in this run ([`walk::BATCHES_REFUSED`]).
    batches_refused: RefCell<std::collections::HashMap<(String, usize), (u32, bool)>>,
    /// On a terminal, for a job of inputs: when the rest will be done at
    /// the budgets' pace, as last read.
    pace: RefCell<Pace>,
    /// Where the job's results go (written on blocking threads, a page
    /// at a time), open from the start of the round.
    outputs: crate::sink::Outputs,
    /// A job whose inputs go in batches: the slots of each batch in
    /// flight, by its first slot (the one its walk saves).
    input_batches: RefCell<std::collections::HashMap<usize, Vec<usize>>>,
    /// The validators and incremental values the store keeps for the job.
    conditional: conditional::Conditional<'a>,
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
    /// The placeholders' values for a request of the step at `at`.
    fn fill<'f>(&'f self, at: &Position<'f>, page: u32, batch: &'f str) -> Fill<'f> {
        Fill {
            region: at.key,
            secret: &self.cred.secret,
            job: &self.job.name,
            step: at.step,
            page,
            // (a fan-out step's own values, else a batch of inputs')
            batch: if batch.is_empty() {
                at.batch.unwrap_or_default()
            } else {
                batch
            },
            input: at.input,
        }
    }

    pub(super) fn new(ctx: &'a RunContext<'a>, job: &'a Job) -> Self {
        let cred = ctx.config.credential(job);
        Self {
            ctx,
            job,
            cred,
            report: RefCell::new(JobReport {
                job: job.name.clone(),
                stop: None,
                calls: 0,
                unmetered: 0,
                estimates_kept: 0,
                not_modified: 0,
                validators_lost: 0,
                units_saved: BTreeMap::new(),
                observed_rejections: 0,
                units: job
                    .steps
                    .iter()
                    .flat_map(|s| s.cost.iter().map(|c| (c.pool.name.clone(), 0)))
                    .collect(),
                regions_done: 0,
                failed_regions: Vec::new(),
                failed_in: Default::default(),
                failed_inputs: 0,
                unreadable_links: 0,
                walks_cut: 0,
                // (a job of inputs counts them as it reads them)
                regions_total: match job.inputs {
                    Some(_) => 0,
                    None => job.regions.len().max(1),
                },
                pages: 0,
                page_files: job.output.is_some(),
                rows: (job.sqlite.as_ref().map(|s| s.table.clone()))
                    .or_else(|| job.postgres.as_ref().map(|p| p.table_name()))
                    .map(|table| crate::runner::report::RowCounts {
                        table,
                        ..Default::default()
                    }),
                pages_without_items: 0,
                values_lost: 0,
                resume: None,
                walk_ended: None,
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
            first_refused: Cell::new(0),
            batches_refused: RefCell::default(),
            pace: RefCell::default(),
            outputs: crate::sink::Outputs::default(),
            input_batches: RefCell::default(),
            conditional: conditional::Conditional::new(job, &cred.secret),
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

    /// The run holds its lock: it charges in `store`.
    /// `output.sqlite`: `(commits, pages)`, the transactions that wrote
    /// pages' rows so far and the pages they held (what the group commit
    /// saves, logged at the run's end).
    pub(super) fn rows_committed(&self) -> Option<(u64, u64)> {
        self.outputs.commits()
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
            self.stop(Stop::LockBusy { holder, expires_in });
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
        self.clear_progress();
        self.say_skip_totals();
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
        served.map(|()| self.report.into_inner())
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
        if let Some(spec) = &job.sqlite {
            self.open_sink(spec).await?;
        }
        if let Some(spec) = &job.postgres {
            let file = &self.ctx.config.file;
            (self.outputs).push(crate::sink::postgres::open_for_run(file, job, spec).await?);
        }
        if let Some(dir) = &job.output {
            self.prepare_folder(dir, cursor.run)?;
        }
        let config = &self.ctx.config.file;
        (self.conditional)
            .forget_replaced_output(self.meter.store(), config, &self.outputs)
            .await;
        let highest_run = self.highest_run_of_outputs()?;
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
            None => self.round_from(&cursor, run_number),
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

    /// Make the output folder, remove what a killed run left there (only
    /// while this run holds the job's lock: an unmetered run could be
    /// racing a run that has it) and check it takes a file; the folder
    /// joins the job's outputs.
    fn prepare_folder(&mut self, dir: &std::path::Path, cursor_run: u64) -> Result<()> {
        let job = self.job;
        let locked = self.lock.as_ref().is_some_and(|l| !l.is_lost());
        let mode = crate::atomic_file::file_mode().map_err(Error::Usage)?;
        let (files, prepared) =
            Files::open(dir, &job.name, mode, locked).map_err(|source| Error::Io {
                what: "prepare the output folder",
                path: dir.to_path_buf(),
                source,
            })?;
        if prepared.removed > 0 {
            info!(
                job = job.name,
                "removed {} temporary file(s) a killed run left", prepared.removed
            );
        }
        if prepared.highest_run > cursor_run {
            warn!(
                job = job.name,
                "{} holds pages of run {} but the store's cursor says run {cursor_run} (a new or reset store?): this run is run {}, so no page is replaced",
                dir.display(),
                prepared.highest_run,
                prepared.highest_run.saturating_add(1)
            );
        }
        // A folder that takes no page would fail every page after its
        // charge and its call: stop before the first.
        job.output_writable().map_err(|(path, source)| Error::Io {
            what: "write pages in",
            path,
            source,
        })?;
        self.outputs.put_first(std::sync::Arc::new(files));
        Ok(())
    }

    /// Stop the run (the first reason stays): no request is sent after
    /// it; those in flight finish.
    fn stop(&self, stop: Stop) {
        let mut report = self.report.borrow_mut();
        if report.stop.is_none() {
            report.stop = Some(stop);
        }
    }

    /// Whether a job of inputs stops for its inputs failed.
    fn inputs_stopping(&self) -> bool {
        self.feed.borrow().as_ref().is_some_and(|f| f.stopping())
    }

    fn stopping(&self) -> bool {
        self.report.borrow().stop.is_some()
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
