//! Typed columns of a table of rows (`output.sqlite.columns`, and any
//! other sink of rows): a field of each row, at a JSON pointer inside it,
//! kept as a column of its own of one type, so a query reads `stars > 10`
//! rather than the item's JSON. Sink-neutral: each sink maps a
//! [`ColumnKind`] to its database's type; what a value at the pointer
//! becomes is `crate::sink::columns`'.

/// One typed column: its name in the table, where its value is in the
/// row (a JSON pointer, no `*`), its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub pointer: String,
    pub kind: ColumnKind,
}

/// A typed column's type, as the configuration names it (`type:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    Text,
    Integer,
    Real,
    Boolean,
    Timestamp,
}

impl ColumnKind {
    /// Every type, in the order the configuration's errors list them.
    pub const ALL: [ColumnKind; 5] = [
        Self::Text,
        Self::Integer,
        Self::Real,
        Self::Boolean,
        Self::Timestamp,
    ];

    /// The name the configuration writes (`type: integer`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Integer => "integer",
            Self::Real => "real",
            Self::Boolean => "boolean",
            Self::Timestamp => "timestamp",
        }
    }

    /// The type the configuration names `name` (any case).
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(name))
    }
}

/// Names a typed column cannot have, whatever its case: the row model's
/// own columns (`key`, `job`, `input`, `fetched_at`, `item`), PostgreSQL's
/// generated `search` column, and the names each database keeps for
/// itself (SQLite's rowid aliases, PostgreSQL's system columns). One list
/// for every sink, so a job's columns move from one to another unchanged.
pub const RESERVED_COLUMNS: &[&str] = &[
    "key",
    "job",
    "input",
    "fetched_at",
    "item",
    "search",
    "rowid",
    "oid",
    "_rowid_",
    "ctid",
    "xmin",
    "xmax",
    "cmin",
    "cmax",
    "tableoid",
];

/// The longest column name: PostgreSQL's identifiers stop at 63 bytes
/// (a longer one is cut, and two names could become one).
pub const MAX_COLUMN_NAME: usize = 63;
