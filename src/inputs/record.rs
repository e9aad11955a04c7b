//! What the reader yields: a [`Record`] to do, or a [`Skip`] to count and
//! warn about, each with its [`Span`] in the file.

use std::fmt;
use std::path::PathBuf;

use crate::config::InputFields;

/// Where a record starts: what a resume passes to
/// [`super::Reader::open`] (the byte offset, and the line number there,
/// which the reader cannot count without reading what is before it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordStart {
    /// Bytes from the start of the file.
    pub offset: u64,
    /// Its line number, from 1 (0 is taken as 1).
    pub line: u64,
}

/// Where a record (or a skipped one) lies in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Its first line, from 1 (a CSV record may span lines: quoted line
    /// breaks).
    pub line: u64,
    /// The byte offset of its first byte.
    pub start: u64,
    /// The byte offset past it, its line break included: where the next
    /// record starts.
    pub end: u64,
    /// xxh3-64 of its bytes, `start..end` without the final line break
    /// (`\n` or `\r\n`): the same whether or not a line break was added
    /// after it later. Stable across versions and machines.
    pub hash: u64,
    /// Whether it ended with a line break; false only for the file's last
    /// line, which a writer may still be appending to.
    pub ended: bool,
    /// The line after it.
    pub(super) next_line: u64,
}

impl Span {
    /// Where the record after it starts: the position to resume from once
    /// this one is done.
    pub fn next(&self) -> RecordStart {
        RecordStart {
            offset: self.end,
            line: self.next_line,
        }
    }
}

/// An input to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub span: Span,
    /// Its key: `{key}` (the line of a `.txt` file, the value at the
    /// pointer of a `.jsonl` one, the column of a `.csv` one).
    pub key: String,
    /// The fields the job's templates use, by their name as written in
    /// `{input.NAME}` (every one there).
    pub fields: InputFields,
}

/// A record that cannot be done: skipped, uncharged, warned about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    pub span: Span,
    pub file: PathBuf,
    pub reason: SkipReason,
}

/// Why a record is skipped. None of them shows the record's text: a file
/// of inputs may hold anything, a secret too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// A line of spaces or nothing: no record at all (a caller may count
    /// it without a warning).
    Blank,
    /// No key: nothing at the pointer, or an empty value.
    NoKey,
    /// The key's value is not a string or a number (`.jsonl`).
    KeyNotText,
    /// The key has a control or bidirectional character (a tab, U+202E…).
    KeyHidden,
    /// The key holds the `join` of a batched job (`inputs.batch`): in
    /// `{batch}` it would read as several keys.
    KeyHoldsJoin(String),
    /// The key carries the credential's secret ([`super::Reader::refusing`]).
    KeySecret,
    /// The key is longer, once percent-encoded, than page file names allow.
    KeyTooLong { max: usize },
    /// A field the templates use is not in the record.
    MissingField(String),
    /// A field the templates use is a string that is not text (a lone
    /// surrogate escape).
    FieldNotText(String),
    /// A `.jsonl` line that is not JSON (serde_json's message, which
    /// names a line and column, never the text).
    NotJson(String),
    /// A `.jsonl` line that is JSON but not an object.
    NotObject,
    /// A CSV row with another number of fields than the header.
    Width { expected: usize, found: usize },
    /// Bytes that are not UTF-8.
    NotUtf8,
    /// A line longer than [`super::MAX_LINE`] bytes (not held in memory).
    TooLong,
    /// A CSV record longer than [`super::MAX_LINE`] bytes: its first line
    /// skipped, the next read.
    CsvTooLong,
    /// A CSV quoted field still open at the end of the file: the record's
    /// first line skipped, the next read.
    QuoteOpen,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Blank => f.write_str("an empty line"),
            Self::NoKey => f.write_str("no key"),
            Self::KeyNotText => f.write_str("the key is not a string or a number"),
            Self::KeyHidden => f.write_str(
                "the key holds a control or bidirectional character (a tab, a line break, U+202E …)",
            ),
            Self::KeyHoldsJoin(j) => write!(
                f,
                "the key holds the batch's join {j:?}: in {{batch}} it would be sent as several keys"
            ),
            Self::KeySecret => f.write_str("the key carries the credential's secret"),
            Self::KeyTooLong { max } => write!(
                f,
                "the key is longer than the {max} bytes (once percent-encoded) a page file name leaves it"
            ),
            Self::MissingField(name) => write!(f, "no field '{name}' ({{input.{name}}})"),
            Self::FieldNotText(name) => write!(
                f,
                "field '{name}' ({{input.{name}}}) is a string that is not text (a lone surrogate escape)"
            ),
            Self::NotJson(e) => write!(f, "not JSON: {e}"),
            Self::NotObject => f.write_str("not a JSON object"),
            Self::Width { expected, found } => write!(
                f,
                "{found} field(s) where the header row has {expected}"
            ),
            Self::NotUtf8 => f.write_str("not UTF-8"),
            Self::TooLong => write!(f, "longer than {} bytes", super::MAX_LINE),
            Self::CsvTooLong => write!(
                f,
                "a record longer than {} bytes (a quoted field left open?): this line is skipped, \
                 reading goes on at the next",
                super::MAX_LINE
            ),
            Self::QuoteOpen => f.write_str(
                "a quoted field is still open at the end of the file: this line is skipped, \
                 reading goes on at the next",
            ),
        }
    }
}

/// `FILE line N: REASON`, as a warning says it.
impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} line {}: {}",
            self.file.display(),
            self.span.line,
            self.reason
        )
    }
}

/// What the reader yields, in the file's order.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Record(Record),
    Skip(Skip),
}

impl Item {
    pub fn span(&self) -> &Span {
        match self {
            Self::Record(r) => &r.span,
            Self::Skip(s) => &s.span,
        }
    }
}
