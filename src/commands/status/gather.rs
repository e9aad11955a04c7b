//! Reading the reports `quota status` shows: each credential's usage and
//! its jobs' cursors from the store, or empty ones for a store that does
//! not exist yet; every format renders these same reports.

use super::CredentialReport;
use crate::Result;
use crate::config::{Config, Credential};
use crate::history::History;
use crate::ledger::{At, CredentialLog, Ledger, Micros, Store, summarize};
use crate::runner::cursor::Cursor;

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
            CredentialReport {
                usage: summarize(&c.name, &c.pools, &empty),
                lost: None,
                lost_advice: "",
                jobs: config
                    .jobs
                    .iter()
                    .filter(|j| config.credential(j).name == c.name)
                    .map(|j| (j.name.clone(), None))
                    .collect(),
            }
        })
        .collect()
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
        let usage = store.usage(&c.name, &c.pools, at).await?;
        let keep = c.longest_window().as_micros() as Micros;
        let lost = history.check(store_id, &c.name, usage.charges_recorded, usage.at, keep);
        let mut jobs = Vec::new();
        for job in config
            .jobs
            .iter()
            .filter(|j| config.credential(j).name == c.name)
        {
            let cursor = store.load_cursor(&job.name).await?;
            jobs.push((job.name.clone(), cursor.as_deref().and_then(Cursor::decode)));
        }
        reports.push(CredentialReport {
            usage,
            lost,
            lost_advice: store.lost_log_advice(),
            jobs,
        });
    }
    // Not saved: only a run, whose charges tell the store what this host
    // has seen, may lower the serial it remembers. Saved here, a loss that
    // status noticed first would never reach the store, and the next run
    // would hand the forgotten budget out again.
    Ok(reports)
}
