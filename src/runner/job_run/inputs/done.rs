//! A job of inputs' done part: what tells its file from the one the last
//! run read, the part kept in the store chunk by chunk, and the check of
//! that part against the file now (a once-job whose done part changed
//! stops with 78; a job not once walks the file afresh).

use tracing::{info, warn};

use super::super::JobRun;
use crate::config::Inputs;
use crate::inputs::done_part::{self, Checker, Chunk, FileStamp, Seen};
use crate::inputs::{Reader, RecordStart};
use crate::runner::cursor::{Cursor, InputAt};
use crate::runner::job_state::Map;
use crate::{Error, Result};

/// What tells the inputs file from the one the last run read.
pub(super) fn stamp_of(inputs: &Inputs) -> Result<FileStamp> {
    let meta = std::fs::metadata(&inputs.file).map_err(|source| Error::Io {
        what: "read the inputs of",
        path: inputs.file.clone(),
        source,
    })?;
    Ok(FileStamp::of(&meta))
}

/// The done part (`chunks`, then `tail`) against the file now: where it
/// changed, if it did. The run's check, and `status`'s.
pub(crate) fn check_file(
    inputs: &Inputs,
    chunks: &[Chunk],
    tail: &done_part::Tail,
) -> std::io::Result<std::result::Result<(), done_part::Changed>> {
    let reader = Reader::open(inputs, RecordStart::default())?;
    let mut seen = reader.map_while(|item| item.ok()).map(|item| {
        let s = item.span();
        Seen {
            line: s.line,
            start: s.start,
            end: s.end,
            hash: s.hash,
        }
    });
    Ok(done_part::check(chunks, tail, &mut seen))
}

/// Whether `at`'s done part must be checked before a run goes on: a job
/// whose file is not the one the last run read, with a part done (a
/// once-job's changed stops it; a walk's changed starts it again).
pub(crate) fn needs_check(at: &InputAt, stamp: &FileStamp) -> bool {
    at.stamp.as_ref() != Some(stamp) && at.offset > 0
}

/// Whether `at` keeps no record of the part of this walk done (a cursor
/// saved before walks kept one): its place cannot be checked.
pub(crate) fn unrecorded(at: &InputAt) -> bool {
    at.chunks == 0 && at.tail.is_empty()
}

/// The chunks the store keeps of a once-job's done part (`None`: not all
/// of them, a store emptied by hand: the part is not checked).
pub(crate) fn kept_chunks(kept: &[(String, String)], at: &InputAt) -> Option<Vec<Chunk>> {
    let chunks: Vec<Chunk> = kept
        .iter()
        .take(at.chunks as usize)
        .filter_map(|(_, v)| serde_json::from_str(v).ok())
        .collect();
    (chunks.len() as u64 == at.chunks).then_some(chunks)
}

/// Chunks of a done part read from the store at once (~85 KB).
const CHUNKS_AT_ONCE: u64 = 256;

/// The file's records from its start, as the done part keeps them; ended
/// at the first that cannot be read (the done part then looks cut short).
struct DoneRecords {
    reader: Reader,
    ended: bool,
}

impl Iterator for DoneRecords {
    type Item = Seen;

    fn next(&mut self) -> Option<Seen> {
        if self.ended {
            return None;
        }
        match self.reader.next() {
            Some(Ok(item)) => {
                let s = item.span();
                Some(Seen {
                    line: s.line,
                    start: s.start,
                    end: s.end,
                    hash: s.hash,
                })
            }
            _ => {
                self.ended = true;
                None
            }
        }
    }
}

impl JobRun<'_> {
    /// A job not once whose file changed mid-walk in the part done
    /// (`changed`: its first line that did, 0 when the cursor kept no
    /// record of it): its place may be inside a line now, so it walks the
    /// file afresh from its start (the cursor it resumes from then, none
    /// of the old walk's keys in it). A file that changed only after the
    /// part done (lines appended, an identical copy put in its place) is
    /// walked on from the place.
    pub(super) async fn walk_afresh(
        &self,
        inputs: &Inputs,
        at: &mut InputAt,
        changed: Option<u64>,
        cursor: &Cursor,
    ) -> Option<Cursor> {
        let line = changed.filter(|_| !self.job.once && at.offset > 0)?;
        warn!(
            job = self.job.name,
            "{} changed since the last run{}: this walk of it starts again at its first line (it was at line {})",
            inputs.file.display(),
            match line {
                0 => " (the cursor keeps no record of the part done)".to_string(),
                n => format!(" at line {n}, in the part already done"),
            },
            at.line
        );
        super::seen::forget_seen(self.state(), self.job, at.walk).await;
        *at = InputAt {
            walk: at.walk + 1,
            line: 1,
            stamp: at.stamp.take(),
            ..InputAt::default()
        };
        Some(Cursor {
            run: cursor.run,
            input: Some(at.clone()),
            ..Cursor::default()
        })
    }

    /// The done part of a once-job's file, as the store keeps it, against
    /// the file now: its chunks read [`CHUNKS_AT_ONCE`] at a time, each
    /// batch checked before the next is read, so that memory does not grow
    /// with the part done (~330 bytes a chunk of 64 inputs: 5 MB at 10^6
    /// read at once).
    pub(super) async fn check_done_part(
        &self,
        inputs: &Inputs,
        at: &InputAt,
    ) -> Result<Option<done_part::Changed>> {
        let Some(state) = self.state() else {
            return Ok(None);
        };
        let io = |source| Error::Io {
            what: "check the inputs of",
            path: inputs.file.clone(),
            source,
        };
        info!(
            job = self.job.name,
            "{} is not the file the last run read: checking the {} input(s) done in it",
            inputs.file.display(),
            at.done + at.skipped
        );
        let mut records = DoneRecords {
            reader: Reader::open(inputs, RecordStart::default()).map_err(io)?,
            ended: false,
        };
        let mut checker = Checker::default();
        let mut from = 0;
        while from < at.chunks {
            let to = (from + CHUNKS_AT_ONCE).min(at.chunks);
            let fields: Vec<String> = (from..to).map(|i| format!("{i:012}")).collect();
            let chunks: Option<Vec<Chunk>> = state
                .get(Map::Done, &fields)
                .await?
                .into_iter()
                .map(|v| v.and_then(|v| serde_json::from_str(&v).ok()))
                .collect();
            let Some(chunks) = chunks else {
                warn!(
                    job = self.job.name,
                    "the store does not keep every one of the {} chunks of {}'s done part (a store emptied by hand?): the part done is not checked",
                    at.chunks,
                    inputs.file.display()
                );
                return Ok(None);
            };
            let checked;
            (records, checker, checked) = tokio::task::spawn_blocking(move || {
                let checked = checker.chunks(&chunks, &mut records);
                (records, checker, checked)
            })
            .await
            .map_err(|e| io(std::io::Error::other(e)))?;
            if let Err(changed) = checked {
                return Ok(Some(changed));
            }
            from = to;
        }
        let tail = at.tail.clone();
        Ok(
            tokio::task::spawn_blocking(move || checker.tail(&tail, &mut records))
                .await
                .map_err(|e| io(std::io::Error::other(e)))?
                .err(),
        )
    }
}

/// The 78 of a done part that changed at `changed`.
pub(super) fn done_part_changed(job: &str, inputs: &Inputs, changed: done_part::Changed) -> Error {
    Error::Config {
        file: inputs.file.clone(),
        field: format!("line {}", changed.line),
        message: format!(
            "the part of the file job {} has done changed here since (edited, truncated or replaced): \
             its inputs are not done again, nor skipped, unless asked: `portion reset {} --yes` does every one again",
            job, job
        ),
    }
}
