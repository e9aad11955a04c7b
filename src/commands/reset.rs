//! `portion reset JOB --yes`: start a job afresh. Its cursor is forgotten
//! (its run number kept, so no page is ever replaced) and, for a job of
//! inputs, which inputs are done and which keys were seen: every input is
//! done again, its new pages written beside the old ones. The way on after
//! a once-job's done part changed (78), or to redo a list on purpose.
//! Pages and rows stay where they are. `--failed`: only the failed inputs
//! are done again, by the next run, before it goes on at its cursor.

use std::time::Duration;

use super::context;
use super::table::emit;
use crate::config::Config;
use crate::ledger::{JobStore, LockOutcome, StoreLocation};
use crate::runner::cursor::{Cursor, InputAt};
use crate::runner::job_state::{JobState, Map};
use crate::{Error, ExitStatus, Result};

pub async fn execute(
    config: &Config,
    location: &StoreLocation,
    name: &str,
    yes: bool,
    failed: bool,
) -> Result<ExitStatus> {
    let job = config.select_jobs(&[name.to_string()])?[0];
    let store_name = context::store_name(location);
    if failed && job.inputs.is_none() {
        return Err(Error::Usage(format!(
            "portion reset {name} --failed: job {name} has no inputs, so none failed"
        )));
    }
    let what = if failed {
        "which inputs failed (the next run does them again first; its cursor and the inputs done are kept)"
    } else if job.inputs.is_some() {
        "its cursor, which inputs are done and which keys were seen"
    } else {
        "its cursor"
    };
    if !yes {
        let (flag, after) = match failed {
            true => (" --failed", ""),
            false => ("", ": its next run starts afresh"),
        };
        return Err(Error::Usage(format!(
            "portion reset {name}{flag} forgets {what} in {store_name} (pages stay){after}; \
             run it again with --yes to do it"
        )));
    }
    let store = context::open(location).await?;
    let err = |e| context::store_error(&store_name, e);
    // A run in progress would write its cursor over the reset.
    let holder = format!("portion reset (pid {})", std::process::id());
    if let LockOutcome::Busy { holder: by, .. } = store
        .take_lock(name, &holder, Duration::from_secs(30))
        .await
        .map_err(err)?
    {
        eprintln!(
            "job {name} is running ({by} holds its lock): nothing reset; reset it once the run ends"
        );
        return Ok(ExitStatus::STOPPED);
    }
    let reset = match failed {
        true => reset_failed(&store, job).await,
        false => reset(&store, job, name).await.map(|()| 0),
    };
    store.release_lock(name, &holder).await.map_err(err)?;
    let n = reset.map_err(err)?;
    if failed {
        return emit(&format!(
            "job {name}: {n} failed input(s) to do again in {store_name}; its next run does them first\n"
        ));
    }
    emit(&format!(
        "job {name}: forgot {what} in {store_name}; its next run starts afresh\n"
    ))
}

/// The failed inputs moved to the map of those the next run does again
/// (with those a reset asked for before, not yet done): how many there are.
async fn reset_failed(
    store: &crate::ledger::Store,
    job: &crate::config::Job,
) -> std::result::Result<usize, crate::ledger::StoreError> {
    JobState::new(store, &job.name).retry_failed().await
}

async fn reset(
    store: &crate::ledger::Store,
    job: &crate::config::Job,
    name: &str,
) -> std::result::Result<(), crate::ledger::StoreError> {
    let old = store
        .load_cursor(name)
        .await?
        .and_then(|t| Cursor::decode(&t))
        .unwrap_or_default();
    // A job of inputs at its file's start: a place, so that the next run
    // does every input again rather than take the pages on disk as done
    // (as after a store that lost its cursor).
    let fresh = Cursor {
        run: old.run,
        input: job.inputs.as_ref().map(|_| InputAt {
            line: 1,
            ..InputAt::default()
        }),
        ..Cursor::default()
    };
    store.save_cursor(name, &fresh.encode()).await?;
    // (afresh: every page asked in full, incremental steps from `initial`;
    // every input done again, none failed, nor to do again)
    let walk = old.input.map_or(0, |i| i.walk);
    (JobState::new(store, &job.name))
        .forget_walks(job.inputs.as_ref().map(|_| Map::seen(job.once, walk)))
        .await
}
