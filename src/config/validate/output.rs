//! A job's `output`: a folder (`output: PATH`, or `folder`) and/or rows in
//! a SQLite table (`sqlite`). The database itself is `check`'s and the
//! run's to open: this checks what the file says.

use std::path::PathBuf;

use super::*;
use crate::config::pointer_parts;

/// A job's folder, SQLite table and PostgreSQL table, each if named.
type OutputsOfJob = (
    Option<PathBuf>,
    Option<SqliteOutput>,
    Option<crate::config::PostgresOutput>,
);

impl Validator<'_> {
    /// The folder of page files (if any) and the SQLite table (if any).
    pub(super) fn output(&self, at: &str, raw: Value) -> Result<OutputsOfJob> {
        let field = format!("{at}.output");
        if let Value::String(folder) = &raw {
            return Ok((Some(self.folder(&field, folder)?), None, None));
        }
        let raw: RawOutput = serde_yaml::from_value(raw).map_err(|e| {
            self.err(
                &field,
                format!("expected a folder, or {{ folder, sqlite: {{ path, table, items, key, search }}, postgres: {{ url, table, items, key, search, search_language }} }}: {e}"),
            )
        })?;
        let folder = raw
            .folder
            .map(|f| self.folder(&format!("{field}.folder"), &f))
            .transpose()?;
        let sqlite = raw
            .sqlite
            .map(|s| self.sqlite(&format!("{field}.sqlite"), s))
            .transpose()?;
        let postgres = raw
            .postgres
            .map(|p| self.postgres(&format!("{field}.postgres"), p))
            .transpose()?;
        if folder.is_none() && sqlite.is_none() && postgres.is_none() {
            return Err(self.err(
                field,
                "names neither a `folder` nor a `sqlite` nor a `postgres` table: the results would go nowhere",
            ));
        }
        Ok((folder, sqlite, postgres))
    }

    /// Rows keyed by the input (`key: ""`) are one row per input: refused
    /// where an input's results are more than one row, since each would
    /// replace the one before and only the last would stay.
    pub(super) fn rows_keyed(
        &self,
        at: &str,
        sink: &str,
        items: &str,
        key: &str,
        steps: &[Step],
        batched: bool,
    ) -> Result<()> {
        if !key.is_empty() {
            return Ok(());
        }
        let last = steps.last();
        let why = if items.split('/').any(|p| p == "*") {
            Some("`items` takes several rows from each page")
        } else if last.is_some_and(|s| s.paginate.is_some()) {
            Some("the last step has several pages per input")
        } else if last.is_some_and(|s| s.for_each.is_some()) {
            Some("the last step, a fan-out, has several batches per input")
        } else if batched {
            Some("each request carries a batch of inputs")
        } else {
            None
        };
        match why {
            Some(why) => Err(self.err(
                format!("{at}.output.{sink}.key"),
                format!(
                    "\"\" keys each row by its input, but {why}: each row would replace the one \
                     before, leaving one; name a pointer inside the row that tells them apart (an id)"
                ),
            )),
            None => Ok(()),
        }
    }

    /// Jobs writing one table (one database path, one table name) share
    /// its full-text index, so they must agree on `search`: else the first
    /// to run makes the index its way and the other fails every run, even
    /// where `check` found no database yet to compare with.
    pub(super) fn shared_tables(&self, jobs: &[Job]) -> Result<()> {
        let mut seen: Vec<(&str, &SqliteOutput)> = Vec::new();
        for job in jobs {
            let Some(s) = &job.sqlite else { continue };
            let same = |o: &SqliteOutput| {
                o.table.eq_ignore_ascii_case(&s.table) && same_file(&o.path, &s.path)
            };
            // (with the default key, the input's or region's, two jobs
            // over one list replace each other's rows, and a once-job
            // then finds another's rows for its inputs and never fetches)
            if let Some((first, o)) = seen.iter().find(|(_, o)| same(o))
                && (o.key.is_empty() || s.key.is_empty())
            {
                let (field, which) = if s.key.is_empty() {
                    (
                        format!("jobs.{}.output.sqlite.key", job.name),
                        job.name.as_str(),
                    )
                } else {
                    (format!("jobs.{first}.output.sqlite.key"), *first)
                };
                return Err(self.err(
                    field,
                    format!(
                        "jobs {first} and {} both write table '{}' of {}, and {which} names no `key` pointer: \
                         with the default key (the input's or region's) their rows would replace each other's; \
                         jobs may share a table only if each names its own `key` (a pointer inside the row, unique \
                         across them), else give each job its own table",
                        job.name,
                        s.table,
                        s.path.display(),
                    ),
                ));
            }
            if let Some((first, o)) = seen.iter().find(|(_, o)| same(o))
                && o.search != s.search
            {
                let cols = |o: &SqliteOutput| {
                    let p: Vec<&str> = o.search.iter().map(|(_, p)| p.as_str()).collect();
                    format!("[{}]", p.join(", "))
                };
                return Err(self.err(
                    format!("jobs.{}.output.sqlite.search", job.name),
                    format!(
                        "{} writes table '{}' of {} as job {first} does, whose `search` is {} where this one's is {}: \
                         jobs sharing a table share its full-text index, so give them the same `search` (or another table)",
                        job.name,
                        s.table,
                        s.path.display(),
                        cols(o),
                        cols(s)
                    ),
                ));
            }
            if let Some((first, o)) = seen.iter().find(|(_, o)| same(o))
                && column_types(o) != column_types(s)
            {
                return Err(self.err(
                    format!("jobs.{}.output.sqlite.columns", job.name),
                    format!(
                        "{} writes table '{}' of {} as job {first} does, whose `columns` are {} where this one's are {}: \
                         jobs sharing a table share its columns, so give them the same names and types (the pointers may differ), or another table",
                        job.name,
                        s.table,
                        s.path.display(),
                        column_types(o),
                        column_types(s)
                    ),
                ));
            }
            seen.push((&job.name, s));
        }
        Ok(())
    }

    fn folder(&self, field: &str, folder: &str) -> Result<PathBuf> {
        if folder.trim().is_empty() {
            return Err(self.err(field, "must name a directory"));
        }
        Ok(self.dir.join(folder))
    }

    /// A table's `items` and `key` (either sink's): pointers (`""`, the
    /// whole page; the input's key), the key one value.
    pub(super) fn items_and_key(
        &self,
        at: &str,
        items: Option<String>,
        key: Option<String>,
    ) -> Result<(String, String)> {
        let items = items.unwrap_or_default();
        self.pointer(&format!("{at}.items"), &items)?;
        let key = key.unwrap_or_default();
        self.pointer(&format!("{at}.key"), &key)?;
        if key.split('/').any(|p| p == "*") {
            return Err(self.err(
                format!("{at}.key"),
                format!("'{key}': a row's key is one value: no `*` in it"),
            ));
        }
        Ok((items, key))
    }

    fn sqlite(&self, at: &str, raw: RawSqlite) -> Result<SqliteOutput> {
        if raw.path.trim().is_empty() {
            return Err(self.err(format!("{at}.path"), "must name a database file"));
        }
        if !sql_name(&raw.table) || raw.table.to_ascii_lowercase().starts_with("sqlite_") {
            return Err(self.err(
                format!("{at}.table"),
                format!(
                    "'{}': a table's name is letters, digits and _, not starting with a digit or sqlite_",
                    raw.table
                ),
            ));
        }
        let (items, key) = self.items_and_key(at, raw.items, raw.key)?;
        let mut search: Vec<(String, String)> = Vec::new();
        for (i, p) in raw.search.into_iter().enumerate() {
            let field = format!("{at}.search[{i}]");
            self.pointer(&field, &p)?;
            // (the column is the pointer's last part: `/snippet/title` is `title`)
            let column = pointer_parts(&p)
                .and_then(|parts| parts.last().cloned())
                .unwrap_or_default();
            if !sql_name(&column) {
                return Err(self.err(
                    field,
                    format!(
                        "'{p}': the index's column is the pointer's last part, '{column}', which must be letters, digits and _"
                    ),
                ));
            }
            if reserved_in_index(&column, &raw.table) {
                return Err(self.err(
                    field,
                    format!(
                        "'{p}': the index's column would be '{column}', a name the full-text (FTS5) index keeps for itself \
                         (key, rank, rowid, oid, _rowid_ or the index's own name {}_search, in any case): point at the field through another name",
                        raw.table
                    ),
                ));
            }
            if search.iter().any(|(c, _)| c.eq_ignore_ascii_case(&column)) {
                return Err(self.err(
                    field,
                    format!("'{p}': a second field whose column would be '{column}'"),
                ));
            }
            search.push((column, p));
        }
        let columns = self.columns(&format!("{at}.columns"), raw.columns)?;
        Ok(SqliteOutput {
            path: self.dir.join(&raw.path),
            table: raw.table,
            items,
            key,
            search,
            columns,
        })
    }

    /// A JSON pointer: `""` or starting with `/`.
    pub(super) fn pointer(&self, field: &str, pointer: &str) -> Result<()> {
        if pointer_parts(pointer).is_none() {
            return Err(self.err(
                field,
                format!("'{pointer}': a JSON pointer is \"\" (the whole) or starts with /"),
            ));
        }
        Ok(())
    }
}

/// A table's typed columns as jobs sharing it must agree on them: each
/// name (in lower case) and type, in name order.
fn column_types(o: &SqliteOutput) -> String {
    columns_named(&o.columns)
}

/// Typed columns as jobs sharing a table (of either sink) must agree on
/// them: each name (in lower case) and type, in name order.
pub(super) fn columns_named(columns: &[crate::config::Column]) -> String {
    let mut all: Vec<String> = (columns.iter())
        .map(|c| format!("{} {}", c.name.to_ascii_lowercase(), c.kind.name()))
        .collect();
    all.sort();
    format!("[{}]", all.join(", "))
}

/// Whether `column` cannot be a column of table `table`'s full-text index,
/// whatever its case (SQL names are): `key` is the index's own column;
/// FTS5 keeps `rank` (and refuses `rank…` as this crate always has) and
/// `rowid` and its aliases, and a hidden column named as the index.
fn reserved_in_index(column: &str, table: &str) -> bool {
    let c = column.to_ascii_lowercase();
    ["key", "rowid", "oid", "_rowid_"].contains(&c.as_str())
        || c.starts_with("rank")
        || c == format!("{table}_search").to_ascii_lowercase()
}

/// A name SQL takes unquoted: letters, digits and `_`, not starting with a digit.
pub(super) fn sql_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether two database paths are one file: by their words once `.` parts
/// are dropped, or, where both exist, by what they resolve to.
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    let words = |p: &std::path::Path| -> PathBuf { p.components().collect() };
    words(a) == words(b)
        || matches!(
            (a.canonicalize(), b.canonicalize()),
            (Ok(x), Ok(y)) if x == y
        )
}
