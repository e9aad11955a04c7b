//! Rows in PostgreSQL (`output.postgres`): the row model of the SQLite
//! sink (`key` text primary key, `job`, `input`, `fetched_at`
//! timestamptz, `item` jsonb), so that jobs on several hosts sharing one
//! Redis ledger also share one table. A page's rows are upserted in one
//! transaction, committed before the run moves its cursor, so a redone
//! page writes the same rows again and nothing twice, whichever host
//! redoes it. `search` is a generated `tsvector` column with a GIN index,
//! kept by the server itself.
//!
//! One connection a run, opened before the first charge (a server that
//! cannot be reached costs no units), on a thread of its own
//! ([`worker`]); the URL is a secret: messages name the server (`HOST:PORT
//! database DB`), and whatever the server or the client says is masked.
//! Here the error a connection ends with and the run's and `check`'s
//! entries; the connection and its failures are in [`connect`] and
//! [`tls`], the tables' shapes in [`shape`], the rows in [`rows`].

mod connect;
mod count;
mod names;
mod rows;
mod shape;
mod table;
mod tls;
mod worker;

pub use count::{COUNT_TIMEOUT, rows_of_job};
pub use table::Postgres;

use crate::config::postgres_url::{PgUrl, parse_url};
use crate::config::{Masker, PostgresOutput, Secret};

/// Why the database cannot take the job's rows.
#[derive(Debug)]
pub enum PgError {
    /// The server could not be reached (69).
    Unreachable(String),
    /// It refused the login or the database, or the URL is not one (78).
    Refused(String),
    /// A table of another shape than the configuration's (78).
    Shape(String),
    /// The connection was lost (69): the pages committed stay.
    Lost(String),
    /// A statement was refused.
    Rows(String),
}

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreachable(m) => write!(f, "unreachable: {m}"),
            Self::Lost(m) => write!(f, "the connection was lost: {m}"),
            Self::Refused(m) | Self::Shape(m) | Self::Rows(m) => f.write_str(m),
        }
    }
}

impl PgError {
    /// The same error, for another page of its group.
    fn again(&self) -> Self {
        match self {
            Self::Unreachable(t) => Self::Unreachable(t.clone()),
            Self::Refused(t) => Self::Refused(t.clone()),
            Self::Shape(t) => Self::Shape(t.clone()),
            Self::Lost(t) => Self::Lost(t.clone()),
            Self::Rows(t) => Self::Rows(t.clone()),
        }
    }

    /// The same error, the URL and its password masked in its words.
    fn masked(self, masker: &Masker) -> Self {
        let m = |t: String| masker.mask(&t).into_owned();
        match self {
            Self::Unreachable(t) => Self::Unreachable(m(t)),
            Self::Refused(t) => Self::Refused(m(t)),
            Self::Shape(t) => Self::Shape(m(t)),
            Self::Lost(t) => Self::Lost(m(t)),
            Self::Rows(t) => Self::Rows(m(t)),
        }
    }
}

/// The job's URL read, and what masks it (and its password) in messages.
fn url_of(spec: &PostgresOutput) -> Result<(PgUrl, Masker), PgError> {
    let url = parse_url(spec.url.expose()).map_err(PgError::Refused)?;
    let password = table::password_of(&url);
    let secrets: Vec<&Secret> = std::iter::once(&spec.url).chain(&password).collect();
    let masker = Masker::new(&secrets);
    Ok((url, masker))
}

/// The server of `spec`'s URL as messages name it (none: the URL was not
/// read, or is not one).
pub fn server_of(spec: &PostgresOutput) -> Option<String> {
    parse_url(spec.url.expose()).ok().map(|u| u.server())
}

/// `spec` with its URL read from its source where the command did not
/// read it (`status`, `run --dry-run` load no secrets): left unread when
/// it cannot be (the error is the connection's to say).
pub fn with_url_read(spec: &PostgresOutput) -> PostgresOutput {
    let mut spec = spec.clone();
    if spec.url.expose().is_empty()
        && let Some(read) = (spec.url_source.as_ref()).and_then(|s| s.read(&spec.dir).ok())
    {
        spec.url = read;
    }
    spec
}

/// `check`: connect, and check the job's tables as a run's open would,
/// creating nothing. `runs`: the job keeps `TABLE_runs`.
pub fn check(spec: &PostgresOutput, runs: bool) -> Result<(), PgError> {
    let (url, masker) = url_of(spec)?;
    let worker = worker::PgThread::start(&url, None).map_err(|e| e.masked(&masker))?;
    let (spec, names) = (spec.clone(), names::Names::of(spec));
    (worker.call(move |c| shape::fit(c, &spec, &names, runs, false))).map_err(|e| e.masked(&masker))
}

/// A failure of the job's table as a command's error: unreachable or lost
/// 69, refused or of another shape 78 (the file and field named), a
/// statement's failure 1. `file`: the configuration file.
pub fn command_error(e: PgError, file: &std::path::Path, job: &str, server: &str) -> crate::Error {
    let at = |m: &str| format!("PostgreSQL at {server}: {m}");
    match e {
        PgError::Unreachable(_) | PgError::Lost(_) => {
            crate::Error::ResultsUnavailable(at(&e.to_string()))
        }
        PgError::Refused(m) => crate::Error::Config {
            file: file.to_path_buf(),
            field: format!("jobs.{job}.output.postgres.url"),
            message: at(&m),
        },
        PgError::Shape(m) => crate::Error::Config {
            file: file.to_path_buf(),
            field: format!("jobs.{job}.output.postgres.table"),
            message: at(&m),
        },
        PgError::Rows(m) => crate::Error::ResultsUnavailable(at(&m)),
    }
}

/// Open the job's table for a run, on a blocking thread, before its first
/// charge: its error as the run's.
pub async fn open_for_run(
    file: &std::path::Path,
    job: &crate::config::Job,
    spec: &PostgresOutput,
) -> crate::Result<std::sync::Arc<Postgres>> {
    let (spec2, name) = (spec.clone(), job.name.clone());
    let runs = job.rows_keep_runs();
    let opened = tokio::task::spawn_blocking(move || Postgres::open(&spec2, &name, runs))
        .await
        .unwrap_or_else(|e| Err(PgError::Unreachable(format!("the opener failed: {e}"))));
    let server = server_of(spec).unwrap_or_default();
    opened
        .map(std::sync::Arc::new)
        .map_err(|e| command_error(e, file, &job.name, &server))
}
