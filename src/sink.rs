//! Where results go, apart from the run that fetches them: the one
//! interface the run writes through ([`output`]: an [`Output`] each place,
//! the job's [`Outputs`]), page files in a folder ([`Files`], named and
//! written as [`folder`] says), rows in SQLite ([`Sqlite`]) and rows in
//! PostgreSQL ([`Postgres`]), what a row's typed column holds, the same
//! for every sink of rows ([`columns`]), and the
//! identity each output keeps so a run can tell it was replaced
//! ([`output_id`]).
//! The run imports it; it imports nothing of the run or of the wire but
//! the one page reader ([`crate::page_scan`]).

pub mod columns;
pub mod files;
pub mod folder;
pub mod output;
pub mod output_id;
pub mod postgres;
pub mod sqlite;

pub use self::files::Files;
pub use self::output::{Output, OutputError, Outputs, Page, PageRows, ResultsHeld, Wrote};
pub use self::postgres::Postgres;
pub use self::sqlite::Sqlite;
