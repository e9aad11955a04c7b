//! A conditional or incremental job's output replaced since its last run
//! (probe finding F-304): lost, moved away, rebuilt. Its kept validators
//! would have the upstream answer 304 for pages the new output lacks, run
//! after run, and a 304 writes nothing; its incremental values would have
//! it send only what changed since, the older items never written again.
//! Incremental values name their output as validators do. So each output has an id ([`crate::sink::output_id`]), each
//! validator names the output its page was written to, and the store
//! keeps, per place (this host and configuration file), the id its output
//! had: an id other than the one recorded means the output was replaced,
//! and the validators naming the old one are forgotten. Those of other
//! places' outputs stay: validators are shared by every host on the
//! store, while each host's folder or database is its own (a host whose
//! output holds nothing of the job rightly gets 304s for pages another
//! host holds).

use tracing::{info, warn};

use super::Conditional;
use super::records::{Kept, place_field};
use crate::ledger::Store;
use crate::sink::Outputs;

/// What the ids decide: the fields to forget (validators, incremental
/// values) and those taken as this output's (their new text).
#[derive(Default)]
struct Decided {
    pages: usize,
    values: usize,
    forget: Vec<String>,
    adopt: Vec<(String, String)>,
}

/// Whether a kept entry naming `out` (none: kept before outputs had ids)
/// is forgotten (`Some(false)`), taken as output `id`'s (`Some(true)`) or
/// left (`None`); `recorded`: this place's old id, when it was replaced.
fn decide(out: &Option<String>, recorded: Option<&String>, holds: bool) -> Option<bool> {
    match out {
        Some(out) if recorded == Some(out) => Some(false),
        Some(_) => None,
        None => Some(holds),
    }
}

impl Kept {
    /// Forget the entries of the replaced output, take those kept before
    /// ids as `id`'s, in memory; what the store is to be told.
    fn sort_out(&mut self, id: &str, recorded: Option<&String>, holds: bool) -> Decided {
        let mut d = Decided::default();
        let at = (id, recorded, holds);
        d.pages = sort_map(&mut self.pages, |v| &mut v.out, at, &mut d);
        d.values = sort_map(&mut self.since, |v| &mut v.out, at, &mut d);
        d
    }
}

/// One map of kept entries (validators, or incremental values) sorted
/// out as [`decide`] says: those forgotten removed and added to
/// `d.forget`, those adopted renamed `id`'s and added to `d.adopt` as the
/// store keeps them (JSON); how many were forgotten.
fn sort_map<V: serde::Serialize>(
    map: &mut std::collections::HashMap<String, V>,
    out: fn(&mut V) -> &mut Option<String>,
    (id, recorded, holds): (&str, Option<&String>, bool),
    d: &mut Decided,
) -> usize {
    let before = d.forget.len();
    for (field, v) in map.iter_mut() {
        match decide(out(v), recorded, holds) {
            Some(false) => d.forget.push(field.clone()),
            Some(true) => {
                *out(v) = Some(id.to_string());
                let text = serde_json::to_string(v).expect("kept entries always serialize");
                d.adopt.push((field.clone(), text));
            }
            None => {}
        }
    }
    for f in &d.forget[before..] {
        map.remove(f);
    }
    d.forget.len() - before
}

impl Conditional<'_> {
    /// This run's output id, recorded for this place; the validators and
    /// incremental values of the output it replaced forgotten, said once.
    /// Those kept before outputs had ids are taken as this output's when
    /// it holds pages (or rows) of the job, else forgotten: an upgrade
    /// then neither refetches on every host nor keeps a lost output's.
    /// `config`: the configuration file (with this host, the place);
    /// `outputs`: the job's, open.
    pub(in crate::runner::job_run) async fn forget_replaced_output(
        &self,
        store: Option<&Store>,
        config: &std::path::Path,
        outputs: &Outputs,
    ) {
        let job = self.job;
        if !self.keeps() || outputs.is_empty() || store.is_none() || !self.kept.borrow().read {
            return;
        }
        let outputs = outputs.clone();
        let found = tokio::task::spawn_blocking(move || outputs.id()).await;
        let (id, holds) = match found.unwrap_or_else(|e| Err(e.to_string())) {
            Ok(found) => found,
            Err(e) => {
                warn!(
                    job = job.name,
                    "cannot read or make the id of the job's output ({e}): a lost output is not noticed in this run"
                );
                return;
            }
        };
        let config = std::fs::canonicalize(config).unwrap_or_else(|_| config.to_path_buf());
        let place = place_field(&crate::runner::hostname(), &config);
        let (replaced, d) = {
            let mut kept = self.kept.borrow_mut();
            kept.output = Some(id.clone());
            let recorded = kept.places.get(&place).filter(|r| **r != id).cloned();
            (
                recorded.is_some(),
                kept.sort_out(&id, recorded.as_ref(), holds),
            )
        };
        if !d.forget.is_empty() {
            let why = if replaced {
                "was replaced since its last run here"
            } else {
                "holds nothing of it, and validators were kept before outputs had ids"
            };
            warn!(
                job = job.name,
                "the output of job {} {why}: its {} validator(s) and {} incremental value(s) are forgotten, the pages are fetched in full",
                job.name,
                d.pages,
                d.values
            );
        } else if !d.adopt.is_empty() {
            info!(
                job = job.name,
                "{} validator(s) and incremental value(s) kept before outputs had ids are this output's",
                d.adopt.len()
            );
        }
        let entries: Vec<(String, String)> = (d.forget.iter())
            .map(|f| (f.clone(), String::new()))
            .chain(d.adopt.iter().cloned())
            .collect();
        let stored = self.put(store, &entries).await;
        // (only once the store forgot them: else the next run, finding its
        // id recorded, would send the old output's validators again)
        if stored && self.kept.borrow().places.get(&place) != Some(&id) {
            self.put(store, &[(place, id)]).await;
        }
    }
}
