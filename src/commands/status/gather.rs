//! Reading the reports `portion status` shows: each credential's usage and
//! its jobs' cursors from the store, or empty ones for a store that does
//! not exist yet; every format renders these same reports.

use std::collections::BTreeMap;

use tracing::warn;

use super::CredentialReport;
use crate::Result;
use crate::commands::common::inputs::{self, FailedInput, InputsProgress, progress};
use crate::commands::common::shares::{self, ShareUsage};
use crate::config::{Config, Credential, Job};
use crate::history::History;
use crate::ledger::JobStore;
use crate::ledger::{At, CredentialLog, CredentialUsage, Ledger, Micros, Store, summarize};
use crate::runner::cursor::Cursor;
use crate::runner::job_state::{JobState, NotModified};
use crate::runner::upstream_limits;

/// The reports of a store that does not exist yet: nothing charged,
/// nothing blocked, no job has run.
pub(super) fn nothing_charged(
    config: &Config,
    credentials: &[&Credential],
) -> Vec<CredentialReport> {
    let now = chrono::Utc::now().timestamp_micros();
    credentials
        .iter()
        .map(|c| {
            let empty = CredentialLog {
                at: now,
                serial: 0,
                blocked_until: 0,
                blocked_reason: String::new(),
                retain: 0,
                tags: Vec::new(),
                pools: vec![Vec::new(); c.pools.len()],
                lost: vec![0; c.pools.len()],
                others: vec![Default::default(); c.pools.len()],
                observed: vec![(0, 0); c.pools.len()],
                reserved: vec![Vec::new(); c.pools.len()],
            };
            let usage = summarize(&c.name, &c.pools, &empty);
            let shares = shares::usage(c, &usage.pools, &[], usage.at);
            let jobs: Vec<&Job> = config
                .jobs
                .iter()
                .filter(|j| config.credential(j).name == c.name)
                .collect();
            let inputs = jobs
                .iter()
                .filter_map(|j| {
                    let p = progress_or_warn(j, None, Default::default(), &usage)?;
                    Some((j.name.clone(), p))
                })
                .collect();
            CredentialReport {
                usage,
                lost: None,
                lost_advice: "",
                upstream: BTreeMap::new(),
                learned: c.learned.iter().map(|l| (l.clone(), None)).collect(),
                jobs: jobs.iter().map(|j| (j.name.clone(), None)).collect(),
                inputs,
                shares,
                not_modified: jobs
                    .iter()
                    .filter(|j| conditional(j))
                    .map(|j| (j.name.clone(), NotModified::default()))
                    .collect(),
                waiting: BTreeMap::new(),
                tables: BTreeMap::new(),
            }
        })
        .collect()
}

/// A job of inputs' progress; a file that cannot be read now is warned
/// about (the report goes on: the run will say more).
fn progress_or_warn(
    job: &Job,
    cursor: Option<&Cursor>,
    failed: (u64, Vec<FailedInput>),
    usage: &CredentialUsage,
) -> Option<InputsProgress> {
    match progress(job, cursor, failed, usage) {
        Ok(p) => p,
        Err(e) => {
            let file = job.inputs.as_ref().map(|i| i.file.display().to_string());
            warn!(
                job = job.name,
                "cannot read the inputs {} to count those left: {e}",
                file.unwrap_or_default()
            );
            None
        }
    }
}

pub(super) fn select<'a>(config: &'a Config, name: Option<&str>) -> Result<Vec<&'a Credential>> {
    match name {
        None => Ok(config.credentials.iter().collect()),
        Some(n) => Ok(vec![config.credential_named(n)?]),
    }
}

/// Read every credential's usage and its jobs' cursors.
pub async fn read(
    config: &Config,
    store: &Store,
    store_id: &str,
    credentials: &[&Credential],
    at: At,
) -> Result<Vec<CredentialReport>> {
    let mut history = History::open(); // (read, compared, never saved)
    let mut reports = Vec::new();
    for c in credentials {
        let upstream = upstream_limits::read(store, &c.name).await?;
        let pools = upstream_limits::with_learned(c, &upstream);
        let (usage, shares) = usage_and_shares(store, c, &pools, at).await?;
        let learned = (c.learned.iter())
            .map(|l| (l.clone(), upstream_limits::learned_limit(c, l, &upstream)))
            .collect();
        let keep = c.longest_window().as_micros() as Micros;
        let lost = history.check(store_id, &c.name, usage.charges_recorded, usage.at, keep);
        let mut jobs = Vec::new();
        let mut inputs = BTreeMap::new();
        let mut not_modified = BTreeMap::new();
        let mut waiting = BTreeMap::new();
        for job in config
            .jobs
            .iter()
            .filter(|j| config.credential(j).name == c.name)
        {
            let cursor = store.load_cursor(&job.name).await?;
            let cursor = cursor.as_deref().and_then(Cursor::decode);
            if job.inputs.is_some() {
                let failed = inputs::failures(store, job).await?;
                if let Some(mut p) = progress_or_warn(job, cursor.as_ref(), failed, &usage) {
                    p.blocked = inputs::blocked(store, job, cursor.as_ref()).await?;
                    inputs.insert(job.name.clone(), p);
                }
            }
            if conditional(job) {
                not_modified.insert(job.name.clone(), counts(store, job).await?);
            }
            // (a wait noted by a run that ended without forgetting it, a
            // kill, is past its time soon: only one to come is shown)
            let noted = JobState::new(store, &job.name).waiting().await?;
            if let Some(w) = noted.filter(|w| w.until > chrono::Utc::now().timestamp_micros()) {
                waiting.insert(job.name.clone(), w);
            }
            jobs.push((job.name.clone(), cursor));
        }
        reports.push(CredentialReport {
            learned,
            usage,
            lost,
            lost_advice: store.lost_log_advice(),
            upstream,
            jobs,
            inputs,
            not_modified,
            waiting,
            shares,
            tables: BTreeMap::new(),
        });
    }
    // Not saved: only a run, whose charges tell the store what this host
    // has seen, may lower the serial it remembers. Saved here, a loss that
    // status noticed first would never reach the store, and the next run
    // would hand the forgotten budget out again.
    Ok(reports)
}

/// A credential's usage and its shares' figures, in one read of the store
/// (its pools, then its share pools, which the usage then leaves out).
async fn usage_and_shares(
    store: &Store,
    c: &Credential,
    learned: &[crate::ledger::Pool],
    at: At,
) -> Result<(CredentialUsage, Vec<ShareUsage>)> {
    let mut pools = learned.to_vec();
    pools.extend(shares::pools_of(c));
    let mut usage = store.usage(&c.name, &pools, at).await?;
    let read = usage.pools.split_off(c.pools.len());
    // Observe mode: a call over a share's limit is counted by the store on
    // the share's pool; it is a call of its pool all the same.
    for (i, r) in read.iter().enumerate() {
        if let Some(p) = usage.pools.get_mut(i % c.pools.len().max(1)) {
            p.observed_rejections += r.observed_rejections;
            p.observed_at = p.observed_at.max(r.observed_at);
        }
    }
    let shares = shares::usage(c, &usage.pools, &read, usage.at);
    Ok((usage, shares))
}

/// Whether a job has a conditional step (its 304s are counted).
fn conditional(job: &Job) -> bool {
    job.steps.iter().any(|s| s.conditional.is_some())
}

/// A job's calls answered 304 and the units they gave back, as its runs
/// counted them in the store.
async fn counts(store: &Store, job: &Job) -> Result<NotModified> {
    Ok(JobState::new(store, &job.name).not_modified().await?)
}
