//! [`Round`]: where each region of a run's round is, and the one cursor
//! that says it. With `concurrency` above 1 several regions are walked side
//! by side and finish in any order, so "the page to do next" is no longer
//! one position: the cursor saved is the earliest region (in round order)
//! not yet served, at its earliest page not yet written, and every region
//! after it that was started or served rides along in [`Cursor::ahead`].
//! A stop or a kill then redoes at most the pages that were in flight.
//!
//! A job of inputs has no list to hold: its round is a window onto its file
//! ([`RoundWindow`]), from the first input not done (the cursor's) to the last
//! one read, at most a few times `concurrency` long. Inputs done at its
//! front leave it, moving the cursor's place in the file past them.

use std::collections::VecDeque;

use tracing::info;

use super::describe_position;
use crate::config::{InputFields, Job};
use crate::inputs::RecordStart;
use crate::inputs::Span;
use crate::inputs::done_part::{Chunk, Seen};
use crate::runner::Key;
use crate::runner::cursor::{Ahead, Cursor, InputAt, Start};

/// Where one key of the round is.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Slot {
    /// Not started by this run: from its first step, or from where an
    /// earlier run left it.
    Waiting(Option<Start>),
    /// Started: the next run resumes it here (boxed: a cursor is large).
    At(Box<Cursor>),
    /// Served this round (or given up on, its error reported).
    Done,
    /// An input not done at all: its record unreadable or its key repeated
    /// (warned about and counted when it was read).
    Skipped,
}

impl Slot {
    fn is_over(&self) -> bool {
        matches!(self, Slot::Done | Slot::Skipped)
    }
}

/// The keys of one run in round order (slot 0 is where it started). Slots
/// are numbered from the round's start; with inputs, the ones before
/// `base` have left the window.
#[derive(Default)]
pub(super) struct Round {
    run: u64,
    /// The number of `keys[0]`'s slot.
    base: usize,
    keys: VecDeque<Key>,
    slots: VecDeque<Slot>,
    /// How many times a slot changed: which state a cursor write carried.
    version: u64,
    /// A job of inputs: the records in the window and the file around it.
    window: Option<RoundWindow>,
}

/// A job of inputs' round: the records of its slots, in file order, and
/// where the first of them starts.
#[derive(Debug, Default)]
pub(super) struct RoundWindow {
    records: VecDeque<(Span, InputFields)>,
    /// Where the first input not done starts (the file's end when every
    /// input read is done): what the cursor saves.
    pub(super) at: InputAt,
    /// Chunks of the done part filled since the last cursor write, to be
    /// kept in the store before the cursor that counts them.
    pub(super) chunks: Vec<(u64, Chunk)>,
    /// Failed inputs done again (`portion reset JOB --failed`) at the
    /// window's front, read before any of the file's from the cursor on:
    /// they were counted done when they failed, so their leaving moves
    /// nothing.
    retries: usize,
    /// The keys of those that left the window since asked for.
    pub(super) retried: Vec<Key>,
}

impl Round {
    /// This run's round: every region once, from the cursor's on, wrapping
    /// around (slot 0 where the cursor points), the regions the cursor has
    /// ahead of it in their slots.
    pub(super) fn of_regions(job: &Job, cursor: &Cursor, run: u64) -> Round {
        // (a job without regions has one key, the empty one)
        let keys: Vec<&str> = if job.regions.is_empty() {
            vec![""]
        } else {
            job.regions.iter().map(String::as_str).collect()
        };
        let n = keys.len();
        let start = cursor.start(&job.regions, job.steps.len());
        let order = (0..n).map(|i| keys[(start.index + i) % n].to_string());
        let ahead: Vec<_> = cursor
            .ahead_starts(&job.regions, job.steps.len())
            .into_iter()
            .map(|(index, s)| ((index + n - start.index) % n, s))
            .collect();
        let also = match ahead.len() {
            0 => String::new(),
            k => format!(" (and {k} region(s) after it that an earlier run started or served)"),
        };
        info!(
            job = job.name,
            "run {run} starts at {}{also}",
            describe_position(keys[start.index], start.place.step, start.place.page)
        );
        Self::new(run, order.collect(), start, ahead)
    }

    /// A round of `run` over `keys` (already in round order), the first
    /// from `first`, the others from `ahead` (slot, start; `None`: served).
    pub(super) fn new(
        run: u64,
        keys: Vec<Key>,
        first: Start,
        ahead: Vec<(usize, Option<Start>)>,
    ) -> Self {
        let mut slots = vec![Slot::Waiting(None); keys.len()];
        slots[0] = Slot::Waiting(Some(first));
        for (slot, start) in ahead {
            if slot > 0 && slot < slots.len() {
                slots[slot] = start.map_or(Slot::Done, |s| Slot::Waiting(Some(s)));
            }
        }
        Self {
            run,
            base: 0,
            keys: keys.into(),
            slots: slots.into(),
            version: 0,
            window: None,
        }
    }

    /// A round of `run` over a file of inputs, from `at` (read as the
    /// run goes: [`Round::push`]).
    pub(super) fn of_inputs(run: u64, at: InputAt) -> Self {
        Self {
            run,
            window: Some(RoundWindow {
                at,
                ..RoundWindow::default()
            }),
            ..Self::default()
        }
    }

    /// The number after the last slot there is (with inputs: read so far).
    pub(super) fn end(&self) -> usize {
        self.base + self.slots.len()
    }

    /// Slots in the window (with regions: every one).
    pub(super) fn window_len(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn key(&self, slot: usize) -> &str {
        &self.keys[slot - self.base]
    }

    pub(super) fn slot(&self, slot: usize) -> &Slot {
        &self.slots[slot - self.base]
    }

    /// The fields of the input in `slot` (none with regions).
    pub(super) fn fields(&self, slot: usize) -> Option<&InputFields> {
        let w = self.window.as_ref()?;
        w.records.get(slot.checked_sub(self.base)?).map(|(_, f)| f)
    }

    /// Where the input in `slot` is in its file (none with regions).
    pub(super) fn span(&self, slot: usize) -> Option<&Span> {
        let w = self.window.as_ref()?;
        w.records.get(slot.checked_sub(self.base)?).map(|(s, _)| s)
    }

    pub(super) fn window_mut(&mut self) -> Option<&mut RoundWindow> {
        self.window.as_mut()
    }

    /// An input read from the file, at the end of the window.
    pub(super) fn push(&mut self, key: Key, span: Span, fields: InputFields, state: Slot) {
        if let Some(w) = &mut self.window {
            if self.slots.is_empty() {
                w.at.offset = span.start;
                w.at.line = span.line;
            }
            w.records.push_back((span, fields));
            self.keys.push_back(key);
            self.slots.push_back(state);
            self.version += 1;
            self.leave_done();
        }
    }

    /// A failed input to do again, read back from its place in the file:
    /// before any input of the file from the cursor on.
    pub(super) fn push_retry(&mut self, key: Key, span: Span, fields: InputFields, state: Slot) {
        if let Some(w) = &mut self.window {
            debug_assert_eq!(w.retries, self.slots.len(), "retries come first");
            w.retries += 1;
            w.records.push_back((span, fields));
            self.keys.push_back(key);
            self.slots.push_back(state);
            self.version += 1;
            self.leave_done();
        }
    }

    /// The file has no more inputs after the window: where the next read
    /// would start (the cursor's place once the window is empty).
    pub(super) fn read_to(&mut self, next: RecordStart) {
        if let Some(w) = &mut self.window
            && self.slots.is_empty()
        {
            (w.at.offset, w.at.line) = (next.offset, next.line.max(1));
        }
    }

    pub(super) fn set(&mut self, slot: usize, state: Slot) {
        // (an input that left the window is over: nothing to change)
        let Some(i) = slot.checked_sub(self.base) else {
            return;
        };
        self.slots[i] = state;
        self.version += 1;
        self.leave_done();
    }

    /// With inputs: those over at the window's front leave it, the place
    /// in the file moving past them (and a once-job's done part growing).
    fn leave_done(&mut self) {
        let Some(w) = &mut self.window else { return };
        while self.slots.front().is_some_and(Slot::is_over) {
            let skipped = self.slots.pop_front() == Some(Slot::Skipped);
            let key = self.keys.pop_front().unwrap_or_default();
            self.base += 1;
            let (span, _) = w.records.pop_front().expect("a record per slot");
            if w.retries > 0 {
                w.retries -= 1;
                w.retried.push(key);
                continue;
            }
            let next = span.next();
            (w.at.offset, w.at.line) = (next.offset, next.line);
            if skipped {
                w.at.skipped += 1;
            } else {
                w.at.done += 1;
            }
            // (every job of inputs: a once-job checks it when its file
            // changes, one that is not resumes its walk if it is the same)
            let seen = Seen {
                line: span.line,
                start: span.start,
                end: span.end,
                hash: span.hash,
            };
            if let Some(chunk) = w.at.tail.push(seen) {
                w.chunks.push((w.at.chunks, chunk));
                w.at.chunks += 1;
            }
        }
        if let Some((span, _)) = w.records.front().filter(|_| w.retries == 0) {
            (w.at.offset, w.at.line) = (span.start, span.line);
        }
    }

    /// A change the slots do not show (a place in the file): a version
    /// for the cursor that says it.
    pub(super) fn bump(&mut self) -> u64 {
        self.version += 1;
        self.version
    }

    pub(super) fn version(&self) -> u64 {
        self.version
    }

    /// The cursor that says this round: the earliest key not served,
    /// where it is, and the keys after it already started or served.
    /// Once all are served, the key the round started from (the one
    /// served longest ago when the next run starts); with inputs, the
    /// place in the file after the last one read.
    pub(super) fn cursor(&self) -> Cursor {
        let Some(first) = self.slots.iter().position(|s| !s.is_over()) else {
            return match &self.window {
                Some(w) => Cursor {
                    run: self.run,
                    input: Some(w.at.clone()),
                    ..Cursor::default()
                },
                None => self.fresh(0),
            };
        };
        let mut cursor = self.at(first).unwrap_or_else(|| self.fresh(first));
        cursor.ahead = (first + 1..self.slots.len())
            .filter_map(|i| match &self.slots[i] {
                Slot::Done | Slot::Skipped => Some(Ahead {
                    key: self.keys[i].clone(),
                    done: true,
                    ..Ahead::default()
                }),
                _ => self.at(i).map(|c| Ahead::of(&c)),
            })
            .collect();
        cursor.input = self.window.as_ref().map(|w| w.at.clone());
        cursor
    }

    /// Where slot `i` (of the window) resumes, if it is anywhere but its
    /// first page.
    fn at(&self, i: usize) -> Option<Cursor> {
        match &self.slots[i] {
            Slot::At(c) => Some(Cursor {
                run: self.run,
                ..(**c).clone()
            }),
            Slot::Waiting(Some(s)) => Some(s.at(self.run, &self.keys[i])),
            Slot::Waiting(None) | Slot::Done | Slot::Skipped => None,
        }
    }

    fn fresh(&self, i: usize) -> Cursor {
        Cursor {
            run: self.run,
            key: self.keys.get(i).cloned().unwrap_or_default(),
            ..Cursor::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::cursor::Place;

    fn round() -> Round {
        let regions = ["GB", "DE", "US", "FR"].map(String::from).to_vec();
        Round::new(7, regions, Start::default(), Vec::new())
    }

    fn at(region: &str, page: u32) -> Cursor {
        Cursor {
            key: region.into(),
            place: Place {
                page,
                token: Some(format!("T{page}")),
                ..Place::default()
            },
            ..Cursor::default()
        }
    }

    #[test]
    fn the_cursor_is_the_earliest_region_not_served_with_the_others_ahead() {
        let mut r = round();
        assert_eq!(r.cursor().key, "GB");
        assert!(r.cursor().ahead.is_empty());
        r.set(1, Slot::Done);
        r.set(2, Slot::At(Box::new(at("US", 2))));
        r.set(0, Slot::At(Box::new(at("GB", 1))));
        let c = r.cursor();
        assert_eq!((c.run, c.key.as_str(), c.place.page), (7, "GB", 1));
        let ahead: Vec<(&str, bool, u32)> = c
            .ahead
            .iter()
            .map(|a| (a.key.as_str(), a.done, a.place.page))
            .collect();
        assert_eq!(ahead, [("DE", true, 0), ("US", false, 2)]);
        // GB served: DE too, so US is the earliest; FR never started.
        r.set(0, Slot::Done);
        let c = r.cursor();
        assert_eq!((c.key.as_str(), c.place.page, c.ahead.len()), ("US", 2, 0));
        r.set(2, Slot::Done);
        r.set(3, Slot::Done);
        let c = r.cursor();
        assert_eq!((c.key.as_str(), c.place.page, c.ahead.len()), ("GB", 0, 0));
    }

    #[test]
    fn a_saved_round_comes_back_as_it_was() {
        let mut r = round();
        r.set(0, Slot::At(Box::new(at("GB", 3))));
        r.set(1, Slot::Done);
        r.set(3, Slot::At(Box::new(at("FR", 1))));
        let saved = r.cursor();
        let regions = ["FR", "GB", "DE", "US"].map(String::from).to_vec();
        let first = saved.start(&regions, 1);
        let ahead: Vec<(usize, Option<Start>)> = saved
            .ahead_starts(&regions, 1)
            .into_iter()
            .map(|(index, s)| ((index + 4 - first.index) % 4, s))
            .collect();
        let order = ["GB", "DE", "US", "FR"].map(String::from).to_vec();
        let back = Round::new(7, order, first, ahead);
        assert_eq!(back.cursor(), saved);
        assert_eq!(back.slot(1), &Slot::Done);
        assert_eq!(back.slot(2), &Slot::Waiting(None));
    }
}
