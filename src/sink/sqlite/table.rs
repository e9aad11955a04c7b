//! [`Sqlite`]: a job's table as an [`Output`]: a page's rows made ready
//! on the page's thread ([`prepare`](super::prepare)) and committed with
//! those of the pages that came meanwhile ([`Shared`]); what a validator
//! stands for the key of its page's first row; the inputs done those with
//! rows.

use std::collections::HashSet;
use std::ops::RangeInclusive;
use std::sync::Arc;

use super::group::Shared;
use super::{Sink, SinkError};
use crate::config::SqliteOutput;
use crate::sink::output::{Output, OutputError, Page, ResultsHeld, Wrote};

/// A job's table, open.
pub struct Sqlite {
    shared: Arc<Shared>,
}

impl Sqlite {
    /// Open (or make) the job's table: see [`Sink::open`]; `runs`: keep
    /// which run wrote each input's rows (a once-job of inputs).
    pub fn open(spec: &SqliteOutput, job: &str, runs: bool) -> Result<Self, SinkError> {
        let sink = Sink::open(spec, job, runs)?;
        Ok(Sqlite {
            shared: Arc::new(Shared::new(sink)),
        })
    }
}

impl Output for Sqlite {
    fn write(&self, page: &Page<'_>, wrote: &mut Wrote) -> Result<(), OutputError> {
        if !page.last_step {
            return Ok(());
        }
        let spec = self.shared.spec();
        let prepared = super::prepare(
            spec,
            page.key,
            page.body,
            page.fetched_at.to_string(),
            page.run,
        );
        wrote.held.row = prepared.first_key();
        let rows = self
            .shared
            .write(prepared)
            .map_err(|e| OutputError::Rows(e.to_string()))?;
        wrote.rows = Some(rows);
        Ok(())
    }

    fn holds(&self, held: &ResultsHeld) -> bool {
        held.row
            .as_ref()
            .is_none_or(|k| self.shared.lock().has_row(k).unwrap_or(false))
    }

    fn id(&self) -> Result<(String, bool), String> {
        let spec = self.shared.spec();
        let job = self.shared.lock().job().to_string();
        let shown = |e: rusqlite::Error| format!("{}: {e}", spec.path.display());
        let id = super::id::db_id(&spec.path).map_err(shown)?;
        let holds = super::id::db_has_rows(&spec.path, &spec.table, &job).map_err(shown)?;
        Ok((id, holds))
    }

    fn highest_run(&self) -> Result<u64, OutputError> {
        (self.shared.lock().highest_run()).map_err(|e| OutputError::Rows(e.to_string()))
    }

    fn keys_held(&self, _last: usize) -> HashSet<String> {
        self.shared.lock().inputs_with_rows().unwrap_or_else(|e| {
            tracing::warn!("the inputs with rows could not be read: {e}");
            HashSet::new()
        })
    }

    fn has_key(&self, key: &str, _last: usize, runs: &RangeInclusive<u64>) -> bool {
        self.shared
            .lock()
            .rows_of_runs(key, runs)
            .unwrap_or_else(|e| {
                tracing::warn!(
                    "the rows of {} could not be read: {e}",
                    crate::logging::printable(key)
                );
                false
            })
    }

    fn rows(&self) -> bool {
        true
    }

    fn marks_inputs(&self) -> bool {
        self.shared.marks_inputs()
    }

    fn commits(&self) -> Option<(u64, u64)> {
        Some(self.shared.counts())
    }
}
