//! A job's `inputs`: the file of keys it walks instead of `regions`, as
//! validated (see `validate/inputs.rs`); [`crate::inputs`] reads it.

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
        f.write_str(")")
    }
}
