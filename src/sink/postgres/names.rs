//! The names a job's PostgreSQL table and its companions take, quoted
//! (a name is letters, digits and `_` by the configuration's check; quoted
//! anyway, so a name like a keyword is a name like any other), each in
//! the table's schema: the rows' table, `TABLE_runs` (the run that wrote
//! each input's rows, a once-job's), the output's id table and the
//! indexes.

use crate::config::PostgresOutput;
use crate::sink::output_id::DB_TABLE;

/// `name` as an SQL identifier, quoted.
pub(super) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `text` as an SQL string literal.
pub(super) fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The quoted names of a job's table and its companions.
#[derive(Clone, Debug)]
pub(super) struct Names {
    /// The rows' table, schema-qualified where the configuration says.
    pub table: String,
    pub runs: String,
    pub id: String,
    /// The schema, quoted (none: the search path's first).
    pub schema: Option<String>,
    /// The indexes' names (an index lives in its table's schema).
    pub job_input: String,
    pub search_index: String,
}

impl Names {
    /// A typed column's name, quoted, in lower case: PostgreSQL folds an
    /// unquoted name so, so `SELECT stars` finds the column `Stars` names.
    pub(super) fn column(name: &str) -> String {
        ident(&name.to_ascii_lowercase())
    }

    pub(super) fn of(spec: &PostgresOutput) -> Self {
        let qualified = |name: &str| match &spec.schema {
            Some(s) => format!("{}.{}", ident(s), ident(name)),
            None => ident(name),
        };
        let t = &spec.table;
        Self {
            table: qualified(t),
            runs: qualified(&format!("{t}_runs")),
            id: qualified(DB_TABLE),
            schema: spec.schema.as_deref().map(ident),
            job_input: ident(&format!("{t}_job_input")),
            search_index: ident(&format!("{t}_search")),
        }
    }
}
