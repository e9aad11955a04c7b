//! `quota reset JOB --yes`: start a job afresh. Its cursor is forgotten
//! (its run number kept, so no page is ever replaced) and, for a job of
//! inputs, which inputs are done and which keys were seen: every input is
//! done again, its new pages written beside the old ones. The way on after
//! a once-job's done part changed (78), or to redo a list on purpose.
//! Pages and rows stay where they are.

use std::time::Duration;

use super::context;
use super::table::emit;
use crate::config::Config;
use crate::ledger::{Ledger, LockOutcome, StoreLocation};
use crate::runner::cursor::{Cursor, InputAt};
use crate::runner::{done_map, seen_map};
use crate::{Error, ExitStatus, Result};

pub async fn execute(
    config: &Config,
    location: &StoreLocation,
    name: &str,
    yes: bool,
) -> Result<ExitStatus> {
    let job = config.select_jobs(&[name.to_string()])?[0];
    let store_name = context::store_name(location);
    let what = if job.inputs.is_some() {
        "its cursor, which inputs are done and which keys were seen"
    } else {
        "its cursor"
    };
    if !yes {
        return Err(Error::Usage(format!(
            "quota reset {name} forgets {what} in {store_name} (pages stay): its next run starts afresh; \
             run it again with --yes to do it"
        )));
    }
    let store = context::open(location).await?;
    let err = |e| context::store_error(&store_name, e);
    // A run in progress would write its cursor over the reset.
    let holder = format!("quota reset (pid {})", std::process::id());
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
    let reset = reset(&store, job, name).await;
    store.release_lock(name, &holder).await.map_err(err)?;
    reset.map_err(err)?;
    emit(&format!(
        "job {name}: forgot {what} in {store_name}; its next run starts afresh\n"
    ))
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
    if job.inputs.is_some() {
        let walk = old.input.map_or(0, |i| i.walk);
        store.map_forget(&seen_map(job, walk)).await?;
        store.map_forget(&done_map(job)).await?;
    }
    Ok(())
}
