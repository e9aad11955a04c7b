//! The reader: a job's inputs file opened at a position, yielding one
//! [`Item`] per record, with the rules every kind shares (the key's, the
//! fields').

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::value::RawValue;

use super::csv::{RecordRead, Records};
use super::lines::Lines;
use super::record::{Item, Record, RecordStart, Skip, SkipReason, Span};
use crate::config::{
    InputFields, InputFormat, Inputs, JsonText, Masker, Secret, csv_header, key_text, raw_at,
};

/// The longest `.txt` or `.jsonl` line held (16 MiB): a longer one is
/// skipped ([`SkipReason::TooLong`]), read through without being kept.
pub const MAX_LINE: usize = 16 << 20;

/// A job's inputs, read record by record (see the module's text). An
/// iterator of `io::Result<Item>`: an error is the file's (it could not be
/// read), never a record's, which comes out as [`Item::Skip`]. Repeated
/// keys are not looked for: that is the caller's to do.
pub struct Reader {
    rules: Rules,
    source: Source,
    /// At the file's start: a byte order mark to drop, and for a CSV file
    /// the header row to pass over.
    at_start: bool,
}

/// What makes a record of what is read (apart from the source, which is
/// borrowed while a record is made).
struct Rules {
    file: PathBuf,
    format: InputFormat,
    key: String,
    fields: Vec<String>,
    max_key: usize,
    /// A CSV file's columns: the key's, then each field's.
    columns: Vec<usize>,
    /// A CSV file's header width.
    width: usize,
    /// The secret a key must not carry (it would reach the store, page
    /// file names and warnings), if one was given.
    secret: Option<Masker>,
    /// A batched job's `join`: a key holding it would be sent as several.
    join: Option<String>,
}

enum Source {
    Lines(Lines),
    Csv(Records),
}

impl Reader {
    /// Open `inputs.file` at `at` (`RecordStart::default()`: its start), the
    /// offset of a record's start as a [`Span::next`] gave it. A CSV file's
    /// header row is read first, from the start, whatever `at` is.
    pub fn open(inputs: &Inputs, at: RecordStart) -> io::Result<Self> {
        Self::open_with(inputs, at, MAX_LINE)
    }

    pub(super) fn open_with(inputs: &Inputs, at: RecordStart, max_line: usize) -> io::Result<Self> {
        crate::config::regular_file(&std::fs::metadata(&inputs.file)?)?;
        let file = File::open(&inputs.file)?;
        let (mut columns, mut width) = (Vec::new(), 0);
        let source = match inputs.format {
            InputFormat::Csv => {
                let header = csv_header(File::open(&inputs.file)?).map_err(io::Error::other)?;
                let column = |name: &str| {
                    header.iter().position(|h| h == name).ok_or_else(|| {
                        io::Error::other(format!("column '{name}' is not in the header row"))
                    })
                };
                columns.push(column(&inputs.key)?);
                for f in &inputs.fields {
                    columns.push(column(f)?);
                }
                width = header.len();
                Source::Csv(Records::new(file, at, max_line)?)
            }
            _ => Source::Lines(Lines::new(file, at, max_line)?),
        };
        Ok(Self {
            rules: Rules {
                file: inputs.file.clone(),
                format: inputs.format,
                key: inputs.key.clone(),
                fields: inputs.fields.clone(),
                max_key: inputs.max_key,
                columns,
                width,
                secret: None,
                join: inputs.batch.map(|_| inputs.join.clone()),
            },
            source,
            at_start: at.offset == 0,
        })
    }

    pub fn file(&self) -> &Path {
        &self.rules.file
    }

    /// Skip a record whose key carries `secret`, in any encoding the
    /// masking knows ([`SkipReason::KeySecret`]), as a fan-out value that
    /// carries it is left out.
    pub fn refusing(mut self, secret: &Secret) -> Self {
        self.rules.secret = Some(Masker::new(&[secret]));
        self
    }

    /// The bytes the reader holds for its buffers (the test of flat memory).
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        match &self.source {
            Source::Lines(l) => l.held(),
            Source::Csv(c) => c.held(),
        }
    }

    fn next_line(&mut self) -> io::Result<Option<Item>> {
        let Source::Lines(lines) = &mut self.source else {
            unreachable!("a CSV file is read by next_csv")
        };
        let Some((span, bytes)) = lines.next_line()? else {
            return Ok(None);
        };
        let Some(mut bytes) = bytes else {
            return Ok(Some(self.rules.skipped(span, SkipReason::TooLong)));
        };
        if std::mem::take(&mut self.at_start) {
            bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
        }
        let Ok(text) = std::str::from_utf8(bytes) else {
            return Ok(Some(self.rules.skipped(span, SkipReason::NotUtf8)));
        };
        let text = text.trim_ascii();
        if text.is_empty() {
            return Ok(Some(self.rules.skipped(span, SkipReason::Blank)));
        }
        let read = match self.rules.format {
            InputFormat::Txt => Ok((text.to_string(), InputFields::new())),
            _ => json_record(text, &self.rules.key, &self.rules.fields),
        };
        Ok(Some(self.rules.item(span, read)))
    }

    fn next_csv(&mut self) -> io::Result<Option<Item>> {
        let Source::Csv(records) = &mut self.source else {
            unreachable!("a .txt or .jsonl file is read by next_line")
        };
        if std::mem::take(&mut self.at_start) && records.next_record()?.is_none() {
            return Ok(None); // (the header row, read apart)
        }
        let (span, record) = match records.next_record()? {
            None => return Ok(None),
            Some(RecordRead::Record(span, record)) => (span, record),
            Some(RecordRead::TooLong(span)) => {
                return Ok(Some(self.rules.skipped(span, SkipReason::CsvTooLong)));
            }
            Some(RecordRead::QuoteOpen(span)) => {
                return Ok(Some(self.rules.skipped(span, SkipReason::QuoteOpen)));
            }
        };
        let read = if record.len() != self.rules.width {
            Err(SkipReason::Width {
                expected: self.rules.width,
                found: record.len(),
            })
        } else {
            csv_record(record, &self.rules.columns, &self.rules.fields)
        };
        Ok(Some(self.rules.item(span, read)))
    }
}

impl Rules {
    fn skipped(&self, span: Span, reason: SkipReason) -> Item {
        Item::Skip(Skip {
            span,
            file: self.file.clone(),
            reason,
        })
    }

    /// The item a record makes: a [`Record`], or a skip if its key or a
    /// field is not usable.
    fn item(&self, span: Span, read: Result<(String, InputFields), SkipReason>) -> Item {
        let checked = read.and_then(|(key, fields)| {
            let secret = || {
                self.secret
                    .as_ref()
                    .and_then(|m| m.find(key.as_bytes(), 0))
                    .map(|_| SkipReason::KeySecret)
            };
            let join = || {
                self.join
                    .as_ref()
                    .filter(|j| !j.is_empty() && key.contains(j.as_str()))
                    .map(|j| SkipReason::KeyHoldsJoin(j.clone()))
            };
            key_problem(&key, self.max_key)
                .or_else(join)
                .or_else(secret)
                .map_or(Ok((key, fields)), Err)
        });
        match checked {
            Ok((key, fields)) => Item::Record(Record { span, key, fields }),
            Err(reason) => self.skipped(span, reason),
        }
    }
}

impl Iterator for Reader {
    type Item = io::Result<Item>;

    fn next(&mut self) -> Option<Self::Item> {
        let next = match self.source {
            Source::Lines(_) => self.next_line(),
            Source::Csv(_) => self.next_csv(),
        };
        next.transpose()
    }
}

/// A `.jsonl` line's key (at the pointer) and fields (dotted paths), each
/// taken as the line writes it ([`JsonText`]): a number is its text, so a
/// 30-digit id is the key it says and goes upstream as written.
fn json_record(
    text: &str,
    key: &str,
    fields: &[String],
) -> Result<(String, InputFields), SkipReason> {
    // The line checked whole, never built as a tree (a line may be 16
    // MiB): serde_json's message names a line and column, never the text.
    let line: &RawValue =
        serde_json::from_str(text).map_err(|e| SkipReason::NotJson(e.to_string()))?;
    if !line.get().starts_with('{') {
        return Err(SkipReason::NotObject);
    }
    let segments: Vec<String> = (key.split('/').skip(1))
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect();
    let key = match raw_at(text, segments.iter().map(String::as_str)) {
        None | Some("null") => return Err(SkipReason::NoKey),
        Some(raw) => key_text(raw).ok_or(SkipReason::KeyNotText)?,
    };
    let mut out = InputFields::new();
    for name in fields {
        let v =
            raw_at(text, name.split('.')).ok_or_else(|| SkipReason::MissingField(name.clone()))?;
        // (a string that is not text, a lone surrogate escape, could go
        // upstream only as its escape)
        if v.starts_with('"') && serde_json::from_str::<String>(v).is_err() {
            return Err(SkipReason::FieldNotText(name.clone()));
        }
        out.insert(name.clone(), JsonText::of_raw(v));
    }
    Ok((key, out))
}

/// A CSV record's key and fields, by column (each a string).
fn csv_record(
    record: &csv::ByteRecord,
    columns: &[usize],
    fields: &[String],
) -> Result<(String, InputFields), SkipReason> {
    let text = |i: usize| {
        std::str::from_utf8(&record[columns[i]])
            .map(str::to_string)
            .map_err(|_| SkipReason::NotUtf8)
    };
    let key = text(0)?;
    let mut out = InputFields::new();
    for (i, name) in fields.iter().enumerate() {
        out.insert(name.clone(), JsonText::string(&text(i + 1)?));
    }
    Ok((key, out))
}

/// Why a key cannot be used, if it cannot: a region's rules (not empty, no
/// control or bidirectional character, short enough once percent-encoded
/// for page file names).
fn key_problem(key: &str, max: usize) -> Option<SkipReason> {
    if key.is_empty() {
        Some(SkipReason::NoKey)
    } else if key.chars().any(crate::logging::is_hidden) {
        Some(SkipReason::KeyHidden)
    } else if crate::page_name::encode_region(key).len() > max {
        Some(SkipReason::KeyTooLong { max })
    } else {
        None
    }
}
