//! `portion run`: run the named jobs one after another, each to its own end,
//! and turn their outcomes into one exit code; with `--metrics-file`, keep
//! each job's outcome for the file written after the run ([`outcome`]).

pub mod outcome;

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use tokio::signal::unix::{SignalKind, signal};
use tracing::warn;

use crate::cli::RunArgs;
use crate::config::Config;
use crate::ledger::{Store, StoreError, StoreLocation};
use crate::runner::{self, RunContext, Shutdown};
use crate::upstream;
use crate::{Error, ExitStatus, Result};

use self::outcome::{Ended, RunOutcome};
use super::context;

/// Run the jobs `args` names, recording each one's end in `outcome`.
pub async fn execute(
    config: &Config,
    location: &StoreLocation,
    args: &RunArgs,
    outcome: &mut RunOutcome,
) -> Result<ExitStatus> {
    let jobs = config.select_jobs(&args.jobs)?;
    // (before the store is opened, or made, or charged)
    super::common::rows::rows_apart(config, jobs.iter().copied(), location)?;
    let shutdown = Shutdown::default();
    listen_for_stop_signals(shutdown.clone())?;

    let opened = match Store::open(location).await {
        Ok(s) => Ok(s),
        Err(StoreError::Unavailable(e)) => Err(e),
        Err(e) => return Err(context::store_error(&context::store_name(location), e)),
    };
    let store = opened.as_ref().map_err(String::clone);
    let client = upstream::client(&config.http)?;
    let ctx = RunContext {
        config,
        store,
        client: &client,
        shutdown: &shutdown,
        wait: args.wait,
        progress: std::io::stderr().is_terminal() && !crate::logging::stderr_is_journal(),
        store_id: context::store_name(location),
        history: &std::sync::Mutex::new(crate::history::History::open()),
    };

    // The first error outranks a clean stop (75), which outranks success
    // (0); a stop signal that keeps the next jobs from starting is a clean
    // stop, below an error already seen.
    let mut code = ExitStatus::OK;
    for (i, job) in jobs.iter().enumerate() {
        if shutdown.is_set() {
            warn!("stop signal: {} job(s) not started", jobs.len() - i);
            code = code.then(ExitStatus::STOPPED);
            for j in &jobs[i..] {
                outcome.record(&j.name, Duration::ZERO, Ended::NotStarted);
            }
            break;
        }
        let began = Instant::now();
        match runner::run_job(&ctx, job).await {
            Ok(report) => {
                runner::log_summary(&report);
                code = code.then(report.exit_code());
                outcome.record(&job.name, began.elapsed(), Ended::Report(Box::new(report)));
            }
            Err(e) => {
                runner::log_error(&job.name, &e);
                outcome.record(&job.name, began.elapsed(), Ended::Error(e.exit_code()));
                code = code.then(e.exit_code());
            }
        }
    }
    Ok(code)
}

/// SIGTERM (systemd stopping the unit) and SIGINT (Ctrl-C) ask the run to
/// stop at the next safe point, with its cursor saved and its lock released.
fn listen_for_stop_signals(shutdown: Shutdown) -> Result<()> {
    let err = |source| Error::Process {
        what: "listen for signals",
        source,
    };
    let mut term = signal(SignalKind::terminate()).map_err(err)?;
    let mut int = signal(SignalKind::interrupt()).map_err(err)?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => warn!("SIGTERM: stopping at the next safe point"),
            _ = int.recv() => warn!("SIGINT: stopping at the next safe point"),
        }
        shutdown.trigger();
    });
    Ok(())
}
