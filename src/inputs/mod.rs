//! Inputs from a file: a job's `inputs` read as a stream of records, each
//! with its key, the fields the templates use, and where it lies in the
//! file (line, byte offsets, a hash of its bytes), so a run can resume at a
//! byte offset and see whether the part it did has changed.
//!
//! Rooms: [`record`] (what comes out: a record or a skip), [`lines`] (a
//! `.txt` or `.jsonl` file, line by line), [`csv`] (a `.csv` file through
//! the `csv` crate) and [`reader`] (opening, resuming, the key's and fields'
//! rules shared by every kind); [`done_part`] (what a once-job keeps of the
//! part of its file already done, and the check that names the first line
//! that changed); [`pace`] (when the rest will be done at the pace the
//! budgets allow); [`warnings`] (how many of a kind of skipped record a
//! run warns about one by one).
//!
//! Memory stays flat: a file is read through a fixed buffer, one record at
//! a time; a line longer than [`MAX_LINE`] is skipped, not held.

mod csv;
pub mod done_part;
mod lines;
pub mod pace;
mod reader;
mod record;
pub mod warnings;

pub use self::reader::{MAX_LINE, Reader};
pub use self::record::{Item, Record, RecordStart, Skip, SkipReason, Span};

#[cfg(test)]
mod tests;
