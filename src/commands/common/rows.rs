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
