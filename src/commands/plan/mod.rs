//! `portion run --dry-run`: planning. No request, no charge, no cursor or lock
//! change: the store is only read. For each job: calls and units per run
//! (the worst case: `max_pages` pages per paginated step); whether the next
//! run fits what remains now, and if not where it would stop; with a
//! `schedule`, how a day of runs meets each window, when the budget would
//! run out, and the fastest schedule that fits. Jobs sharing a credential
//! are planned together, in the file's order. A conditional job's schedule
//! and time to finish count its runs at its share of 304s in the log; a job
//! of inputs' time to finish, its runs' waits inside themselves
//! (`max_wait`, `run --wait`) or, where they stop, its schedule's ticks. A
//! pool whose budget nothing spreads over its longest window gets a
//! proposed pacing window, at the budget's rate.
//!
//! This module is the command: it reads the store and puts the plan
//! together. [`cost`] (one run), [`observed`] (a conditional job's share of
//! 304s), [`schedule`] (a schedule's steady state), [`simulate`] (a day of
//! runs on the log) and [`pacing`] (a pool's windows) do the arithmetic,
//! [`model`] is the plan as data (what `--json` prints) and [`render`] is
//! the table.

pub(crate) mod cost;
#[cfg(test)]
mod fixtures;
mod inputs;
mod model;
mod observed;
mod pacing;
mod render;
mod schedule;
mod simulate;

use std::collections::BTreeMap;
use std::time::Duration;

pub use self::model::{
    CredentialPlan, FinishAssumes, JobPlan, NextRun, ObservedShare, Pacing, Plan, PoolPlan,
    RunsAtRefusal, RunsOut, SchedulePlan, WindowNeed,
};
pub use self::render::render;
use self::schedule::Scheduled;
use super::common::inputs::{self as inputs_progress, FailedInput};
use super::common::shares;
use super::table::{Paint, emit};
use crate::cli::RunArgs;
use crate::config::{Config, Credential, Job};
use crate::inputs::pace::Runs;
use crate::ledger::JobStore;
use crate::ledger::{At, CredentialLog, Ledger, Store, StoreError, StoreLocation, summarize};
use crate::runner::cursor::Cursor;
use crate::timefmt::rfc3339;
use crate::{ExitStatus, Result};

/// The `portion run --dry-run` command: plan the selected jobs and print the
/// plan as a table or, with `--json`, as JSON.
pub async fn execute(
    config: &Config,
    location: &StoreLocation,
    args: &RunArgs,
) -> Result<ExitStatus> {
    let jobs = config.select_jobs(&args.jobs)?;
    let at = At::StoreClock;
    // The plan names the file an embedded store is in, and reads it only if
    // it exists: a dry run creates nothing.
    let location = &location.resolved()?;
    let (store, store_error, missing) = match Store::open_existing(location).await {
        Ok(Some(s)) => (Some(s), None, false),
        Ok(None) => (None, None, true),
        Err(StoreError::Unavailable(e)) => (None, Some(e), false),
        Err(e) => return Err(e.into()),
    };
    let (store, found) = (store.as_ref(), (store_error, location));
    let mut plan = build(config, &jobs, store, found, at, args.wait).await?;
    if missing {
        plan.store.push_str(
            " (does not exist yet: nothing charged, planned against full budgets; the dry run created nothing)",
        );
    }
    if args.json {
        emit(&(serde_json::to_string_pretty(&plan).expect("a plan serializes") + "\n"))
    } else {
        let p = Paint {
            on: super::context::colour_on_stdout(),
        };
        emit(&render(&plan, p))
    }
}

/// Read what the plan needs from the store (nothing is written) and plan,
/// each run waiting up to `wait` for refused units (`run --wait`; `None`:
/// its job's `max_wait`).
pub async fn build(
    config: &Config,
    jobs: &[&Job],
    store: Option<&Store>,
    (mut store_error, location): (Option<String>, &StoreLocation),
    at: At,
    wait: Option<Duration>,
) -> Result<Plan> {
    let fallback_now = match at {
        At::Fixed(us) => us,
        At::StoreClock => chrono::Utc::now().timestamp_micros(),
    };
    let mut now = fallback_now;
    let mut credentials = Vec::new();
    for cred in &config.credentials {
        let cred_jobs: Vec<&Job> = jobs
            .iter()
            .copied()
            .filter(|j| config.credential(j).name == cred.name)
            .collect();
        if cred_jobs.is_empty() {
            continue;
        }
        let mut log = None;
        let mut shared = None;
        let mut cursors = BTreeMap::new();
        let mut failed = BTreeMap::new();
        if let (Some(store), None) = (store, &store_error) {
            match read(store, cred, &cred_jobs, at).await {
                Ok(((l, s), c, f)) => {
                    now = l.at;
                    log = Some(l);
                    shared = s;
                    cursors = c;
                    failed = f;
                }
                Err(StoreError::Unavailable(e)) => store_error = Some(e),
                Err(e) => return Err(e.into()),
            }
        }
        let log = log.unwrap_or_else(|| CredentialLog {
            at: fallback_now,
            serial: 0,
            blocked_until: 0,
            blocked_reason: String::new(),
            retain: 0,
            tags: Vec::new(),
            pools: vec![Vec::new(); cred.pools.len()],
            lost: vec![0; cred.pools.len()],
            others: vec![Default::default(); cred.pools.len()],
            observed: vec![(0, 0); cred.pools.len()],
            reserved: vec![Vec::new(); cred.pools.len()],
        });
        let got = Read {
            log: &log,
            shared: shared.as_ref(),
            cursors: &cursors,
            failed,
        };
        let mut plan = plan_credential(cred, &cred_jobs, got, wait)?;
        if let (Some(store), None) = (store, &store_error) {
            // (a once-job whose done part changed: its run stops at 78)
            for (jp, job) in plan.jobs.iter_mut().zip(&cred_jobs) {
                if let Some(i) = jp.inputs.as_mut() {
                    i.blocked =
                        inputs_progress::blocked(store, job, cursors.get(&job.name)).await?;
                }
            }
        }
        credentials.push(plan);
    }
    let store_desc = super::context::store_name(location);
    Ok(Plan {
        at: rfc3339(now),
        store: match &store_error {
            None => store_desc,
            Some(e) => format!("{store_desc} unreachable ({e}): planned against full budgets"),
        },
        store_reachable: store_error.is_none(),
        credentials,
    })
}

/// What the store holds for a credential's jobs: their cursors, and the
/// failures of each job of inputs.
type Cursors = BTreeMap<String, Cursor>;
type Failed = BTreeMap<String, (u64, Vec<FailedInput>)>;

/// What the plan of one credential is made from.
struct Read<'r> {
    log: &'r CredentialLog,
    /// What its shares used (their pools' log; `None`: nothing read).
    shared: Option<&'r CredentialLog>,
    cursors: &'r Cursors,
    failed: Failed,
}

/// The credential's log, its jobs' cursors and failed inputs, as they are
/// now.
async fn read(
    store: &Store,
    cred: &Credential,
    jobs: &[&Job],
    at: At,
) -> std::result::Result<((CredentialLog, Option<CredentialLog>), Cursors, Failed), StoreError> {
    // (and its shares' pools, split off again: what each share used)
    let mut pools = cred.pools.clone();
    pools.extend(shares::pools_of(cred));
    let log = store.read(&cred.name, &pools, at).await?;
    let (log, shared) = shares::split_log(log, cred.pools.len());
    let mut cursors = BTreeMap::new();
    let mut failed = BTreeMap::new();
    for j in jobs {
        if j.inputs.is_some() {
            failed.insert(j.name.clone(), inputs_progress::failures(store, j).await?);
        }
        if let Some(c) = store
            .load_cursor(&j.name)
            .await?
            .as_deref()
            .and_then(Cursor::decode)
        {
            cursors.insert(j.name.clone(), c);
        }
    }
    Ok(((log, Some(shared)), cursors, failed))
}

/// The plan of one credential's jobs, from its log and their cursors.
fn plan_credential(
    cred: &Credential,
    jobs: &[&Job],
    read: Read,
    wait: Option<Duration>,
) -> Result<CredentialPlan> {
    let Read {
        log,
        shared,
        cursors,
        mut failed,
    } = read;
    let usage = summarize(&cred.name, &cred.pools, log);
    let share_pools = shares::pools_of(cred);
    let shared = shared.map(|l| summarize(&cred.name, &share_pools, l).pools);
    let mut remaining = cost::RemainingUnits::new();
    for p in &usage.pools {
        for (i, w) in p.windows.iter().enumerate() {
            remaining.insert((p.pool.clone(), i), w.remaining);
        }
    }
    let blocked = usage.blocked_until;
    // (a conditional job's share of 304s: what its runs are planned at)
    let observed: BTreeMap<String, ObservedShare> = (jobs.iter())
        .filter_map(|j| Some((j.name.clone(), observed::share(j, &cred.pools, log)?)))
        .collect();
    let expected = (observed.iter())
        .filter_map(|(j, o)| Some((j.clone(), o.expected_units_per_run.clone()?)))
        .collect();
    let scheduled = schedule::scheduled(jobs, &expected);
    let mut job_plans = Vec::new();
    for job in jobs {
        let cursor = cursors.get(&job.name);
        let failures = failed.remove(&job.name).unwrap_or_default();
        let share = observed.get(&job.name);
        let runs = Runs {
            max_wait: wait.unwrap_or(job.max_wait),
            every: job.schedule,
        };
        let (progress, finish) = progress(job, cursor, failures, &usage, (share, runs))?;
        let cap = shares::caps(
            cred,
            &job.name,
            &usage.pools,
            shared.as_deref().unwrap_or(&[]),
            usage.at,
        );
        let next_run = within(&mut remaining, cap, |remaining| {
            match (blocked, &progress) {
                (Some(until), _) => NextRun::Blocked {
                    until: rfc3339(until),
                },
                (None, Some(p)) => inputs::next_run(job, p.left, remaining, cred.observe),
                (None, None) => cost::next_run(job, cursor, remaining, cred.observe),
            }
        });
        job_plans.push(JobPlan {
            job: job.name.clone(),
            calls_per_run: job.calls_per_run(),
            units_per_run: cost::units_per_run(job),
            next_run,
            schedule: job
                .schedule
                .map(|every| schedule_plan(cred, job, every, &scheduled, log)),
            inputs: progress,
            rows: super::common::rows::rows_of(job),
            conditional: job.steps.iter().any(|s| s.conditional.is_some()),
            not_modified: share.cloned(),
            finish,
        });
    }
    let pools = cred
        .pools
        .iter()
        .map(|pool| PoolPlan {
            pool: pool.name.clone(),
            units_per_day: schedule::pool_units_per_day(&pool.name, &scheduled),
            pacing: pacing::propose(pool, cost::round(&pool.name, jobs)),
        })
        .collect();
    Ok(CredentialPlan {
        credential: cred.name.clone(),
        blocked_until: blocked.map(rfc3339),
        jobs: job_plans,
        pools,
    })
}

/// A job of inputs' progress (`None` for another job), its time to
/// finish for runs that meet a refusal as `runs` says, at a conditional
/// job's expected cost when its share of 304s is known; and what that
/// time assumes.
fn progress(
    job: &Job,
    cursor: Option<&Cursor>,
    failures: (u64, Vec<FailedInput>),
    usage: &crate::ledger::CredentialUsage,
    (share, runs): (Option<&ObservedShare>, Runs),
) -> Result<(
    Option<inputs_progress::InputsProgress>,
    Option<FinishAssumes>,
)> {
    let mut progress =
        inputs_progress::progress(job, cursor, failures, usage).map_err(|source| {
            crate::Error::Io {
                what: "read the inputs of",
                path: (job.inputs.as_ref())
                    .map(|i| i.file.clone())
                    .unwrap_or_default(),
                source,
            }
        })?;
    let expected = share
        .filter(|o| o.expected_units_per_run.is_some())
        .map(|o| &o.expected);
    let finish = (progress.as_mut()).map(|p| inputs::finish(job, p, usage, expected, runs));
    Ok((progress, finish))
}

/// `plan` of a job's next run within what it may take (`cap`, its share's;
/// `None`: all that remains), what it took then taken from `remaining`
/// for the jobs planned after it.
fn within(
    remaining: &mut cost::RemainingUnits,
    cap: Option<cost::RemainingUnits>,
    plan: impl FnOnce(&mut cost::RemainingUnits) -> NextRun,
) -> NextRun {
    let Some(cap) = cap else {
        return plan(remaining);
    };
    let mut mine = remaining.clone();
    for (place, left) in &mut mine {
        *left = (*left).min(cap.get(place).copied().unwrap_or(*left));
    }
    let before = mine.clone();
    let next = plan(&mut mine);
    for (place, left) in remaining.iter_mut() {
        let took = |m: &cost::RemainingUnits| m.get(place).copied().unwrap_or(0);
        *left = left.saturating_sub(took(&before).saturating_sub(took(&mine)));
    }
    next
}

/// How `job`, run every `every`, meets the credential's windows beside its
/// other `scheduled` jobs.
fn schedule_plan(
    cred: &Credential,
    job: &Job,
    every: Duration,
    scheduled: &[Scheduled],
    log: &CredentialLog,
) -> SchedulePlan {
    // (what the credential's scheduled jobs spend a run: this one's too)
    let units = (scheduled.iter().find(|s| s.job == job.name))
        .map_or_else(|| cost::units_per_run(job), |s| s.units.clone());
    SchedulePlan {
        every_seconds: every.as_secs(),
        runs_per_day: schedule::runs_per_day(every),
        units_per_day: units
            .iter()
            .map(|(p, u)| (p.clone(), schedule::units_per_day(*u, every)))
            .collect(),
        windows: schedule::window_needs(&cred.pools, &units, every, scheduled),
        runs_out: simulate::runs_out(&cred.pools, &job.name, scheduled, log),
        fastest_every_seconds: schedule::fastest(&cred.pools, &job.name, &units, scheduled),
    }
}
