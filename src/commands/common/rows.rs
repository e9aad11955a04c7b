//! A job's rows as the commands name and check them: where they go
//! (`check` prints it, `run --dry-run` shows it), and that no job's database
//! is one of the embedded store's files (`check`, and `run` before it opens
//! the store).

use crate::config::{Config, Job};
use crate::ledger::StoreLocation;
use crate::{Error, Result};

/// No job's database is one of the embedded store's files (by any
/// spelling): `check`, and `run` before it opens the store.
pub fn rows_apart<'j>(
    config: &Config,
    jobs: impl IntoIterator<Item = &'j Job>,
    store: &StoreLocation,
) -> Result<()> {
    for job in jobs {
        let Some(spec) = &job.sqlite else { continue };
        if let Some(why) = crate::sink::sqlite::apart::store_file(&spec.path, store) {
            return Err(Error::Config {
                file: config.file.clone(),
                field: format!("jobs.{}.output.sqlite.path", job.name),
                message: format!("{} {why}", spec.path.display()),
            });
        }
    }
    Ok(())
}

/// Where a job's rows go, each table (SQLite's, PostgreSQL's) as
/// [`rows_at`] and [`postgres_at`] name it, joined (none: no table).
pub fn rows_of(job: &Job) -> Option<String> {
    let all: Vec<String> = (job.sqlite.iter().map(rows_at))
        .chain(job.postgres.iter().map(postgres_at))
        .collect();
    (!all.is_empty()).then(|| all.join("; and "))
}

/// Where a job's PostgreSQL rows go: the server (never the password: read
/// here from its secret's source when the command did not read it), the
/// table and its search column.
pub fn postgres_at(p: &crate::config::PostgresOutput) -> String {
    let server = postgres_server(p);
    let search = if p.search.is_empty() {
        String::new()
    } else {
        format!(
            ", searched in its column search ({}: {})",
            p.search_language,
            p.search.join(", ")
        )
    };
    format!(
        "PostgreSQL at {server}, table {}, items {}, key {}{search}",
        p.table_name(),
        if p.items.is_empty() {
            "(the page)"
        } else {
            &p.items
        },
        if p.key.is_empty() {
            "(the input's key)"
        } else {
            &p.key
        }
    )
}

/// The server of a job's PostgreSQL table as messages name it (the URL
/// read from its source if the command did not), never its password.
pub fn postgres_server(p: &crate::config::PostgresOutput) -> String {
    let spec = crate::sink::postgres::with_url_read(p);
    crate::sink::postgres::server_of(&spec).unwrap_or_else(|| match &p.url_source {
        Some(source) => format!("the server in {source}"),
        None => "the server of its url".into(),
    })
}

/// Where a job's rows go: the database, its table, its full-text index
/// and its typed columns.
pub fn rows_at(s: &crate::config::SqliteOutput) -> String {
    let search = if s.search.is_empty() {
        String::new()
    } else {
        let cols: Vec<&str> = s.search.iter().map(|(c, _)| c.as_str()).collect();
        format!(", searched in {} ({})", s.search_table(), cols.join(", "))
    };
    let columns: String = (s.columns.iter().enumerate())
        .map(|(i, c)| {
            let (sep, name, kind) = (
                if i == 0 { ", columns " } else { ", " },
                &c.name,
                c.kind.name(),
            );
            format!("{sep}{name} {kind} at {}", c.pointer)
        })
        .collect();
    format!(
        "{} table {}, items {}, key {}{search}{columns}",
        s.path.display(),
        s.table,
        if s.items.is_empty() {
            "(the page)"
        } else {
            &s.items
        },
        if s.key.is_empty() {
            "(the input's key)"
        } else {
            &s.key
        }
    )
}
