//! The job's outputs in a run: its table opened before the first charge
//! (the folder is `prepare_folder`'s), what an output that cannot take a
//! page is as the run's error, each page's rows counted.

use tracing::warn;

use super::JobRun;
use crate::sink::sqlite::SinkError;
use crate::sink::{OutputError, PageRows, Sqlite};
use crate::{Error, Result};

impl JobRun<'_> {
    /// Open the job's table (made if missing) before the first charge: a
    /// table of another shape is the configuration's error (78).
    pub(super) async fn open_sink(&mut self, spec: &crate::config::SqliteOutput) -> Result<()> {
        let (spec, name) = (spec.clone(), self.job.name.clone());
        // (a once-job of inputs keeps which run wrote each input's rows)
        let runs = self.job.rows_keep_runs();
        let opened = tokio::task::spawn_blocking(move || Sqlite::open(&spec, &name, runs))
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
        self.outputs.push(std::sync::Arc::new(sink));
        Ok(())
    }

    /// The highest run that wrote results in an output (0: none).
    pub(super) fn highest_run_of_outputs(&self) -> Result<u64> {
        (self.outputs.highest_run()).map_err(|e| self.output_error("", e))
    }

    /// An output that cannot take a page (`name`), as the run's error.
    pub(super) fn output_error(&self, name: &str, e: OutputError) -> Error {
        match e {
            OutputError::File(source) => self.page_error(name, source),
            OutputError::Shape(message) => self.sink_error(SinkError::Shape(message)),
            OutputError::Rows(why) => self.sink_error(SinkError::Io(std::io::Error::other(why))),
            OutputError::Unavailable(why) => Error::ResultsUnavailable(why),
        }
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
    pub(super) fn rows_written(&self, key: &str, name: &str, rows: PageRows) -> Result<()> {
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
}

fn spec_path(spec: Option<&crate::config::SqliteOutput>) -> std::path::PathBuf {
    spec.map(|s| s.path.clone()).unwrap_or_default()
}
