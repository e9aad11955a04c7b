//! Where a job's results go: a folder of page files, rows in a SQLite
//! table (`output.sqlite`), rows in a PostgreSQL table (`output.postgres`),
//! in any combination. Apart from the job because the run, `check` and the
//! plan all read it.

use std::path::PathBuf;

use super::{Secret, SecretSource};

/// `output.sqlite`: each page's items upserted as rows of `table`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOutput {
    /// The database file (absolute: a relative path is taken from the
    /// config file's folder).
    pub path: PathBuf,
    /// The table's name: letters, digits and `_`, not starting with a digit.
    pub table: String,
    /// Where a page's rows are: a JSON pointer whose `*` parts stand for
    /// every element of an array (`/items/*`); `""` the whole page.
    pub items: String,
    /// The row's key: a JSON pointer inside the row; `""` the input's key
    /// (the region's, for a job of regions).
    pub key: String,
    /// The full-text index `TABLE_search`: (column, pointer inside the
    /// row) per field; empty: no index.
    pub search: Vec<(String, String)>,
    /// Typed columns (`columns`), each a column of the table beside the
    /// row model's, written with the row; empty: none.
    pub columns: Vec<super::Column>,
}

impl SqliteOutput {
    /// The name of the full-text index's table.
    pub fn search_table(&self) -> String {
        format!("{}_search", self.table)
    }
}

/// `output.postgres`: each page's items upserted as rows of `table` in a
/// PostgreSQL database, the row model of `output.sqlite`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresOutput {
    /// The connection URL as read (its password inside, when it has one):
    /// empty when the secrets were not read (`status`, `plan`).
    pub url: Secret,
    /// Where the URL comes from: a secret's source, or none (written in
    /// the file, then without a password).
    pub url_source: Option<SecretSource>,
    /// The config file's folder, where a `file` source is read from.
    pub dir: PathBuf,
    /// The table's schema (`schema.table`); none: the search path's.
    pub schema: Option<String>,
    /// The table's name: letters, digits and `_`, not starting with a digit.
    pub table: String,
    /// As `output.sqlite`'s.
    pub items: String,
    pub key: String,
    /// The pointers inside the row the `search` column (a generated
    /// `tsvector`) is made of; empty: no such column.
    pub search: Vec<String>,
    /// The text search configuration of `search` (`simple` unless named).
    pub search_language: String,
    /// Typed columns, as `output.sqlite`'s.
    pub columns: Vec<super::Column>,
}

impl PostgresOutput {
    /// The table as the configuration names it (`schema.table`).
    pub fn table_name(&self) -> String {
        match &self.schema {
            Some(s) => format!("{s}.{}", self.table),
            None => self.table.clone(),
        }
    }
}

/// The parts of a JSON pointer (RFC 6901), `~1` and `~0` read back; none
/// for `""`. `None` when it is neither `""` nor starts with `/`.
pub fn pointer_parts(pointer: &str) -> Option<Vec<String>> {
    if pointer.is_empty() {
        return Some(Vec::new());
    }
    let rest = pointer.strip_prefix('/')?;
    Some(
        rest.split('/')
            .map(|p| p.replace("~1", "/").replace("~0", "~"))
            .collect(),
    )
}
