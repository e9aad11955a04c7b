//! Where results go, apart from the run that fetches them: page files in a
//! folder ([`folder`]) and rows in SQLite ([`sqlite`]), and the identity
//! each output keeps so a run can tell it was replaced ([`output_id`]).
//! The run imports it; it imports nothing of the run or of the wire but
//! the one page reader ([`crate::page_scan`]).

pub mod folder;
pub mod output_id;
pub mod sqlite;
