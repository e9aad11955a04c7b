//! Inputs from a file: a job's `inputs` read as a stream of records, each
//! with its key, the fields the templates use, and where it lies in the
//! file (line, byte offsets, a hash of its bytes), so a run can resume at a
//! byte offset and see whether the part it did has changed.
//!
//! Rooms: [`record`] (what comes out: a record or a skip), [`lines`] (a
//! `.txt` or `.jsonl` file, line by line), [`csv`] (a `.csv` file through
//! the `csv` crate) and [`reader`] (opening, resuming, the key's and fields'
//! rules shared by every kind).
//!
//! Memory stays flat: a file is read through a fixed buffer, one record at
//! a time; a line longer than [`MAX_LINE`] is skipped, not held.

mod csv;
mod lines;
mod reader;
mod record;

pub use self::csv::csv_header;
pub use self::reader::{MAX_LINE, Reader};
pub use self::record::{Item, Position, Record, Skip, SkipReason, Span};

#[cfg(test)]
mod tests;
