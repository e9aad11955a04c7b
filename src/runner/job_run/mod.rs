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

use self::round::{Round, Slot};
use super::cursor::{Cursor, Place, cursor_text, read_cursor};
use super::lock::RunLock;
use super::meter::Meter;
use super::output;
use super::page_scan::Found;
use super::{JobReport, RunContext, Stop};
use crate::config::{Credential, Fill, InputFields, Job, StorePolicy};
use crate::error::FailClosed;
use crate::inputs::pace;
use crate::ledger::{At, Ledger, LockOutcome, Store, StoreError};
use crate::{Error, Result};

mod batches;
mod charge;
mod conditional;
mod failed;
mod fan_out;
mod found;
mod inputs;
mod keys;
mod lists;
mod on_disk;
mod replaced;
mod request;
mod round;
mod rows;
mod seen;
mod walk;

pub(crate) use self::conditional::{conditional_map, not_modified_map};
pub(crate) use self::failed::{failed_map, retry_map};
pub(crate) use self::inputs::{check_file, done_map, kept_chunks, needs_check, unrecorded};
pub(crate) use self::seen::seen_map;

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
    /// `output.sqlite`: the job's table, open from the start of the round
    /// (written on blocking threads, a page at a time).
    sink: Option<std::sync::Arc<super::sink::group::Shared>>,
    /// A job whose inputs go in batches: the slots of each batch in
    /// flight, by its first slot (the one its walk saves).
    input_batches: RefCell<std::collections::HashMap<usize, Vec<usize>>>,
    /// The validators and incremental values the store keeps for the job.
    kept: RefCell<conditional::Kept>,
}

/// How often a run on a terminal reads the budgets' pace from the store.
const PACE_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// When a job of inputs' rest will be done at the budgets' pace.
#[derive(Default)]
struct Pace {
    /// When last read from the store.
    read: Option<std::time::Instant>,
    /// What it said (`None` inside: never).
    finish: Option<Option<std::time::Duration>>,
}

/// One region's walk in progress: what its pages found for a fan-out step
/// after them (each region its own, as regions run side by side).
struct Walker {
    /// The values the step being walked finds for the next, a fan-out.
    found: found::Found,
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
        Self {
            ctx,
            job,
            cred: ctx.config.credential(job),
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
                rows: (job.sqlite.as_ref()).map(|s| crate::runner::report::RowCounts {
                    table: s.table.clone(),
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
            sink: None,
            input_batches: RefCell::default(),
            kept: RefCell::default(),
        }
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
        self.sink.as_ref().map(|s| s.counts())
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
        if let Err(e) = self.count_not_modified().await {
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
        self.load_kept().await;
        self.load_lists(&mut cursor).await?;
        if let Some(spec) = &job.sqlite {
            self.open_sink(spec).await?;
        }
        let folder_run = match &job.output {
            Some(dir) => self.prepare_folder(dir, cursor.run)?,
            None => 0,
        };
        self.forget_replaced_output(folder_run).await;
        let highest_run = folder_run.max(self.highest_run_of_rows()?);
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
    /// racing a run that has it) and check it takes a file: the highest
    /// run number of the job's pages there.
    fn prepare_folder(&self, dir: &std::path::Path, cursor_run: u64) -> Result<u64> {
        let job = self.job;
        let locked = self.lock.as_ref().is_some_and(|l| !l.is_lost());
        let prepared = output::prepare(dir, &job.name, locked).map_err(|source| Error::Io {
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
        Ok(prepared.highest_run)
    }

    /// Region `slot` of the round is now at `state`: save the cursor that
    /// says the whole round. The single writer: one write at a time, each
    /// of the round as it is when its turn comes, so the newest is written
    /// last; a state that a later write already carried is not written again.
    /// Whether the store now holds this state (or a later one).
    async fn save(&self, slot: usize, state: Slot) -> bool {
        let version = {
            let mut round = self.round.borrow_mut();
            match self.input_batches.borrow().get(&slot) {
                // A batch of inputs is done, or failed, as one; it keeps
                // no place of its own (a stop redoes it from its first
                // step): its inputs stay not done until it is over.
                Some(_) if matches!(state, Slot::At(_)) => return true,
                Some(slots) => {
                    for s in slots {
                        round.set(*s, state.clone());
                    }
                }
                None => round.set(slot, state),
            }
            round.version()
        };
        self.write_cursor(version).await
    }

    /// Save the cursor of the round as it is (its place in a file of
    /// inputs moved).
    async fn save_round(&self) -> bool {
        let version = self.round.borrow_mut().bump();
        self.write_cursor(version).await
    }

    /// Write the cursor of the round as it is now, unless a write of
    /// `version` or later was done. A once-job's done part grown by full
    /// chunks is kept first: the cursor never counts a chunk the store
    /// does not hold.
    async fn write_cursor(&self, version: u64) -> bool {
        let mut saved = self.saving.lock().await;
        if *saved >= version {
            return true;
        }
        let (cursor, now, chunks) = {
            let mut round = self.round.borrow_mut();
            let chunks = round
                .window_mut()
                .map(|w| std::mem::take(&mut w.chunks))
                .unwrap_or_default();
            (round.cursor(), round.version(), chunks)
        };
        if let Err(e) = self.keep_chunks(&chunks).await {
            warn!(
                job = self.job.name,
                "cannot keep the inputs done in the store (the next run may redo them): {e}"
            );
            if let Some(w) = self.round.borrow_mut().window_mut() {
                w.chunks.splice(0..0, chunks);
            }
            return false;
        }
        let (stored, text) = cursor_text(&cursor, &self.cred.secret);
        if stored.place.page != cursor.place.page {
            warn!(
                job = self.job.name,
                "the next page's token carries the credential's secret in an encoding that cannot be stored masked: \
                 the cursor keeps the start of this step instead (a stop before the step ends redoes its pages)"
            );
        }
        self.report.borrow_mut().resume = Some(stored);
        if let Some(store) = self.meter.store()
            && let Err(e) = store.save_cursor(&self.job.name, &text).await
        {
            warn!(
                job = self.job.name,
                "cannot save the cursor (the next run may redo this page): {e}"
            );
            return false;
        }
        *saved = now;
        true
    }

    async fn keep_chunks(
        &self,
        chunks: &[(u64, crate::inputs::done_part::Chunk)],
    ) -> std::result::Result<(), StoreError> {
        let Some(store) = self.meter.store() else {
            return Ok(());
        };
        let map = inputs::done_map(self.job);
        let entries: Vec<(String, String)> = (chunks.iter())
            .map(|(i, chunk)| {
                let text = serde_json::to_string(chunk).expect("a chunk always serializes");
                (format!("{i:012}"), text)
            })
            .collect();
        store.map_put(&map, &entries).await
    }

    /// On a terminal, for a job of inputs as an input is over: the line,
    /// and when the rest will be done at the budgets' pace (inputs in
    /// flight, whose units are spent, still counted as left: at most
    /// `concurrency` more than the rest, an estimate on the safe side).
    async fn progress(&self) {
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
    fn draw_progress(&self) -> Option<u64> {
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
                let from = crate::inputs::Position { offset, line };
                let items = crate::inputs::Reader::open(inputs, from)
                    .map(|r| r.map_while(|i| i.ok()).count() as u64);
                done + items.unwrap_or(0)
            };
            let pace = self.pace.borrow().finish;
            return Some(super::progress::inputs(
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

    fn clear_progress(&self) {
        if super::progress::clear(&self.job.name) {
            return;
        }
        if self.ctx.progress && self.report.borrow().pages > 0 {
            eprint!("\r\x1b[2K");
        }
    }

    /// Stop the run (the first reason stays): no request is sent after
    /// it; those in flight finish.
    fn stop(&self, stop: Stop) {
        let mut report = self.report.borrow_mut();
        if report.stop.is_none() {
            report.stop = Some(stop);
        }
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
