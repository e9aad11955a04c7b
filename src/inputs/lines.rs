//! A `.txt` or `.jsonl` file, line by line, through a fixed buffer: each
//! line's bytes (up to a limit), its span and the hash of all its bytes,
//! however long it is.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Seek, SeekFrom};

use xxhash_rust::xxh3::Xxh3Default;

use super::record::{RecordStart, Span};

/// The buffer a file is read through.
pub(super) const BUFFER: usize = 64 << 10;

/// A line's span, and its bytes (none when it is past the limit).
pub(super) type Line<'a> = (Span, Option<&'a [u8]>);

pub(super) struct Lines {
    input: BufReader<File>,
    offset: u64,
    line: u64,
    /// The current line's bytes, its line break left out; reused.
    content: Vec<u8>,
    /// The longest line kept: past it, a line is hashed and skipped.
    max_line: usize,
}

impl Lines {
    /// Reading `file` from `at`.
    pub(super) fn new(mut file: File, at: RecordStart, max_line: usize) -> io::Result<Self> {
        file.seek(SeekFrom::Start(at.offset))?;
        Ok(Self {
            input: BufReader::with_capacity(BUFFER, file),
            offset: at.offset,
            line: at.line.max(1),
            content: Vec::new(),
            max_line,
        })
    }

    /// The next line: its span, and its bytes (none when it is longer than
    /// the limit). None at the end of the file.
    pub(super) fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        self.content.clear();
        let mut hash = Xxh3Default::new();
        let (mut len, mut ended, mut too_long) = (0u64, false, false);
        // A '\r' at the end of a chunk: the line break's, if a '\n' follows.
        let mut pending_cr = false;
        loop {
            let buf = self.input.fill_buf()?;
            if buf.is_empty() {
                break;
            }
            let (take, found) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            let mut body = if found {
                &buf[..take - 1]
            } else {
                &buf[..take]
            };
            if pending_cr && !(found && body.is_empty()) {
                keep(
                    &mut hash,
                    &mut self.content,
                    b"\r",
                    self.max_line,
                    &mut too_long,
                );
            }
            pending_cr = false;
            if let Some(b) = body.strip_suffix(b"\r") {
                body = b;
                pending_cr = !found;
            }
            keep(
                &mut hash,
                &mut self.content,
                body,
                self.max_line,
                &mut too_long,
            );
            len += take as u64;
            self.input.consume(take);
            if found {
                ended = true;
                break;
            }
        }
        if len == 0 {
            return Ok(None);
        }
        if pending_cr {
            keep(
                &mut hash,
                &mut self.content,
                b"\r",
                self.max_line,
                &mut too_long,
            );
        }
        let span = Span {
            line: self.line,
            start: self.offset,
            end: self.offset + len,
            hash: hash.digest(),
            ended,
            next_line: self.line + 1,
        };
        self.line += 1;
        self.offset += len;
        Ok(Some((span, (!too_long).then_some(&self.content[..]))))
    }

    /// The bytes held for a line (the test of a bounded buffer).
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.content.capacity() + self.input.capacity()
    }
}

/// Hash `bytes`, and keep them unless the line is past `max` already.
fn keep(
    hash: &mut Xxh3Default,
    content: &mut Vec<u8>,
    bytes: &[u8],
    max: usize,
    too_long: &mut bool,
) {
    hash.update(bytes);
    if *too_long || content.len() + bytes.len() > max {
        *too_long = true;
        content.clear();
    } else {
        content.extend_from_slice(bytes);
    }
}
