//! The job's outputs for a run: opened before the first charge (its
//! table, then its folder, which comes first among them), what an output
//! that cannot take a page is as the run's error, what a page's rows
//! need saying. Free functions of the job: the run holds the [`Outputs`]
//! they open and hands them each page.

use std::path::Path;
use std::sync::Arc;

use tracing::{info, warn};

use crate::config::{Job, SqliteOutput};
use crate::sink::sqlite::SinkError;
use crate::sink::{Files, OutputError, Outputs, PageRows, Sqlite};
use crate::{Error, Result};

/// Open `job`'s outputs (`config`: its file, which errors name) and say
/// the highest run that wrote there (0: none). `locked`: the run holds
/// the job's lock, so what a killed run left in the folder may go.
/// `cursor_run`: the run the store's cursor names, for a warning when
/// the folder is ahead of it.
pub(super) async fn open(
    job: &Job,
    config: &Path,
    locked: bool,
    cursor_run: u64,
) -> Result<(Outputs, u64)> {
    let mut outputs = Outputs::default();
    if let Some(spec) = &job.sqlite {
        outputs.push("sqlite", Arc::new(open_table(job, config, spec).await?));
    }
    if let Some(spec) = &job.postgres {
        outputs.push(
            "postgres",
            crate::sink::postgres::open_for_run(config, job, spec).await?,
        );
    }
    if let Some(dir) = &job.output {
        outputs.put_first(Arc::new(prepare_folder(job, dir, locked, cursor_run)?));
    }
    let highest = (outputs.highest_run()).map_err(|e| error(job, config, "", e))?;
    Ok((outputs, highest))
}

/// Open the job's table (made if missing) before the first charge: a
/// table of another shape is the configuration's error (78).
async fn open_table(job: &Job, config: &Path, spec: &SqliteOutput) -> Result<Sqlite> {
    let (spec, name) = (spec.clone(), job.name.clone());
    // (a once-job of inputs keeps which run wrote each input's rows)
    let runs = job.rows_keep_runs();
    let path = spec.path.clone();
    let opened = tokio::task::spawn_blocking(move || Sqlite::open(&spec, &name, runs))
        .await
        .unwrap_or_else(|e| Err(SinkError::Io(std::io::Error::other(e.to_string()))));
    // (before the first charge, a database that cannot be opened is the
    // configuration's error, as `check` says: 78, not a failed run)
    opened.map_err(|e| match e {
        SinkError::Shape(_) => sink_error(job, config, e),
        // (another writer's moment, not the configuration: 75)
        SinkError::Busy(_) => Error::Busy(format!(
            "{}: the results database is {e}; nothing was charged, the next run tries again",
            path.display()
        )),
        other => Error::Config {
            file: config.to_path_buf(),
            field: format!("jobs.{}.output.sqlite.path", job.name),
            message: format!("{}: cannot open it for rows: {other}", path.display()),
        },
    })
}

/// Make the output folder, remove what a killed run left there (only
/// while this run holds the job's lock: an unmetered run could be racing
/// a run that has it) and check it takes a file.
fn prepare_folder(job: &Job, dir: &Path, locked: bool, cursor_run: u64) -> Result<Files> {
    let mode = crate::atomic_file::file_mode().map_err(Error::Usage)?;
    let (files, prepared) =
        Files::open(dir, &job.name, mode, locked).map_err(|source| Error::Io {
            what: "prepare the output folder",
            path: dir.to_path_buf(),
            source,
        })?;
    if prepared.removed > 0 {
        info!(
            job = job.name,
            "removed {} temporary file(s) a killed run left", prepared.removed
        );
    }
    if prepared.highest_run > cursor_run {
        warn!(
            job = job.name,
            "{} holds pages of run {} but the store's cursor says run {cursor_run} (a new or reset store?): this run is run {}, so no page is replaced",
            dir.display(),
            prepared.highest_run,
            prepared.highest_run.saturating_add(1)
        );
    }
    // A folder that takes no page would fail every page after its
    // charge and its call: stop before the first.
    job.output_writable().map_err(|(path, source)| Error::Io {
        what: "write pages in",
        path,
        source,
    })?;
    Ok(files)
}

/// An output that cannot take a page (`name`), as the run's error.
pub(super) fn error(job: &Job, config: &Path, name: &str, e: OutputError) -> Error {
    match e {
        OutputError::File(source) => page_error(job, name, source),
        OutputError::Shape(message) => sink_error(job, config, SinkError::Shape(message)),
        OutputError::Rows(why) => {
            sink_error(job, config, SinkError::Io(std::io::Error::other(why)))
        }
        OutputError::Unavailable(why) => Error::ResultsUnavailable(why),
    }
}

/// A page file that could not be written, as the run reports it.
fn page_error(job: &Job, name: &str, source: std::io::Error) -> Error {
    let path = job.output.clone().unwrap_or_default().join(name);
    if source.kind() == std::io::ErrorKind::AlreadyExists {
        Error::PageExists {
            job: job.name.clone(),
            path,
        }
    } else {
        Error::Io {
            what: "write",
            path,
            source,
        }
    }
}

/// A database that cannot take the rows, as the run's error: a table of
/// another shape is the configuration's (78), the rest I/O.
fn sink_error(job: &Job, config: &Path, e: SinkError) -> Error {
    let path = (job.sqlite.as_ref())
        .map(|s| s.path.clone())
        .unwrap_or_default();
    match e {
        SinkError::Shape(message) => Error::Config {
            file: config.to_path_buf(),
            field: format!("jobs.{}.output.sqlite.table", job.name),
            message: format!("{}: {message}", path.display()),
        },
        other => Error::Io {
            what: "write rows in",
            path,
            source: std::io::Error::other(other.to_string()),
        },
    }
}

/// Warn of a page's items without a key (and of a page that is not JSON,
/// or has nothing at `items`, which have no rows).
pub(super) fn say_rows(job: &Job, key: &str, name: &str, rows: &PageRows) {
    // (a job with both tables: named as its SQLite table says them)
    let (items, at) = match (&job.sqlite, &job.postgres) {
        (Some(s), _) => (s.items.as_str(), s.key.as_str()),
        (None, Some(p)) => (p.items.as_str(), p.key.as_str()),
        (None, None) => ("", ""),
    };
    if rows.not_json {
        warn!(
            job = job.name,
            "{name}: the page is not JSON: no rows from it"
        );
    }
    if rows.no_items {
        warn!(
            job = job.name,
            "{name}: nothing at {items} in the page of {key} (not even an empty array): no rows from it"
        );
    }
    if rows.without_key > 0 {
        warn!(
            job = job.name,
            "{name}: {} item(s) of {key} without a key at {at}: skipped", rows.without_key
        );
    }
}
