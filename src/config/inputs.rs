//! A job's `inputs`: the file of keys it walks instead of `regions`, as
//! validated (see `validate/inputs.rs`); [`crate::inputs`] reads it.

use std::fs::File;
use std::path::PathBuf;

/// The kind of an inputs file, from its extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputFormat {
    /// `.txt`: one key a line.
    Txt,
    /// `.jsonl`: one JSON object a line, the key at a JSON pointer.
    Jsonl,
    /// `.csv`: a header row, then records (RFC 4180), the key a column.
    Csv,
}

impl InputFormat {
    /// From a file name's extension (case-insensitive).
    pub fn from_extension(ext: &str) -> Option<Self> {
        match ext.to_ascii_lowercase().as_str() {
            "txt" => Some(Self::Txt),
            "jsonl" => Some(Self::Jsonl),
            "csv" => Some(Self::Csv),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Txt => "txt",
            Self::Jsonl => "jsonl",
            Self::Csv => "csv",
        }
    }
}

/// `inputs: { file, key }`, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inputs {
    /// Absolute, or taken from the config file's folder.
    pub file: PathBuf,
    pub format: InputFormat,
    /// `.jsonl`: a JSON pointer (`/id`); `.csv`: a column name; `.txt`:
    /// empty (the line is the key).
    pub key: String,
    /// The `{input.NAME}` names the job's templates use, each once, sorted:
    /// what the reader takes from each record (a dotted path into a JSON
    /// record, a column of a CSV one).
    pub fields: Vec<String>,
    /// The most bytes a key may take once percent-encoded for page file
    /// names (as a region's: at most 150, less beside a long job name);
    /// the reader skips a longer one.
    pub max_key: usize,
    /// `batch: N`: N inputs a request, their keys in `{batch}` joined
    /// with `join` (`None`: one input a request, `{key}`).
    pub batch: Option<usize>,
    pub join: String,
}

/// The most inputs a request carries (`inputs.batch`).
pub const MAX_BATCH: i64 = 1000;

impl Inputs {
    /// Inputs a request carries: 1 unless batched.
    pub fn per_request(&self) -> u64 {
        self.batch.unwrap_or(1) as u64
    }
}

impl std::fmt::Display for Inputs {
    /// As `check` shows it: the file, its kind, the key and the fields.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}", self.file.display(), self.format.name())?;
        match self.format {
            InputFormat::Txt => f.write_str(", a key a line")?,
            InputFormat::Jsonl => write!(f, ", key at {}", self.key)?,
            InputFormat::Csv => write!(f, ", key in column {:?}", self.key)?,
        }
        if !self.fields.is_empty() {
            write!(f, ", fields {}", self.fields.join(", "))?;
        }
        if let Some(n) = self.batch {
            write!(f, ", {n} a request joined by {:?}", self.join)?;
        }
        f.write_str(")")
    }
}

/// A UTF-8 byte order mark, which spreadsheets write before the header.
const BOM: &[u8] = b"\xef\xbb\xbf";

/// The header row of a CSV file (the first record, and only it, is read),
/// a byte order mark dropped. The error says what is wrong, not where.
pub fn csv_header(file: File) -> Result<Vec<String>, String> {
    let mut rdr = csv_builder().from_reader(file);
    let mut header = csv::ByteRecord::new();
    match rdr.read_byte_record(&mut header) {
        Ok(true) => {}
        Ok(false) => return Err("no header row: the file is empty".into()),
        Err(e) => return Err(format!("cannot read its header row: {e}")),
    }
    let columns: Result<Vec<String>, _> = header
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let c = if i == 0 {
                c.strip_prefix(BOM).unwrap_or(c)
            } else {
                c
            };
            String::from_utf8(c.to_vec())
        })
        .collect();
    columns.map_err(|_| "its header row is not UTF-8".into())
}

/// How every CSV file of inputs is read (one source for `check`'s header
/// and the reader's records).
pub fn csv_builder() -> csv::ReaderBuilder {
    let mut b = csv::ReaderBuilder::new();
    // (rows of another width are the reader's to skip, not errors; the
    // header is read as a record, so that its span is known)
    b.has_headers(false).flexible(true);
    b
}
