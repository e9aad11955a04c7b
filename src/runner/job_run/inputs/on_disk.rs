//! A once-job's inputs whose results are on disk though the store does not
//! say them done: after a kill between a page and its cursor's save, the
//! pages of the runs since the cursor's (as many inputs as a window: the
//! most a run can have started past it), and after a store that lost its
//! cursors, every input with a page of the last step (or a row). Apart
//! from the reading of the file (`inputs.rs`) because it reads the
//! output, not the file.

use std::collections::HashSet;

use tracing::warn;

use super::feed::window_cap;
use crate::config::Job;
use crate::runner::Key;
use crate::runner::cursor::Cursor;
use crate::sink::Outputs;

/// A once-job with no place in its file at all (a new or emptied store)
/// while the folder holds pages of the job: every key with a page of
/// the last step, taken as done.
pub(in crate::runner::job_run) fn results_on_disk(
    job: &Job,
    outputs: &Outputs,
    cursor: &Cursor,
) -> HashSet<Key> {
    let last = job.steps.len().saturating_sub(1);
    // (a page is the whole result only when the last step sends one
    // request per input: a paged one cut short would stay cut)
    let single = job
        .steps
        .last()
        .is_some_and(|s| s.paginate.is_none() && s.for_each.is_none());
    // (a page of a batch is named by its first input only, and so is
    // its row: the others cannot be told, so none is taken as done)
    let batched = job.inputs.as_ref().is_some_and(|i| i.batch.is_some());
    if cursor.input.is_none() && single && !batched {
        // (with a table, its rows say which inputs are done)
        let keys = outputs.keys_held(last);
        if !keys.is_empty() {
            warn!(
                job = job.name,
                "the store has no place in the inputs for this job, but {} holds {} of {} input(s) (a new or emptied store?): those are not fetched again",
                match (&job.output, &job.sqlite, &job.postgres) {
                    (Some(dir), _, _) => dir.display().to_string(),
                    (None, Some(s), _) => format!("table {} of {}", s.table, s.path.display()),
                    (None, None, Some(p)) => format!("PostgreSQL table {}", p.table_name()),
                    (None, None, None) => String::new(),
                },
                if job.sqlite.is_some() || job.postgres.is_some() {
                    "pages or rows"
                } else {
                    "pages"
                },
                keys.len()
            );
        }
        return keys;
    }
    HashSet::new()
}

/// The runs whose pages a resumed once-job looks for, when its last
/// step sends one request per input (no pages, no fan-out), so that a
/// page is the input's whole result.
pub(in crate::runner::job_run) fn recent_runs(
    job: &Job,
    cursor: &Cursor,
    highest_run: u64,
) -> Option<(std::ops::RangeInclusive<u64>, usize)> {
    let step = job.steps.last()?;
    let batch = job.inputs.as_ref().and_then(|i| i.batch);
    // (a batch's page is named by its first input only: see
    // results_on_disk)
    let single = step.paginate.is_none() && step.for_each.is_none() && batch.is_none();
    // (a place at the file's start with no key is a reset's: every
    // input is done again, whatever pages are on disk)
    let resumed = cursor
        .input
        .as_ref()
        .is_some_and(|i| i.offset > 0 || !cursor.key.is_empty());
    (job.once && single && resumed && highest_run >= cursor.run.max(1)).then(|| {
        (
            cursor.run.max(1)..=highest_run,
            window_cap(job.concurrency, batch),
        )
    })
}
