//! The keys a walk of a job's inputs has seen, so that the first record
//! of a key wins and a later one is skipped: a map in the store, one entry
//! a key, `LINE:RUN` (the line of its first record and the run that read
//! it there), so that a key an earlier run read ahead, never done, is not
//! taken for a repeat when lines move in the part not done.

use std::collections::HashMap;

use tracing::warn;

use super::super::JobRun;
use crate::Result;
use crate::config::Job;
use crate::inputs::Item;
use crate::ledger::StoreError;
use crate::runner::job_state::{JobState, Map};

/// A key's entry in the map of keys seen: the line of its first record and
/// the run that read it (an entry of an older build: its line, run 0).
fn parse_entry(value: &str) -> (u64, u64) {
    let mut parts = value.split(':');
    let line = parts.next().and_then(|l| l.parse().ok()).unwrap_or(0);
    let run = parts.next().and_then(|r| r.parse().ok()).unwrap_or(0);
    (line, run)
}

/// For each entry (key, `LINE:RUN` of its record), given what the map held
/// for it: the line of its key's first record, and the entries to renew
/// (this record's, where the map held a read-ahead of an earlier run past
/// where this run resumed, or its own line from another run).
fn resolve_firsts(
    entries: &[(String, String)],
    held: Vec<String>,
    run: u64,
    resume_line: u64,
) -> (Vec<u64>, Vec<(String, String)>) {
    let mut firsts = Vec::with_capacity(held.len());
    let mut renewed = Vec::new();
    let mut in_batch: HashMap<&str, u64> = HashMap::new();
    for ((key, own), held) in entries.iter().zip(held) {
        let own_line: u64 = own.split(':').next().unwrap_or("0").parse().unwrap_or(0);
        if let Some(first) = in_batch.get(key.as_str()) {
            firsts.push(*first);
            continue;
        }
        let (line, by) = parse_entry(&held);
        let stale = by != run && line >= resume_line;
        let first = if line == own_line || stale {
            if by != run {
                renewed.push((key.clone(), own.clone()));
            }
            own_line
        } else {
            line
        };
        in_batch.insert(key, first);
        firsts.push(first);
    }
    (firsts, renewed)
}

impl JobRun<'_> {
    /// For each record of `items`, the line of the first record of its key
    /// in this walk of the file (its own, unless the key is repeated).
    pub(in crate::runner::job_run) async fn first_lines(&self, items: &[Item]) -> Result<Vec<u64>> {
        let (map, run, resume_line) = match self.feed.borrow().as_ref() {
            Some(f) => (f.seen, f.run, f.resume_line),
            None => return Ok(Vec::new()),
        };
        // (a key's entry: the line of its first record, and the run that
        // read it there)
        let entries: Vec<(String, String)> = items
            .iter()
            .filter_map(|i| match i {
                Item::Record(r) => Some((r.key.clone(), format!("{}:{run}", r.span.line))),
                Item::Skip(_) => None,
            })
            .collect();
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let held = match self.state() {
            Some(state) => match state.put_new(map, &entries).await {
                Ok(held) => Some(held),
                Err(StoreError::Unavailable(e)) => {
                    warn!(
                        job = self.job.name,
                        "cannot keep the keys seen in the store ({e}): repeated keys are looked for in this run only"
                    );
                    None
                }
                Err(e) => return Err(e.into()),
            },
            None => None,
        };
        let held = match held {
            Some(held) => held,
            None => {
                let mut feed = self.feed.borrow_mut();
                let seen = &mut feed.as_mut().expect("a feed").seen_here;
                entries
                    .iter()
                    .map(|(k, v)| seen.entry(k.clone()).or_insert(v.clone()).clone())
                    .collect()
            }
        };
        // An entry an earlier run made past where this one resumed was
        // read ahead, never done: the file may have changed there since,
        // so it is this record's now (not a repeat); one of this run, or
        // of the part done, is the key's first record.
        let (firsts, renewed) = resolve_firsts(&entries, held, run, resume_line);
        if let Some(state) = self.state()
            && let Err(e) = state.put(map, &renewed).await
        {
            warn!(
                job = self.job.name,
                "cannot keep the keys seen in the store: {e}"
            );
        }
        Ok(firsts)
    }
}

/// Forget the keys walk `walk` of `job` (not a once-job) saw.
pub(in crate::runner::job_run) async fn forget_seen(
    state: Option<JobState<'_>>,
    job: &Job,
    walk: u64,
) {
    if let Some(state) = state
        && let Err(e) = state.forget(Map::seen(job.once, walk)).await
    {
        warn!(
            job = job.name,
            "cannot forget the keys the last walk of the inputs saw: {e}"
        );
    }
}
