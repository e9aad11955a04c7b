//! What a once-job remembers of the part of its input file already done,
//! so that a later run can tell the file still holds it, and if not, name
//! the first line that changed (a 78: done inputs edited, truncated or
//! replaced are not done again silently, nor skipped silently).
//!
//! The done part is cut in chunks of [`CHUNK`] records. A chunk keeps where
//! it starts and ends, one hash of its records and 16 bits of each record's
//! hash: about 2.5 bytes a record in the store (a map of the job's, one
//! field per chunk), none of the file's text. The chunk not yet full rides
//! in the cursor ([`Tail`]). Checking reads the done part once through, so
//! a run does it only when the file is not the one the last run read
//! ([`FileStamp`]); an unchanged file resumes at its position at once.

use std::fs::Metadata;

use serde::{Deserialize, Serialize};

/// Records a chunk of the done part holds.
pub const CHUNK: usize = 64;

/// One record of the file as the reader read it: its first line, where
/// its bytes start and end, and a hash of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub line: u64,
    pub start: u64,
    pub end: u64,
    pub hash: u64,
}

/// [`CHUNK`] records of the done part, in file order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// The first record's line.
    pub line: u64,
    pub start: u64,
    pub end: u64,
    /// A hash of the records' hashes, in order.
    pub hash: u64,
    /// 16 bits of each record's hash, 4 hex digits each: which record
    /// changed, once the chunk's hash says one did.
    pub each: String,
}

/// The done records after the last full chunk (fewer than [`CHUNK`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tail {
    /// The first record's line.
    #[serde(default)]
    pub line: u64,
    #[serde(default)]
    pub start: u64,
    #[serde(default)]
    pub end: u64,
    /// The records' hashes (once full, a chunk keeps one hash of them and
    /// 16 bits of each).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hashes: Vec<u64>,
}

impl Tail {
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Add the next done record; the chunk it completes, if it does.
    pub fn push(&mut self, seen: Seen) -> Option<Chunk> {
        if self.hashes.is_empty() {
            self.start = seen.start;
            self.line = seen.line;
        }
        self.end = seen.end;
        self.hashes.push(seen.hash);
        (self.hashes.len() == CHUNK).then(|| {
            let chunk = Chunk {
                line: self.line,
                start: self.start,
                end: self.end,
                hash: combine(&self.hashes),
                each: each_of(&self.hashes),
            };
            *self = Tail {
                line: seen.line + 1,
                start: seen.end,
                end: seen.end,
                ..Tail::default()
            };
            chunk
        })
    }
}

/// One hash of records' hashes, in order.
fn combine(hashes: &[u64]) -> u64 {
    let bytes: Vec<u8> = hashes.iter().flat_map(|h| h.to_le_bytes()).collect();
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

/// 16 bits of each hash, 4 hex digits each ([`Chunk::each`]).
fn each_of(hashes: &[u64]) -> String {
    hashes
        .iter()
        .map(|h| format!("{:04x}", *h as u16))
        .collect()
}

/// Where the file no longer holds what was done: the first line that
/// changed (the first missing one, when the file got shorter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Changed {
    pub line: u64,
}

/// Check `records` (the file read from its start) against the done part
/// (`chunks` in order, then `tail`). Reads only as far as the done part.
pub fn check(
    chunks: &[Chunk],
    tail: &Tail,
    records: &mut impl Iterator<Item = Seen>,
) -> Result<(), Changed> {
    let mut checker = Checker::default();
    checker.chunks(chunks, records)?;
    checker.tail(tail, records)
}

/// [`check`] a few chunks at a time, so that the chunks of a long done
/// part are never all in memory: the chunks in order, each batch against
/// the records that follow the last one's, then the tail.
#[derive(Debug, Default)]
pub struct Checker {
    /// The line after the last record checked (a change found further
    /// on may be a missing record: this line).
    next_line: u64,
}

impl Checker {
    /// The next `chunks` of the done part against the next records.
    pub fn chunks(
        &mut self,
        chunks: &[Chunk],
        records: &mut impl Iterator<Item = Seen>,
    ) -> Result<(), Changed> {
        for chunk in chunks {
            let got = take(records, CHUNK);
            let hashes: Vec<u64> = got.iter().map(|s| s.hash).collect();
            if got.len() == CHUNK
                && combine(&hashes) == chunk.hash
                && got[CHUNK - 1].end == chunk.end
            {
                self.next_line = got[CHUNK - 1].line + 1;
                continue;
            }
            return Err(first_change(
                &got,
                &chunk.each,
                self.next_line.max(1).max(chunk.line),
            ));
        }
        Ok(())
    }

    /// The tail, after every chunk, against the records that follow.
    pub fn tail(
        self,
        tail: &Tail,
        records: &mut impl Iterator<Item = Seen>,
    ) -> Result<(), Changed> {
        let got = take(records, tail.len());
        let matches = got.len() == tail.len()
            && got.iter().zip(&tail.hashes).all(|(s, h)| s.hash == *h)
            && got.last().is_none_or(|s| s.end == tail.end);
        if matches {
            Ok(())
        } else {
            Err(first_change(
                &got,
                &each_of(&tail.hashes),
                self.next_line.max(1),
            ))
        }
    }
}

fn take(records: &mut impl Iterator<Item = Seen>, n: usize) -> Vec<Seen> {
    records.take(n).collect()
}

/// The first of `got` whose 16 bits differ from `each`'s; else the line
/// after the last one read (the file ends early), else the first of `got`
/// (a change that kept every record's 16 bits: one in 65,536).
fn first_change(got: &[Seen], each: &str, first: u64) -> Changed {
    let mut line = first;
    for (i, s) in got.iter().enumerate() {
        let kept = each.get(i * 4..i * 4 + 4);
        if kept != Some(format!("{:04x}", s.hash as u16).as_str()) {
            return Changed { line: s.line };
        }
        line = s.line + 1;
    }
    if got.len() * 4 < each.len() {
        return Changed { line };
    }
    Changed {
        line: got.first().map_or(first, |s| s.line),
    }
}

/// What tells the file the last run read from another: its length, its
/// modification time and its inode. The same stamp: the done part is not
/// read again.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStamp {
    pub len: u64,
    pub modified_ns: i128,
    pub inode: u64,
}

impl FileStamp {
    pub fn of(meta: &Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            len: meta.len(),
            modified_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            inode: meta.ino(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records of one line each, `lines[i]` on line i+1.
    fn records(lines: &[&str]) -> Vec<Seen> {
        let mut at = 0;
        lines
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let start = at;
                at += l.len() as u64 + 1;
                Seen {
                    line: i as u64 + 1,
                    start,
                    end: at,
                    hash: xxhash_rust::xxh3::xxh3_64(l.as_bytes()),
                }
            })
            .collect()
    }

    fn done(seen: &[Seen]) -> (Vec<Chunk>, Tail) {
        let (mut chunks, mut tail) = (Vec::new(), Tail::default());
        for s in seen {
            chunks.extend(tail.push(*s));
        }
        (chunks, tail)
    }

    fn lines(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{{\"id\":{i}}}")).collect()
    }

    #[test]
    fn an_unchanged_file_or_one_with_lines_appended_passes() {
        let text = lines(200);
        let refs: Vec<&str> = text.iter().map(String::as_str).collect();
        let (chunks, tail) = done(&records(&refs[..150]));
        assert_eq!((chunks.len(), tail.len()), (2, 150 - 128));
        assert_eq!(
            check(&chunks, &tail, &mut records(&refs).into_iter()),
            Ok(())
        );
    }

    #[test]
    fn an_edited_line_is_named_in_a_full_chunk_and_in_the_tail() {
        let text = lines(200);
        let mut refs: Vec<&str> = text.iter().map(String::as_str).collect();
        let (chunks, tail) = done(&records(&refs[..150]));
        for edited in [1usize, 64, 65, 100, 129, 150] {
            let before = refs[edited - 1];
            refs[edited - 1] = "{\"id\":\"changed\"}";
            let got = check(&chunks, &tail, &mut records(&refs).into_iter());
            assert_eq!(
                got,
                Err(Changed {
                    line: edited as u64
                }),
                "line {edited}"
            );
            refs[edited - 1] = before;
        }
        // a line past the done part may change freely
        refs[160] = "{\"id\":\"later\"}";
        assert_eq!(
            check(&chunks, &tail, &mut records(&refs).into_iter()),
            Ok(())
        );
    }

    #[test]
    fn a_truncated_file_names_its_first_missing_line() {
        let text = lines(200);
        let refs: Vec<&str> = text.iter().map(String::as_str).collect();
        let (chunks, tail) = done(&records(&refs[..150]));
        for kept in [0usize, 10, 64, 100, 140] {
            let got = check(&chunks, &tail, &mut records(&refs[..kept]).into_iter());
            assert_eq!(
                got,
                Err(Changed {
                    line: kept as u64 + 1
                }),
                "kept {kept}"
            );
        }
    }

    #[test]
    fn a_line_inserted_before_the_end_is_the_first_change() {
        let text = lines(200);
        let mut refs: Vec<&str> = text.iter().map(String::as_str).collect();
        let (chunks, tail) = done(&records(&refs[..150]));
        refs.insert(70, "{\"id\":\"inserted\"}");
        let got = check(&chunks, &tail, &mut records(&refs).into_iter());
        assert_eq!(got, Err(Changed { line: 71 }));
    }

    #[test]
    fn a_chunk_and_a_tail_read_back_from_their_text() {
        let text = lines(70);
        let refs: Vec<&str> = text.iter().map(String::as_str).collect();
        let (chunks, tail) = done(&records(&refs));
        let chunk: Chunk =
            serde_json::from_str(&serde_json::to_string(&chunks[0]).unwrap()).unwrap();
        let tail2: Tail = serde_json::from_str(&serde_json::to_string(&tail).unwrap()).unwrap();
        assert_eq!((chunk, tail2), (chunks[0].clone(), tail));
        assert_eq!(chunks[0].each.len(), CHUNK * 4);
    }
}
