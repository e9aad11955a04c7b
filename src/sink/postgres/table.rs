//! [`Postgres`]: a job's PostgreSQL table as an [`Output`], as
//! [`crate::sink::Sqlite`] is for SQLite: a page's rows made ready on the
//! page's thread (the SQLite sink's own `prepare`, one row model for
//! both) and upserted on the connection's thread with those of the pages
//! that came meanwhile; what a validator stands
//! for the key of its page's first row; the inputs done those with rows.

use std::collections::HashSet;
use std::ops::RangeInclusive;
use std::sync::Mutex;

use super::names::Names;
use super::worker::{PgTable, PgThread};
use super::{PgError, rows};
use crate::config::{Masker, PostgresOutput, Secret, SqliteOutput};
use crate::sink::output::{Output, OutputError, Page, ResultsHeld, Wrote};

/// A job's table, its connection open.
pub struct Postgres {
    worker: PgThread,
    names: Names,
    job: String,
    /// A once-job of inputs: `TABLE_runs` says which run wrote each
    /// input's rows.
    runs: bool,
    /// `items` and `key`, as the row preparer of the SQLite sink takes them.
    rows_spec: SqliteOutput,
    /// The server as messages name it, and what masks the URL in them.
    server: String,
    masker: Masker,
    /// `(commits, pages)` written.
    counts: Mutex<(u64, u64)>,
}

impl Postgres {
    /// Connect, and make (or check) the job's tables: `runs`, keep which
    /// run wrote each input's rows (a once-job of inputs).
    pub fn open(spec: &PostgresOutput, job: &str, runs: bool) -> Result<Self, PgError> {
        let (url, masker) = super::url_of(spec)?;
        let server = url.server();
        let names = Names::of(spec);
        let table = PgTable {
            names: names.clone(),
            job: job.to_string(),
            columns: spec.columns.clone(),
            runs,
        };
        let worker = PgThread::start(&url, Some(table)).map_err(|e| e.masked(&masker))?;
        let (fit_spec, fit_names) = (spec.clone(), names.clone());
        worker
            .call(move |c| super::shape::fit(c, &fit_spec, &fit_names, runs, true))
            .map_err(|e| e.masked(&masker))?;
        Ok(Self {
            worker,
            names,
            job: job.to_string(),
            runs,
            rows_spec: SqliteOutput {
                path: Default::default(),
                table: spec.table.clone(),
                items: spec.items.clone(),
                key: spec.key.clone(),
                search: Vec::new(),
                columns: spec.columns.clone(),
            },
            server,
            masker,
            counts: Mutex::new((0, 0)),
        })
    }

    /// The server as messages name it (`HOST:PORT database DB`).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Run `f` on the connection, its error masked.
    fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut postgres::Client, &Names, &str) -> Result<R, PgError> + Send + 'static,
    ) -> Result<R, PgError> {
        let (names, job) = (self.names.clone(), self.job.clone());
        (self.worker.call(move |c| f(c, &names, &job))).map_err(|e| e.masked(&self.masker))
    }

    /// An error of the connection, as the run takes it.
    fn output_error(&self, e: PgError) -> OutputError {
        let at = |m: String| format!("PostgreSQL at {}: {m}", self.server);
        match e {
            PgError::Unreachable(_) | PgError::Lost(_) | PgError::Refused(_) => {
                OutputError::Unavailable(at(format!(
                    "{e}; the pages committed stay, the next run redoes the rest"
                )))
            }
            PgError::Shape(m) => OutputError::Shape(at(m)),
            PgError::Rows(m) => OutputError::Rows(at(m)),
        }
    }

    fn warned<T>(&self, what: &str, r: Result<T, PgError>, or: T) -> T {
        r.unwrap_or_else(|e| {
            tracing::warn!(
                job = self.job,
                "PostgreSQL at {}: {what} could not be read: {e}",
                self.server
            );
            or
        })
    }
}

impl Output for Postgres {
    fn write(&self, page: &Page<'_>, wrote: &mut Wrote) -> Result<(), OutputError> {
        if !page.last_step {
            return Ok(());
        }
        let prepared = crate::sink::sqlite::prepare(
            &self.rows_spec,
            page.key,
            page.body,
            page.fetched_at.to_string(),
            page.run,
        );
        wrote.held.row = prepared.first_key();
        let (found, first) =
            (self.worker.write(prepared)).map_err(|e| self.output_error(e.masked(&self.masker)))?;
        if let Ok(mut counts) = self.counts.lock() {
            counts.0 += u64::from(first);
            counts.1 += 1;
        }
        wrote.rows = Some(found);
        Ok(())
    }

    fn holds(&self, held: &ResultsHeld) -> bool {
        let Some(key) = held.row.clone() else {
            return true;
        };
        let held = self.call(move |c, names, _| rows::has_row(c, names, &key));
        self.warned("a row", held, false)
    }

    fn id(&self) -> Result<(String, bool), String> {
        (self.call(rows::id)).map_err(|e| format!("PostgreSQL at {}: {e}", self.server))
    }

    fn highest_run(&self) -> Result<u64, OutputError> {
        if !self.runs {
            return Ok(0);
        }
        (self.call(rows::highest_run)).map_err(|e| self.output_error(e))
    }

    fn keys_held(&self, _last: usize) -> HashSet<String> {
        let held = self.call(rows::inputs_with_rows);
        self.warned("the inputs with rows", held, HashSet::new())
    }

    fn has_key(&self, key: &str, _last: usize, runs: &RangeInclusive<u64>) -> bool {
        if !self.runs {
            return false;
        }
        let key = key.to_string();
        let run = self.call(move |c, names, job| rows::run_of(c, names, job, &key));
        let run = self.warned("the run of an input's rows", run, None);
        run.is_some_and(|r| r >= 0 && runs.contains(&(r as u64)))
    }

    fn rows(&self) -> bool {
        true
    }

    fn marks_inputs(&self) -> bool {
        self.runs
    }

    fn commits(&self) -> Option<(u64, u64)> {
        self.counts.lock().ok().map(|c| *c)
    }
}

/// (the URL's password, for the masker: [`Secret`] is what masks)
pub(super) fn password_of(url: &crate::config::postgres_url::PgUrl) -> Option<Secret> {
    (url.config.get_password())
        .map(|p| Secret::new(String::from_utf8_lossy(p).into_owned()))
        .filter(|s| !s.expose().is_empty())
}
