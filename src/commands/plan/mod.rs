//! `quota run --dry-run`: planning. No request, no charge, no cursor or lock
//! change: the store is only read. For each job: calls and units per run
//! (the worst case: `max_pages` pages per paginated step); whether the next
//! run fits what remains now, and if not where it would stop; with a
//! `schedule`, how a day of runs meets each window, when the budget would
//! run out, and the fastest schedule that fits. Jobs sharing a credential
//! are planned together, in the file's order. A pool whose budget nothing
//! spreads over its longest window gets a proposed pacing window.
//!
//! This module is the command: it reads the store and puts the plan
//! together. [`cost`] (one run), [`schedule`] (a schedule's steady state),
//! [`simulate`] (a day of runs on the log) and [`pacing`] (a pool's
//! windows) do the arithmetic, [`model`] is the plan as data (what `--json`
//! prints) and [`render`] is the table.

pub(crate) mod cost;
#[cfg(test)]
mod fixtures;
mod model;
mod pacing;
mod render;
mod schedule;
mod simulate;

use std::collections::BTreeMap;
use std::time::Duration;

pub use self::model::{
    CredentialPlan, JobPlan, NextRun, Pacing, Plan, PoolPlan, RunsOut, SchedulePlan, WindowNeed,
};
pub use self::render::render;
use self::schedule::Scheduled;
use super::table::{Paint, emit};
use crate::cli::RunArgs;
use crate::config::{Config, Credential, Job};
use crate::ledger::{At, CredentialLog, Ledger, Store, StoreError, StoreLocation, summarize};
use crate::runner::cursor::Cursor;
use crate::timefmt::rfc3339;
use crate::{ExitStatus, Result};

/// The `quota run --dry-run` command: plan the selected jobs and print the
/// plan as a table or, with `--json`, as JSON.
pub async fn execute(
    config: &Config,
    location: &StoreLocation,
    args: &RunArgs,
) -> Result<ExitStatus> {
    let jobs = config.select_jobs(&args.jobs)?;
    // (a plan of one call set per run would be wrong for a file of inputs)
    not_planned_yet(config, &jobs)?;
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
    let mut plan = build(config, &jobs, store.as_ref(), store_error, location, at).await?;
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

/// Read what the plan needs from the store (nothing is written) and plan.
pub async fn build(
    config: &Config,
    jobs: &[&Job],
    store: Option<&Store>,
    mut store_error: Option<String>,
    location: &StoreLocation,
    at: At,
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
        let mut cursors = BTreeMap::new();
        if let (Some(store), None) = (store, &store_error) {
            match read(store, cred, &cred_jobs, at).await {
                Ok((l, c)) => {
                    now = l.at;
                    log = Some(l);
                    cursors = c;
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
        credentials.push(plan_credential(cred, &cred_jobs, &log, &cursors));
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

/// The credential's log and its jobs' cursors, as they are now.
async fn read(
    store: &Store,
    cred: &Credential,
    jobs: &[&Job],
    at: At,
) -> std::result::Result<(CredentialLog, BTreeMap<String, Cursor>), StoreError> {
    let log = store.read(&cred.name, &cred.pools, at).await?;
    let mut cursors = BTreeMap::new();
    for j in jobs {
        if let Some(c) = store
            .load_cursor(&j.name)
            .await?
            .as_deref()
            .and_then(Cursor::decode)
        {
            cursors.insert(j.name.clone(), c);
        }
    }
    Ok((log, cursors))
}

/// The plan of one credential's jobs, from its log and their cursors.
fn plan_credential(
    cred: &Credential,
    jobs: &[&Job],
    log: &CredentialLog,
    cursors: &BTreeMap<String, Cursor>,
) -> CredentialPlan {
    let usage = summarize(&cred.name, &cred.pools, log);
    let mut remaining = cost::Remaining::new();
    for p in &usage.pools {
        for (i, w) in p.windows.iter().enumerate() {
            remaining.insert((p.pool.clone(), i), w.remaining);
        }
    }
    let blocked = usage.blocked_until;
    let scheduled = schedule::scheduled(jobs);
    let mut job_plans = Vec::new();
    for job in jobs {
        let next_run = match blocked {
            Some(until) => NextRun::Blocked {
                until: rfc3339(until),
            },
            None => cost::next_run(job, cursors.get(&job.name), &mut remaining, cred.observe),
        };
        job_plans.push(JobPlan {
            job: job.name.clone(),
            calls_per_run: job.calls_per_run(),
            units_per_run: cost::units_per_run(job),
            next_run,
            schedule: job
                .schedule
                .map(|every| schedule_plan(cred, job, every, &scheduled, log)),
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
    CredentialPlan {
        credential: cred.name.clone(),
        blocked_until: blocked.map(rfc3339),
        jobs: job_plans,
        pools,
    }
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
    let units = cost::units_per_run(job);
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

/// A job of inputs is run, but not yet planned: a plan of one set of
/// calls per run would be wrong for a file of inputs, and its progress
/// (done, left, when) is the plan it needs (issue 25, part 4).
// TODO(issue 25): plan inputs: done, failed, left and the time to finish.
fn not_planned_yet(config: &Config, jobs: &[&crate::config::Job]) -> Result<()> {
    match jobs.iter().find(|j| j.inputs.is_some()) {
        Some(job) => Err(crate::Error::Config {
            file: config.file.clone(),
            field: format!("jobs.{}.inputs", job.name),
            message: "`run --dry-run` does not plan a job of inputs yet: `quota run` walks it, `quota check` shows what one input costs".into(),
        }),
        None => Ok(()),
    }
}
