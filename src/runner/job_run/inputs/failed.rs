//! Failed inputs: an input whose first page the upstream refuses for
//! itself (any 4xx not about the credential: an id it does not have; or a
//! 5xx or network error past its retries) is recorded in the
//! store's map `{job}:inputs:failed` (key -> line, offset, status and an
//! excerpt of the answer) and is over: the run goes on and exits 1 at its
//! end; a rerun does not do it again. `portion reset JOB --failed --yes`
//! moves them to `{job}:inputs:retry`, which the next run reads back from
//! their places in the file before going on at its cursor.

use std::collections::VecDeque;

use tracing::{error, warn};

use super::super::round::Slot;
use super::super::{JobRun, Position};
use super::feed::Breaker;
use crate::inputs::{Item, Reader, RecordStart};
use crate::logging::cut;
use crate::logging::printable;
use crate::runner::Key;
use crate::runner::job_state::{FailedInput, JobState, Map};
use crate::{Error, Result};

/// Inputs of a run recorded as failed, none answered, before the job
/// stops: every input refused is more likely a bad key or URL than ids
/// the upstream lacks (a backfill has many of those, spread out).
pub(in crate::runner::job_run) const INPUTS_REFUSED: u32 = 10;

/// Inputs in a row failed by the upstream's own trouble (what is retried:
/// a 5xx, a 408, a network error or a timeout, a 2xx whose JSON is cut
/// short, past their retries), none answered between, before the
/// job stops: an upstream that is down would otherwise fail every input
/// of the list, one by one, each charged, each to be done again by hand.
pub(in crate::runner::job_run) const OUTAGE_INPUTS: u32 = 3;

/// How much of a refusal's answer a failed input keeps.
const EXCERPT: usize = 200;

impl JobRun<'_> {
    /// The input at `at` refused for itself (`status`, `excerpt`, `why`;
    /// `outage`: by a 5xx, 408 or network error past its retries):
    /// recorded as failed and over; the job stops if it is the
    /// [`INPUTS_REFUSED`]th of this run and none was answered, or the
    /// [`OUTAGE_INPUTS`]th in a row failed by an outage.
    pub(in crate::runner::job_run) async fn input_failed(
        &self,
        at: &Position<'_>,
        why: &str,
        (status, excerpt): (u16, &str),
        outage: bool,
    ) -> Result<()> {
        let inputs = self.record_input_failed(at, why, status, excerpt).await;
        let breaker = {
            let mut feed = self.feed.borrow_mut();
            feed.as_mut().and_then(|f| f.failed(outage))
        };
        let fix = format!(
            "they are recorded as failed: `portion reset {} --failed --yes` has the next run do them again",
            self.job.name
        );
        let problem = match breaker {
            None => return Ok(()),
            Some(Breaker::Outage(n)) => format!(
                "{why}; {n} inputs in a row failed so, none answered between (the upstream is down, \
                 more likely), so the job stops; {fix}"
            ),
            Some(Breaker::NoneAnswered(n)) => {
                // (a batch counts once: the first requests all refused)
                let what = if inputs > 1 {
                    "batches of inputs"
                } else {
                    "inputs"
                };
                format!(
                    "{why}; the first {n} {what} of this run were refused and none answered, so the job stops \
                     (check the file and the key); {fix}"
                )
            }
        };
        let error = Error::Upstream {
            job: self.job.name.clone(),
            url: at.describe(0),
            problem,
        };
        // Not at once: the requests in flight were charged, and their
        // answers are recorded too (else the next run charges them again).
        if let Some(feed) = self.feed.borrow_mut().as_mut() {
            feed.stop(error);
        }
        Ok(())
    }

    /// Record the input at `at` (or its batch) as failed and over, logged
    /// and counted: how many inputs that was.
    pub(in crate::runner::job_run) async fn record_input_failed(
        &self,
        at: &Position<'_>,
        why: &str,
        status: u16,
        excerpt: &str,
    ) -> usize {
        let job = self.job;
        // A batch of inputs refused: each of its inputs failed, with the
        // batch's status and excerpt (which of them the upstream minded,
        // if any one, its answer alone may say).
        let slots = self
            .input_batches
            .borrow()
            .get(&at.slot)
            .cloned()
            .unwrap_or_else(|| vec![at.slot]);
        let inputs: Vec<(Key, u64, u64)> = {
            let round = self.round.borrow();
            slots
                .iter()
                .map(|s| {
                    let span = round.span(*s);
                    let (line, offset) = span.map_or((0, 0), |s| (s.line, s.start));
                    (round.key(*s).to_string(), line, offset)
                })
                .collect()
        };
        let kept = record_failed(self.state(), &inputs, status, excerpt).await;
        let line = inputs.first().map_or(0, |i| i.1);
        let what = match inputs.len() {
            1 => format!("input {} (line {line})", printable(at.key)),
            n => format!(
                "the batch of {n} inputs from {} (line {line}) on",
                printable(at.key)
            ),
        };
        error!(
            job = job.name,
            "{why}; {what} failed{kept}, the others go on"
        );
        self.report.borrow_mut().failed_inputs += inputs.len() as u64;
        self.save(at.slot, Slot::Done).await;
        inputs.len()
    }

    /// Read up to `room` failed inputs to do again into the window, each
    /// from its place in the file; whether any were left to read.
    pub(in crate::runner::job_run) fn read_retries(&self, room: usize) -> bool {
        let Some(inputs) = self.job.inputs.as_ref() else {
            return false;
        };
        let mut feed = self.feed.borrow_mut();
        let Some(feed) = feed.as_mut() else {
            return false;
        };
        if feed.retry.is_empty() {
            return false;
        }
        feed.retrying = true;
        let mut round = self.round.borrow_mut();
        for _ in 0..room {
            let Some((key, at)) = feed.retry.pop_front() else {
                break;
            };
            let read = Reader::open(inputs, at)
                .map(|r| r.refusing(&self.cred.secret))
                .ok()
                .and_then(|mut r| r.next())
                .and_then(|item| item.ok());
            match read {
                Some(Item::Record(r)) if r.key == key && r.span.line == at.line => {
                    let state = feed.state_of(&r.key);
                    let mut report = self.report.borrow_mut();
                    report.regions_total += 1;
                    if state == Slot::Done {
                        report.regions_done += 1;
                    }
                    round.push_retry(r.key, r.span, r.fields, state);
                }
                _ => {
                    warn!(
                        job = self.job.name,
                        "{} line {}: the failed input {} is no longer there (the file changed): not done again",
                        inputs.file.display(),
                        at.line,
                        printable(&key)
                    );
                    if let Some(w) = round.window_mut() {
                        w.retried.push(key);
                    }
                }
            }
        }
        true
    }

    /// The failed inputs done again since the last call are no longer to
    /// be done again; when every one is over, the map of them is forgotten.
    pub(in crate::runner::job_run) async fn keep_retried(&self, all_over: bool) {
        let (retried, retrying) = {
            let mut round = self.round.borrow_mut();
            let retried = round
                .window_mut()
                .map(|w| std::mem::take(&mut w.retried))
                .unwrap_or_default();
            let feed = self.feed.borrow();
            let retrying = feed.as_ref().is_some_and(|f| f.retrying);
            (retried, retrying)
        };
        let Some(state) = self.state().filter(|_| retrying) else {
            return;
        };
        let done: Vec<(String, String)> = (retried.iter())
            .map(|k| (k.to_string(), String::new()))
            .collect();
        if let Err(e) = state.put(Map::Retry, &done).await {
            warn!(
                job = self.job.name,
                "cannot note a failed input done again (the next run may do it again): {e}"
            );
        }
        if all_over && let Err(e) = state.forget(Map::Retry).await {
            warn!(
                job = self.job.name,
                "cannot forget the failed inputs done again (the next run skips them): {e}"
            );
        }
    }
}

/// Record each of `inputs` (key, line, offset) as failed in the store;
/// what to add to the log line when that could not be done.
async fn record_failed(
    state: Option<JobState<'_>>,
    inputs: &[(Key, u64, u64)],
    status: u16,
    excerpt: &str,
) -> String {
    for (key, line, offset) in inputs {
        let failed = FailedInput {
            key: key.to_string(),
            line: *line,
            offset: *offset,
            status,
            excerpt: cut(excerpt, EXCERPT),
        };
        return match &state {
            Some(state) => match state.record_failed(&failed).await {
                Ok(()) => continue,
                Err(e) => format!(" (cannot record it in the store: {e})"),
            },
            None => " (not recorded: the run has no store)".into(),
        };
    }
    String::new()
}

/// The failed inputs, and those to do again, forgotten.
pub(in crate::runner::job_run) async fn forget_failed(state: Option<JobState<'_>>, job: &str) {
    let Some(state) = state else {
        return;
    };
    for map in [Map::Failed, Map::Retry] {
        if let Err(e) = state.forget(map).await {
            warn!(
                job,
                "cannot forget the failed inputs of the last walk of the file: {e}"
            );
        }
    }
}

/// The failed inputs `portion reset JOB --failed` asked to do again, in
/// file order (those already done again have an empty value).
pub(in crate::runner::job_run) async fn retries(
    state: Option<JobState<'_>>,
    job: &str,
) -> VecDeque<(Key, RecordStart)> {
    let Some(state) = state else {
        return VecDeque::new();
    };
    let kept = match state.failed(Map::Retry).await {
        Ok(kept) => kept,
        Err(e) => {
            warn!(
                job,
                "cannot read the failed inputs to do again ({e}): a later run does them"
            );
            return VecDeque::new();
        }
    };
    let mut retry: Vec<(Key, RecordStart)> = kept
        .into_iter()
        .map(|f| {
            let at = RecordStart {
                offset: f.offset,
                line: f.line,
            };
            (f.key, at)
        })
        .collect();
    retry.sort_by_key(|(_, at)| at.offset);
    retry.into()
}
