//! The runner: one run of a job, from lock to summary line.
//!
//! Data flows one way, page after page: plan the next request from the
//! cursor → charge its cost in the ledger → call the upstream → write the
//! page atomically → save the cursor. A rejection, an upstream quota error,
//! a busy lock or a stop signal ends the run cleanly (exit 75), with the
//! cursor saved so the next timer tick resumes exactly there.
//!
//! With `concurrency: N` up to N regions are walked side by side, each
//! region's pages still in that order, and the cursor says where every
//! region of the round is.
//!
//! What a walk is for is its [`Key`]: a region today, an input of a list
//! next; the configuration's `{region}` fills with it.
//!
//! Rooms: [`job_run`] (one run in progress: the key loop, call, write;
//! fan-out steps, `for_each`, in its `fan_out`; keys side by side in its
//! `keys`, the round the cursor says in its `round`), [`meter`] (the run's
//! metering: charge, settle, the upstream's counts and block, against the
//! store), [`upstream_limits`] (the limits the upstream last announced, kept
//! in the store), [`lock`] (the run lock guard), [`shutdown`] (the stop signal),
//! [`cursor`] (where a job resumes, each key's [`Place`](cursor::Place),
//! kept without the secret), and the report a run ends with. The wire
//! (one request and its answer) is [`crate::upstream`]; where results go,
//! [`crate::sink`].

pub mod cursor;
mod job_run;
pub mod job_state;
mod lock;
mod meter;
mod progress;
mod report;
mod shutdown;
pub mod upstream_limits;

pub(crate) use self::job_run::{check_file, kept_chunks, needs_check, unrecorded};
pub use self::report::{JobReport, Stop, held_text, log_error, log_summary};
pub use self::shutdown::Shutdown;

use self::job_run::JobRun;
use self::lock::RunLock;
use crate::Result;
use crate::config::{Config, Job};
use crate::ledger::{Store, StoreError};

/// A work key: what one walk of a job's steps is for. Its value fills
/// `{region}` in the requests and names the walk's page files, cursor and
/// fan-out lists. Today a region of the job's `regions` (or the one empty
/// key of a job without); next, an input of a list (issue 25). The
/// runner's one word for the concept; the configuration, the messages and
/// the report keep the operator's word, "region".
pub type Key = String;

/// What every run of this process shares.
pub struct RunContext<'a> {
    pub config: &'a Config,
    /// `Err` holds why the store could not be opened.
    pub store: std::result::Result<&'a Store, String>,
    pub client: &'a reqwest::Client,
    pub shutdown: &'a Shutdown,
    /// `run --wait`: how long a refused charge may wait for its units
    /// (none: each job's `max_wait`).
    pub wait: Option<std::time::Duration>,
    /// Draw a progress line (stderr is a terminal).
    pub progress: bool,
    /// The store as logs name it (the key of the history).
    pub store_id: String,
    /// What this host has seen of each credential's log.
    pub history: &'a std::sync::Mutex<crate::history::History>,
}

/// Run `job` once: take its lock, serve its regions from the cursor on,
/// release the lock. Errors are what ends a run with 1, 69 or 78.
pub async fn run_job(ctx: &RunContext<'_>, job: &Job) -> Result<JobReport> {
    let mut run = JobRun::new(ctx, job);
    let holder = format!(
        "{} pid {} since {}",
        hostname(),
        std::process::id(),
        chrono::Local::now().format("%Y-%m-%d %H:%M:%S %Z")
    );

    // The lock first: nothing else happens in a run that does not hold it.
    match &ctx.store {
        Ok(store) => match RunLock::take(store, &job.name, &holder, ctx.config.lock_ttl).await {
            Ok(Ok(lock)) => run.hold(store, lock),
            Ok(Err(busy)) => return Ok(run.busy(store, busy).await),
            Err(StoreError::Unavailable(e)) => run.store_unreachable_at_start(&e)?,
            Err(e) => return Err(e.into()),
        },
        Err(e) => run.store_unreachable_at_start(e)?,
    }

    let synced = crate::folder_sync::counts();
    let result = run.serve_keys().await;
    let (names, fsyncs) = crate::folder_sync::counts();
    // (what the folder fsyncs shared by pages written at once saved)
    tracing::debug!(
        job = job.name,
        "{} new name(s) made durable by {} folder fsync(s)",
        names - synced.0,
        fsyncs - synced.1
    );
    run.finish(result).await
}

/// This host's name, for a lock's holder and a block's reason: from the
/// uname(2) system call (what gethostname(3) returns), not from
/// /proc/sys/kernel/hostname, which the systemd unit hides (ProcSubset=pid).
pub(crate) fn hostname() -> String {
    let uname = rustix::system::uname();
    let name = uname.nodename().to_string_lossy();
    let name = name.trim();
    if name.is_empty() {
        "unknown-host".into()
    } else {
        name.to_string()
    }
}
