//! `output.sqlite` in a run: the job's table opened before the first
//! charge, each page's rows counted, the inputs that have rows.

use tracing::warn;

use super::JobRun;
use crate::sink::sqlite::group::Shared;
use crate::sink::sqlite::{PageRows, Sink, SinkError};
use crate::{Error, Result};

impl JobRun<'_> {
    /// Open the job's table (made if missing) before the first charge: a
    /// table of another shape is the configuration's error (78).
    pub(super) async fn open_sink(&mut self, spec: &crate::config::SqliteOutput) -> Result<()> {
        let (spec, name) = (spec.clone(), self.job.name.clone());
        // (a once-job of inputs keeps which run wrote each input's rows)
        let runs = self.job.rows_keep_runs();
        let opened = tokio::task::spawn_blocking(move || Sink::open(&spec, &name, runs))
            .await
            .unwrap_or_else(|e| Err(SinkError::Io(std::io::Error::other(e.to_string()))));
        // (before the first charge, a database that cannot be opened is the
        // configuration's error, as `check` says: 78, not a failed run)
        let sink = opened.map_err(|e| match e {
            SinkError::Shape(_) => self.sink_error(e),
            // (another writer's moment, not the configuration: 75)
            SinkError::Busy(_) => Error::Busy(format!(
                "{}: the results database is {e}; nothing was charged, the next run tries again",
                spec_path(self.job.sqlite.as_ref()).display()
            )),
            other => Error::Config {
                file: self.ctx.config.file.clone(),
                field: format!("jobs.{}.output.sqlite.path", self.job.name),
                message: format!(
                    "{}: cannot open it for rows: {other}",
                    spec_path(self.job.sqlite.as_ref()).display()
                ),
            },
        })?;
        self.sink = Some(std::sync::Arc::new(Shared::new(sink)));
        Ok(())
    }

    /// The inputs with rows of this job in its table (none without one).
    pub(super) fn inputs_with_rows(&self) -> std::collections::HashSet<String> {
        let Some(sink) = &self.sink else {
            return Default::default();
        };
        let sink = sink.lock();
        sink.inputs_with_rows().unwrap_or_else(|e| {
            warn!(
                job = self.job.name,
                "the inputs with rows could not be read: {e}"
            );
            Default::default()
        })
    }

    /// The highest run that wrote rows of this job's inputs (0: none, or
    /// no table).
    pub(super) fn highest_run_of_rows(&self) -> Result<u64> {
        let Some(sink) = &self.sink else {
            return Ok(0);
        };
        let sink = sink.lock();
        sink.highest_run()
            .map_err(|e| self.sink_error(SinkError::Db(e)))
    }

    /// Whether one of `runs` wrote rows of input `key` (see
    /// [`Sink::rows_of_runs`]); a database that cannot say: not.
    pub(super) fn rows_of_runs(&self, key: &str, runs: &std::ops::RangeInclusive<u64>) -> bool {
        let Some(sink) = &self.sink else {
            return false;
        };
        let sink = sink.lock();
        sink.rows_of_runs(key, runs).unwrap_or_else(|e| {
            warn!(
                job = self.job.name,
                "the rows of {} could not be read: {e}",
                crate::logging::printable(key)
            );
            false
        })
    }

    /// A database that cannot take the rows, as the run's error: a table of
    /// another shape is the configuration's (78), the rest I/O.
    pub(super) fn sink_error(&self, e: SinkError) -> Error {
        let spec = self.job.sqlite.as_ref();
        let path = spec.map(|s| s.path.clone()).unwrap_or_default();
        match e {
            SinkError::Shape(message) => Error::Config {
                file: self.ctx.config.file.clone(),
                field: format!("jobs.{}.output.sqlite.table", self.job.name),
                message: format!("{}: {message}", path.display()),
            },
            other => Error::Io {
                what: "write rows in",
                path,
                source: std::io::Error::other(other.to_string()),
            },
        }
    }

    /// Count a page's rows; warn of items without a key (and a page that
    /// is not JSON, which has none).
    pub(super) fn rows_written(
        &self,
        key: &str,
        name: &str,
        rows: rusqlite::Result<PageRows>,
    ) -> Result<()> {
        let rows = rows.map_err(|e| self.sink_error(SinkError::Db(e)))?;
        if rows.not_json {
            warn!(
                job = self.job.name,
                "{name}: the page is not JSON: no rows from it"
            );
        }
        let items = self.job.sqlite.as_ref().map_or("", |s| s.items.as_str());
        if rows.no_items {
            warn!(
                job = self.job.name,
                "{name}: nothing at {items} in the page of {key} (not even an empty array): no rows from it"
            );
        }
        if rows.without_key > 0 {
            let spec = self
                .job
                .sqlite
                .as_ref()
                .map(|s| s.key.as_str())
                .unwrap_or("");
            warn!(
                job = self.job.name,
                "{name}: {} item(s) of {key} without a key at {spec}: skipped", rows.without_key
            );
        }
        let mut report = self.report.borrow_mut();
        if let Some(r) = report.rows.as_mut() {
            r.upserted += rows.rows;
            r.new += rows.new;
            r.without_key += rows.without_key;
        }
        report.pages_without_items += u64::from(rows.no_items);
        Ok(())
    }

    /// Whether the table holds the row of `key` (no table: not; a
    /// database that cannot say: not, so the page is asked in full).
    pub(super) fn has_row(&self, key: &str) -> bool {
        let Some(sink) = &self.sink else {
            return false;
        };
        let sink = sink.lock();
        sink.has_row(key).unwrap_or(false)
    }
}

fn spec_path(spec: Option<&crate::config::SqliteOutput>) -> std::path::PathBuf {
    spec.map(|s| s.path.clone()).unwrap_or_default()
}
