//! A `.csv` file through the `csv` crate (RFC 4180: quoted fields, quoted
//! line breaks, `""` for a quote): its header row, then each record with
//! its exact byte span (the crate's positions) and the hash of its raw
//! bytes, kept from the bytes the crate reads (never more than a record
//! and one buffer).
//!
//! A record is capped as a `.txt` or `.jsonl` line is ([`super::MAX_LINE`]):
//! the crate is given no byte past a record's start plus the cap. A record
//! that passes the cap, or whose quoted field is still open at the end of
//! the file (`X,"unclosed` would otherwise take every line after it as
//! its field), is a bad record: its first line alone is skipped (read
//! through as a long line is, never held) and reading goes on at the
//! next line, with a new reader.

use std::fs::File;
use std::io::{self, Seek, SeekFrom};

use xxhash_rust::xxh3::xxh3_64;

use super::lines::{BUFFER, Lines};
use super::record::{RecordStart, Span};

/// What reading a record gave: a record, or the span of the line skipped
/// for a bad one.
pub(super) enum RecordRead<'r> {
    Record(Span, &'r csv::ByteRecord),
    /// Past the cap: the record's first line.
    TooLong(Span),
    /// A quoted field still open at the end of the file: the record's
    /// first line.
    QuoteOpen(Span),
}

fn builder() -> csv::ReaderBuilder {
    let mut b = crate::config::csv_builder();
    b.buffer_capacity(BUFFER);
    b
}

/// The records of a CSV file, from a position.
pub(super) struct Records {
    rdr: csv::Reader<Recorder>,
    record: csv::ByteRecord,
    /// Where the reader started in the file: its positions count from there.
    at: RecordStart,
    /// The longest record read (bytes).
    max: u64,
}

impl Records {
    pub(super) fn new(mut file: File, at: RecordStart, max: usize) -> io::Result<Self> {
        file.seek(SeekFrom::Start(at.offset))?;
        let at = RecordStart {
            offset: at.offset,
            line: at.line.max(1),
        };
        let recorder = Recorder {
            file,
            start: at.offset,
            tail: Vec::new(),
            base: 0,
            record_start: 0,
            max: max as u64,
            cut: false,
            ended: false,
        };
        Ok(Self {
            rdr: builder().from_reader(recorder),
            record: csv::ByteRecord::new(),
            at,
            max: max as u64,
        })
    }

    /// The next record: its span and fields. None at the end of the file.
    ///
    /// The crate's positions are made exact here: a record's position may
    /// point at the line break(s) before it (the `\n` of a `\r\n` it
    /// stopped reading at, blank lines it passed over), which belong to no
    /// record; and a record read to its `\r` owns the `\n` after it.
    pub(super) fn next_record(&mut self) -> io::Result<Option<RecordRead<'_>>> {
        if !self
            .rdr
            .read_byte_record(&mut self.record)
            .map_err(io::Error::other)?
        {
            return Ok(None);
        }
        let pos = self
            .record
            .position()
            .expect("the reader sets a record's position");
        let (mut from, mut line) = (pos.byte(), pos.line());
        let next = self.rdr.position().clone();
        let (mut to, mut next_line) = (next.byte(), next.line());
        let recorder = self.rdr.get_mut();
        while from < to && matches!(recorder.byte(from)?, Some(b'\r' | b'\n')) {
            line += u64::from(recorder.byte(from)? == Some(b'\n'));
            from += 1;
        }
        if recorder.byte(to.wrapping_sub(1))? == Some(b'\r') && recorder.byte(to)? == Some(b'\n') {
            to += 1;
            next_line += 1;
        }
        if recorder.cut || (recorder.ended && quote_open(recorder.slice(from, to))) {
            let too_long = recorder.cut;
            let first_line = self.skip_first_line(from, line)?;
            return Ok(Some(if too_long {
                RecordRead::TooLong(first_line)
            } else {
                RecordRead::QuoteOpen(first_line)
            }));
        }
        let raw = recorder.slice(from, to);
        let ended = raw.ends_with(b"\n") || raw.ends_with(b"\r");
        let body = raw.strip_suffix(b"\n").unwrap_or(raw);
        let body = body.strip_suffix(b"\r").unwrap_or(body);
        let hash = xxh3_64(body);
        recorder.forget_before(to.min(next.byte()));
        recorder.record_start = to.max(next.byte());
        let span = Span {
            line: self.at.line + line - 1,
            start: self.at.offset + from,
            end: self.at.offset + to,
            hash,
            ended,
            next_line: self.at.line + next_line - 1,
        };
        Ok(Some(RecordRead::Record(span, &self.record)))
    }

    /// The first line of a bad record at `from` (line `line`, both counted
    /// from where this reader started), read through as a `.txt` line is
    /// (its hash, never its bytes held); reading goes on after it, with a
    /// new reader of the crate's (the one that read the bad record took
    /// the file's end, or the cap, as its end).
    fn skip_first_line(&mut self, from: u64, line: u64) -> io::Result<Span> {
        let at = RecordStart {
            offset: self.at.offset + from,
            line: self.at.line + line - 1,
        };
        let file = &self.rdr.get_ref().file;
        let (span, _) = Lines::new(file.try_clone()?, at, 0)?
            .next_line()?
            .ok_or_else(|| io::Error::other("the file got shorter while it was read"))?;
        *self = Self::new(file.try_clone()?, span.next(), self.max as usize)?;
        Ok(span)
    }

    /// The bytes held (the test of a bounded buffer).
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.rdr.get_ref().tail.capacity()
    }
}

/// The file, keeping what the CSV reader has read and not yet seen as a
/// record: a record's raw bytes, for its hash.
struct Recorder {
    file: File,
    /// The file offset reading started at.
    start: u64,
    tail: Vec<u8>,
    /// The offset (from where reading started) of `tail[0]`.
    base: u64,
    /// The offset (from where reading started) of the record being read:
    /// no byte past it plus `max` is read.
    record_start: u64,
    max: u64,
    /// The cap was reached: the crate was told the file ended there.
    cut: bool,
    /// The file's end was reached.
    ended: bool,
}

impl Recorder {
    /// The byte at `offset` (from where reading started), if the file has
    /// one: from what was read, else from the file (without moving its
    /// position: the reader's read-ahead ended just before it).
    fn byte(&self, offset: u64) -> io::Result<Option<u8>> {
        if offset < self.base {
            return Ok(None);
        }
        if let Some(b) = self.tail.get((offset - self.base) as usize) {
            return Ok(Some(*b));
        }
        use std::os::unix::fs::FileExt;
        let mut b = [0u8];
        let n = self.file.read_at(&mut b, self.start + offset)?;
        Ok((n == 1).then_some(b[0]))
    }

    /// The bytes `from..to`, both already read and kept.
    fn slice(&self, from: u64, to: u64) -> &[u8] {
        let base = self.base;
        let end = ((to - base) as usize).min(self.tail.len());
        &self.tail[(from - base) as usize..end]
    }

    /// The bytes before `offset` are seen: dropped, a buffer's worth at
    /// a time (one record at a time would move the rest every record).
    fn forget_before(&mut self, offset: u64) {
        let n = (offset - self.base) as usize;
        if n >= BUFFER {
            self.tail.drain(..n);
            self.base = offset;
        }
    }
}

impl io::Read for Recorder {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let read = self.base + self.tail.len() as u64;
        let room = (self.record_start + self.max).saturating_sub(read);
        if room == 0 {
            self.cut = true;
            return Ok(0);
        }
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.file.read(&mut buf[..want])?;
        self.ended |= n == 0;
        self.tail.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

/// Whether a record's raw bytes (as the crate read them: `,` between
/// fields, `"` quoting, `""` a quote within quotes) end inside a quoted
/// field: the crate takes the file's end as the end of such a field.
fn quote_open(raw: &[u8]) -> bool {
    #[derive(PartialEq)]
    enum FieldAt {
        FieldStart,
        Unquoted,
        Quoted,
        QuoteInQuoted,
    }
    let mut at = FieldAt::FieldStart;
    for &b in raw {
        at = match (at, b) {
            (FieldAt::Quoted, b'"') => FieldAt::QuoteInQuoted,
            (FieldAt::Quoted, _) => FieldAt::Quoted,
            (FieldAt::QuoteInQuoted, b'"') | (FieldAt::FieldStart, b'"') => FieldAt::Quoted,
            (_, b',' | b'\r' | b'\n') => FieldAt::FieldStart,
            _ => FieldAt::Unquoted,
        };
    }
    at == FieldAt::Quoted
}
