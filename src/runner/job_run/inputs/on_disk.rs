//! A once-job's inputs whose results are on disk though the store does not
//! say them done: after a kill between a page and its cursor's save, the
//! pages of the runs since the cursor's (as many inputs as a window: the
//! most a run can have started past it), and after a store that lost its
//! cursors, every input with a page of the last step (or a row). Apart
//! from the reading of the file (`inputs.rs`) because it reads the
//! output, not the file.

use std::collections::HashSet;

use tracing::warn;

use super::super::JobRun;
use super::feed::window_cap;
use crate::runner::Key;
use crate::runner::cursor::Cursor;

impl JobRun<'_> {
    /// A once-job with no place in its file at all (a new or emptied store)
    /// while the folder holds pages of the job: every key with a page of
    /// the last step, taken as done.
    pub(in crate::runner::job_run) fn results_on_disk(
        &self,
        cursor: &Cursor,
        highest_run: u64,
    ) -> HashSet<Key> {
        let job = self.job;
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
            let mut keys = self.inputs_with_rows();
            if let (Some(folder), true, None) = (&job.output, highest_run > 0, &job.sqlite) {
                keys.extend(pages_of_last_step(&job.name, folder, last));
            }
            if !keys.is_empty() {
                warn!(
                    job = job.name,
                    "the store has no place in the inputs for this job, but {} holds {} of {} input(s) (a new or emptied store?): those are not fetched again",
                    match (&job.output, &job.sqlite) {
                        (Some(dir), _) => dir.display().to_string(),
                        (None, Some(s)) => format!("table {} of {}", s.table, s.path.display()),
                        (None, None) => String::new(),
                    },
                    if job.sqlite.is_some() {
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
        &self,
        cursor: &Cursor,
        highest_run: u64,
    ) -> Option<(std::ops::RangeInclusive<u64>, usize)> {
        let job = self.job;
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

    /// Whether a page of `key`'s last step is on disk from one of the runs
    /// `runs`: an input the cursor did not say done, whose page a run
    /// killed before its cursor's save wrote.
    pub(in crate::runner::job_run) fn page_on_disk(
        &self,
        key: &str,
        runs: &std::ops::RangeInclusive<u64>,
    ) -> bool {
        let job = self.job;
        let last = job.steps.len().saturating_sub(1);
        runs.clone().any(|run| {
            let name = crate::page_name::PageName {
                job: &job.name,
                run,
                region: key,
                step: last,
                page: 0,
            };
            job.output
                .as_ref()
                .is_some_and(|dir| dir.join(name.file_name()).exists())
        })
    }
}

/// The keys of `job`'s pages of step `last` in `folder`.
fn pages_of_last_step(job: &str, folder: &std::path::Path, last: usize) -> HashSet<Key> {
    let Ok(dir) = std::fs::read_dir(folder) else {
        return HashSet::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            let (_, key, step, _) = crate::page_name::parse(job, name.to_str()?)?;
            (step == last).then_some(key)
        })
        .collect()
}
