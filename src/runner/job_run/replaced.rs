//! A conditional job's output replaced since its last run (probe finding
//! F-304): lost, moved away, rebuilt. Its kept validators would have the
//! upstream answer 304 for pages the new output lacks, run after run, and
//! a 304 writes nothing. So each output has an id ([`output_id`]), each
//! validator names the output its page was written to, and the store
//! keeps, per place (this host and configuration file), the id its output
//! had: an id other than the one recorded means the output was replaced,
//! and the validators naming the old one are forgotten. Those of other
//! places' outputs stay: validators are shared by every host on the
//! store, while each host's folder or database is its own (a host whose
//! output holds nothing of the job rightly gets 304s for pages another
//! host holds).

use tracing::{info, warn};

use super::JobRun;
use super::conditional::place_field;
use crate::runner::output_id;

impl JobRun<'_> {
    /// This run's output id, recorded for this place; the validators of
    /// the output it replaced forgotten, said once. Validators kept before
    /// outputs had ids are taken as this output's when it holds pages (or
    /// rows) of the job, else forgotten: an upgrade then neither refetches
    /// on every host nor keeps a lost output's validators. `folder_run`:
    /// the highest run of the job's pages in its folder.
    pub(super) async fn forget_replaced_output(&self, folder_run: u64) {
        let job = self.job;
        if !job.steps.iter().any(|s| s.conditional.is_some())
            || (job.output.is_none() && job.sqlite.is_none())
            || self.meter.store().is_none()
            || !self.kept.borrow().read
        {
            return;
        }
        let (id, holds) = match self.output_id(folder_run).await {
            Ok(found) => found,
            Err(e) => {
                warn!(
                    job = job.name,
                    "cannot read or make the id of the job's output ({e}): a lost output is not noticed in this run"
                );
                return;
            }
        };
        let config = std::fs::canonicalize(&self.ctx.config.file)
            .unwrap_or_else(|_| self.ctx.config.file.clone());
        let place = place_field(&crate::runner::hostname(), &config);
        let (replaced, forget, adopt) = {
            let mut kept = self.kept.borrow_mut();
            kept.output = Some(id.clone());
            let recorded = kept.places.get(&place).filter(|r| **r != id).cloned();
            let mut forget = Vec::new();
            let mut adopt = Vec::new();
            for (field, v) in kept.pages.iter_mut() {
                match &v.out {
                    Some(out) if recorded.as_ref() == Some(out) => forget.push(field.clone()),
                    Some(_) => {}
                    None if holds => {
                        v.out = Some(id.clone());
                        adopt.push((field.clone(), v.clone()));
                    }
                    None => forget.push(field.clone()),
                }
            }
            for f in &forget {
                kept.pages.remove(f);
            }
            (recorded.is_some(), forget, adopt)
        };
        if !forget.is_empty() {
            let why = if replaced {
                "was replaced since its last run here"
            } else {
                "holds nothing of it, and validators were kept before outputs had ids"
            };
            warn!(
                job = job.name,
                "the output of job {} {why}: its {} validator(s) are forgotten, the pages are fetched in full",
                job.name,
                forget.len()
            );
        } else if !adopt.is_empty() {
            info!(
                job = job.name,
                "{} validator(s) kept before outputs had ids are this output's",
                adopt.len()
            );
        }
        let mut stored = true;
        for f in &forget {
            stored &= self.put_kept(f, "").await;
        }
        for (f, v) in &adopt {
            let text = serde_json::to_string(v).expect("validators always serialize");
            stored &= self.put_kept(f, &text).await;
        }
        // (only once the store forgot them: else the next run, finding its
        // id recorded, would send the old output's validators again)
        if stored && self.kept.borrow().places.get(&place) != Some(&id) {
            self.put_kept(&place, &id).await;
        }
    }

    /// The id of the job's output (its folder's and its database's, with
    /// both: losing either loses what a 304 would not write again), and
    /// whether the output holds pages (and rows) of the job.
    async fn output_id(&self, folder_run: u64) -> Result<(String, bool), String> {
        let job = self.job;
        let mut ids = Vec::new();
        let mut holds = true;
        if let Some(dir) = &job.output {
            ids.push(output_id::folder_id(dir).map_err(|e| format!("{}: {e}", dir.display()))?);
            holds &= folder_run > 0;
        }
        if let Some(spec) = &job.sqlite {
            let (path, table, name) = (spec.path.clone(), spec.table.clone(), job.name.clone());
            let found = tokio::task::spawn_blocking(move || {
                Ok::<_, rusqlite::Error>((
                    output_id::db_id(&path)?,
                    output_id::db_has_rows(&path, &table, &name)?,
                ))
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("{}: {e}", spec.path.display()))?;
            ids.push(found.0);
            holds &= found.1;
        }
        Ok((ids.join("+"), holds))
    }
}
