//! A job of inputs: its file read into the round's window as the run
//! needs more ([`Feed`]), each record checked against the keys this walk
//! of the file has seen (the first of a repeated key wins), and, for a
//! once-job, the part already done checked before the run goes on.
//!
//! The file is local and read through a buffer, a record at a time, on the
//! run's task: a read is a copy from the page cache, shorter than a store
//! round trip. Only the check of a done part, which reads it all, runs on
//! a blocking thread.

use std::collections::{HashMap, HashSet};

use tracing::{info, warn};

use super::JobRun;
use super::round::{Round, Slot};
use super::seen::seen_map;
use crate::config::{Inputs, Job};
use crate::inputs::done_part::{self, Checker, Chunk, FileStamp, Seen};
use crate::inputs::warnings::{Kind, SkipWarnings};
use crate::inputs::{Item, Position, Reader, SkipReason};
use crate::ledger::Ledger;
use crate::logging::printable;
use crate::runner::Key;
use crate::runner::cursor::{Cursor, InputAt, Start};
use crate::{Error, Result};

/// A job of inputs' file as this run reads it.
pub(super) struct Feed {
    reader: Reader,
    /// Where the cursor's key resumes (the first input read, when its key
    /// is the cursor's), and the keys ahead of it (`None`: done).
    first: Option<(Key, Start)>,
    ahead: Ahead,
    /// The file has no record after the last one read.
    ended: bool,
    /// Where the next read starts.
    next: Position,
    /// The skipped records warned about, and those only counted (said at
    /// the run's end: [`JobRun::say_skip_totals`]).
    warned: SkipWarnings,
    /// The keys this walk has seen and the line of each one's first record:
    /// in the store, or here when the run has none (unmetered).
    pub(super) seen_map: String,
    pub(super) seen_here: HashMap<Key, String>,
    /// This run's number, and the line it resumed at: entries of the keys
    /// seen are told apart by them (see [`JobRun::first_lines`]).
    pub(super) run: u64,
    pub(super) resume_line: u64,
    /// A once-job: inputs whose result is on disk though the cursor does not
    /// say them done (a kill after the page, before the cursor; a store that
    /// lost the cursor): not fetched again.
    on_disk: HashSet<Key>,
    /// A once-job resumed: the runs since the cursor's, whose pages the
    /// first inputs read (as many as a window: the most a run can have
    /// started past the cursor) are looked for ([`JobRun::page_on_disk`]),
    /// and how many inputs are still to be looked at.
    recent: Option<(std::ops::RangeInclusive<u64>, usize)>,
    /// Failed inputs to do again before the file's (`portion reset JOB
    /// --failed`): their keys and places, in file order.
    pub(super) retry: std::collections::VecDeque<(Key, Position)>,
    /// Whether this run read any such (the map of them is forgotten once
    /// all are over).
    pub(super) retrying: bool,
    /// Inputs this run recorded as failed, and whether any page was
    /// answered: the first [`super::failed::INPUTS_REFUSED`] failed and
    /// none answered stops the job.
    pub(super) failed: u32,
    pub(super) answered: bool,
    /// The job stops for the inputs refused: no request is charged after
    /// it, those in flight finish (each refusal recorded), then the run
    /// ends with this error.
    pub(super) stopping: Option<crate::Error>,
}

impl Feed {
    /// Up to `room` items from the file, none once it ended.
    fn take(&mut self, room: usize) -> std::io::Result<Vec<Item>> {
        let mut items = Vec::new();
        while !self.ended && items.len() < room {
            match self.reader.next().transpose()? {
                Some(item) => {
                    self.next = item.span().next();
                    items.push(item);
                }
                None => self.ended = true,
            }
        }
        Ok(items)
    }

    /// Where an input with `key`, just read, starts: where the cursor left
    /// it (or done, ahead of it), else from its first step.
    pub(super) fn state_of(&mut self, key: &str) -> Slot {
        match self.first.take() {
            Some((k, start)) if k == key => Slot::Waiting(Some(start)),
            first => {
                self.first = first;
                match self.ahead.remove(key) {
                    Some(None) => Slot::Done,
                    Some(Some(start)) => Slot::Waiting(Some(start)),
                    None => Slot::Waiting(None),
                }
            }
        }
    }
}

/// The store's name of the map of a once-job's done part, chunk by chunk.
pub(crate) fn done_map(job: &Job) -> String {
    format!("{}:inputs:done", job.name)
}

/// What tells the inputs file from the one the last run read.
fn stamp_of(inputs: &Inputs) -> Result<FileStamp> {
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
    let reader = Reader::open(inputs, Position::default())?;
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

/// The keys ahead of the cursor's, and where each resumes (`None`: done).
type Ahead = HashMap<Key, Option<Start>>;

/// Where the cursor's key resumes, and the keys ahead of it (`None`:
/// done); a step gone from the file restarts its input.
fn resume_points(cursor: &Cursor, steps: usize) -> (Option<(Key, Start)>, Ahead) {
    let place = |p: &crate::runner::cursor::Place| Start {
        index: 0,
        place: if p.step < steps {
            p.clone()
        } else {
            Default::default()
        },
    };
    let first = (!cursor.key.is_empty()).then(|| (cursor.key.clone(), place(&cursor.place)));
    let ahead = cursor
        .ahead
        .iter()
        .map(|a| (a.key.clone(), (!a.done).then(|| place(&a.place))))
        .collect();
    (first, ahead)
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

/// How many inputs the window holds at most: a slow input at its front
/// lets the others go on this far, and no further (the cursor carries the
/// window: it stays small).
pub(super) fn window_cap(concurrency: usize, batch: Option<usize>) -> usize {
    let cap = (4 * concurrency).max(64);
    // (inputs in batches: room for every batch in flight and the next)
    batch.map_or(cap, |b| cap.max((concurrency + 1) * b))
}

impl JobRun<'_> {
    /// This run's round over the job's inputs, from the cursor's place in
    /// the file. A once-job whose file is not the one the last run read has
    /// its done part checked first: changed, the run stops (78).
    pub(super) async fn inputs_round(
        &self,
        inputs: &Inputs,
        cursor: &Cursor,
        run: u64,
        highest_run: u64,
    ) -> Result<Round> {
        let job = self.job;
        let mut at = cursor.input.clone().unwrap_or_default();
        at.line = at.line.max(1);
        let stamp = stamp_of(inputs)?;
        // (a once-job's part done that changed stops the run; a walk's
        // starts again from the file's first line)
        let changed = match needs_check(&at, &stamp) {
            false => None,
            true if job.once => {
                let changed = self.check_done_part(inputs, &at).await?;
                if let Some(changed) = changed {
                    return Err(self.done_part_changed(inputs, changed));
                }
                None
            }
            true if unrecorded(&at) => Some(0),
            true => self.check_done_part(inputs, &at).await?.map(|c| c.line),
        };
        // (a file whose stamp changed is checked once: the new stamp is
        // saved at once, even by a run with nothing to do)
        let restamped = at.stamp.as_ref() != Some(&stamp);
        let fresh = self.walk_afresh(inputs, &mut at, changed, cursor).await;
        let cursor = fresh.as_ref().unwrap_or(cursor);
        at.stamp = Some(stamp);
        if !job.once && at.offset == 0 && at.done == 0 && cursor.key.is_empty() {
            // A new walk of the file, nothing in it done or started yet,
            // does every input again: the last walk's failures are not
            // this one's.
            self.forget_failed().await;
        }
        let at_place = Position {
            offset: at.offset,
            line: at.line,
        };
        let reader = Reader::open(inputs, at_place)
            .map_err(|source| Error::Io {
                what: "read the inputs of",
                path: inputs.file.clone(),
                source,
            })?
            .refusing(&self.cred.secret);
        let (first, ahead) = resume_points(cursor, job.steps.len());
        info!(
            job = job.name,
            "run {run} starts at {} line {} ({} input(s) done{})",
            inputs.file.display(),
            at.line,
            at.done,
            if job.once {
                ""
            } else {
                " in this walk of the file"
            }
        );
        *self.feed.borrow_mut() = Some(Feed {
            reader,
            first,
            ahead,
            ended: false,
            next: at_place,
            warned: SkipWarnings::default(),
            seen_map: seen_map(job, at.walk),
            seen_here: HashMap::new(),
            run,
            resume_line: at.line,
            on_disk: if job.once {
                self.results_on_disk(cursor, highest_run)
            } else {
                HashSet::new()
            },
            recent: self.recent_runs(cursor, highest_run),
            retry: self.retries().await,
            retrying: false,
            failed: 0,
            answered: false,
            stopping: None,
        });
        let mut round = Round::of_inputs(run, at);
        if restamped {
            round.bump();
        }
        Ok(round)
    }

    /// A job not once whose file changed mid-walk in the part done
    /// (`changed`: its first line that did, 0 when the cursor kept no
    /// record of it): its place may be inside a line now, so it walks the
    /// file afresh from its start (the cursor it resumes from then, none
    /// of the old walk's keys in it). A file that changed only after the
    /// part done (lines appended, an identical copy put in its place) is
    /// walked on from the place.
    async fn walk_afresh(
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
        self.forget_seen(at.walk).await;
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
    async fn check_done_part(
        &self,
        inputs: &Inputs,
        at: &InputAt,
    ) -> Result<Option<done_part::Changed>> {
        let Some(store) = self.meter.store() else {
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
            reader: Reader::open(inputs, Position::default()).map_err(io)?,
            ended: false,
        };
        let mut checker = Checker::default();
        let map = done_map(self.job);
        let mut from = 0;
        while from < at.chunks {
            let to = (from + CHUNKS_AT_ONCE).min(at.chunks);
            let fields: Vec<String> = (from..to).map(|i| format!("{i:012}")).collect();
            let chunks: Option<Vec<Chunk>> = store
                .map_get(&map, &fields)
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

    /// The 78 of a done part that changed at `changed`.
    fn done_part_changed(&self, inputs: &Inputs, changed: done_part::Changed) -> Error {
        Error::Config {
            file: inputs.file.clone(),
            field: format!("line {}", changed.line),
            message: format!(
                "the part of the file job {} has done changed here since (edited, truncated or replaced): \
                 its inputs are not done again, nor skipped, unless asked: `portion reset {} --yes` does every one again",
                self.job.name, self.job.name
            ),
        }
    }

    /// The skipped records past those warned about one by one, one line a
    /// kind: at the run's end, however it ends.
    pub(super) fn say_skip_totals(&self) {
        let Some(feed) = self.feed.borrow_mut().as_mut().map(|f| f.warned.totals()) else {
            return;
        };
        for line in feed {
            warn!(job = self.job.name, "{line}");
        }
    }

    /// Read inputs into the window while it has room. Whether it took any
    /// (none: the file ended, or the window is full).
    pub(super) async fn read_inputs(&self) -> Result<bool> {
        let batch = self.job.inputs.as_ref().and_then(|i| i.batch);
        let room = window_cap(self.job.concurrency, batch)
            .saturating_sub(self.round.borrow().window_len());
        if room > 0 && self.read_retries(room) {
            return Ok(true);
        }
        let items = {
            let mut feed = self.feed.borrow_mut();
            let Some(feed) = feed.as_mut() else {
                return Ok(false);
            };
            feed.take(room).map_err(|source| Error::Io {
                what: "read the inputs of",
                path: feed.reader.file().to_path_buf(),
                source,
            })?
        };
        let held = self.first_lines(&items).await?;
        let mut round = self.round.borrow_mut();
        let mut feed = self.feed.borrow_mut();
        let feed = feed.as_mut().expect("a job of inputs has its feed");
        let mut held = held.into_iter();
        let took = !items.is_empty();
        for item in items {
            match item {
                Item::Skip(skip) => {
                    if skip.reason != SkipReason::Blank
                        && feed
                            .warned
                            .note(Kind::of(&skip.reason), || skip.to_string())
                    {
                        warn!(job = self.job.name, "{skip}: skipped, not charged");
                    }
                    round.push(Key::new(), skip.span, Default::default(), Slot::Skipped);
                }
                Item::Record(r) => {
                    let first = held.next().unwrap_or(r.span.line);
                    if first != r.span.line {
                        let said = || {
                            format!(
                                "{} line {}: key {} again (first on line {first})",
                                feed.reader.file().display(),
                                r.span.line,
                                printable(&r.key)
                            )
                        };
                        if feed.warned.note(Kind::KeyAgain, said) {
                            warn!(job = self.job.name, "{}: skipped, not charged", said());
                        }
                        round.push(r.key, r.span, r.fields, Slot::Skipped);
                        continue;
                    }
                    let state = self.state_of(feed, &r.key);
                    let mut report = self.report.borrow_mut();
                    report.regions_total += 1;
                    if state == Slot::Done {
                        report.regions_done += 1;
                    }
                    round.push(r.key, r.span, r.fields, state);
                }
            }
        }
        if feed.ended {
            round.read_to(feed.next);
        }
        Ok(took)
    }

    /// Where an input just read starts: done already (the cursor says so,
    /// or its result is on disk), where the cursor says it is, or afresh.
    fn state_of(&self, feed: &mut Feed, key: &str) -> Slot {
        let recent = match &mut feed.recent {
            Some((runs, left)) if *left > 0 => {
                *left -= 1;
                Some(runs.clone())
            }
            _ => None,
        };
        // (a page of a one-request last step is the whole result)
        // (with a table, the rows are the result: a page written whose
        // rows a kill or a locked database kept out is not done)
        let written = recent.is_some_and(|runs| match self.job.sqlite {
            Some(_) => self.rows_of_runs(key, &runs),
            None => self.page_on_disk(key, &runs),
        });
        if feed.on_disk.remove(key) || written {
            if feed.first.as_ref().is_some_and(|(first, _)| first == key) {
                feed.first = None;
            }
            feed.ahead.remove(key);
            return Slot::Done;
        }
        feed.state_of(key)
    }

    /// Every input of the file read and served: a job that is not `once`
    /// walks it again from its start next time (the keys it saw forgotten);
    /// a once-job stays at the end, where lines appended later are read.
    pub(super) async fn inputs_walked(&self) {
        let ended = self.feed.borrow().as_ref().is_some_and(|f| f.ended);
        if !ended || self.round.borrow().window_len() > 0 {
            return;
        }
        if self.job.once {
            // Lines read after the last input served (blank or skipped
            // ones, or a file of nothing else) moved the place and the
            // count of skipped without a save: saved now, so that the
            // next run starts after them and the count says them.
            let version = self.round.borrow().version();
            self.write_cursor(version).await;
            return;
        }
        let walk = {
            let mut round = self.round.borrow_mut();
            let Some(w) = round.window_mut() else { return };
            let walk = w.at.walk;
            self.report.borrow_mut().walk_ended = Some((w.at.done, w.at.skipped));
            w.at = InputAt {
                walk: walk + 1,
                line: 1,
                stamp: w.at.stamp.take(),
                ..InputAt::default()
            };
            walk
        };
        self.save_round().await;
        self.forget_seen(walk).await;
    }
}
