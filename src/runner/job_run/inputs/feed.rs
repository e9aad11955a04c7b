//! [`Feed`]: a job of inputs' file as this run reads it into the round's
//! window, where the cursor's keys resume in it, and what the run learns
//! of its inputs as it goes (failed, answered, stopping).

use std::collections::{HashMap, HashSet};

use super::super::round::Slot;
use crate::inputs::warnings::SkipWarnings;
use crate::inputs::{Item, Reader, RecordStart};
use crate::runner::Key;
use crate::runner::cursor::{Cursor, Start};

/// A job of inputs' file as this run reads it.
pub(in crate::runner::job_run) struct Feed {
    pub(in crate::runner::job_run) reader: Reader,
    /// Where the cursor's key resumes (the first input read, when its key
    /// is the cursor's), and the keys ahead of it (`None`: done).
    pub(in crate::runner::job_run) first: Option<(Key, Start)>,
    pub(in crate::runner::job_run) ahead: KeysAhead,
    /// The file has no record after the last one read.
    pub(in crate::runner::job_run) ended: bool,
    /// Where the next read starts.
    pub(in crate::runner::job_run) next: RecordStart,
    /// The skipped records warned about, and those only counted (said at
    /// the run's end: [`JobRun::say_skip_totals`]).
    pub(in crate::runner::job_run) warned: SkipWarnings,
    /// The keys this walk has seen and the line of each one's first record:
    /// in the store, or here when the run has none (unmetered).
    pub(in crate::runner::job_run) seen: crate::runner::job_state::Map,
    pub(in crate::runner::job_run) seen_here: HashMap<Key, String>,
    /// This run's number, and the line it resumed at: entries of the keys
    /// seen are told apart by them (see [`JobRun::first_lines`]).
    pub(in crate::runner::job_run) run: u64,
    pub(in crate::runner::job_run) resume_line: u64,
    /// A once-job: inputs whose result is on disk though the cursor does not
    /// say them done (a kill after the page, before the cursor; a store that
    /// lost the cursor): not fetched again.
    pub(in crate::runner::job_run) on_disk: HashSet<Key>,
    /// A once-job resumed: the runs since the cursor's, whose pages the
    /// first inputs read (as many as a window: the most a run can have
    /// started past the cursor) are looked for ([`JobRun::page_on_disk`]),
    /// and how many inputs are still to be looked at.
    pub(in crate::runner::job_run) recent: Option<(std::ops::RangeInclusive<u64>, usize)>,
    /// Failed inputs to do again before the file's (`portion reset JOB
    /// --failed`): their keys and places, in file order.
    pub(in crate::runner::job_run) retry: std::collections::VecDeque<(Key, RecordStart)>,
    /// Whether this run read any such (the map of them is forgotten once
    /// all are over).
    pub(in crate::runner::job_run) retrying: bool,
    /// Inputs this run recorded as failed, and whether any page was
    /// answered: the first [`super::failed::INPUTS_REFUSED`] failed and
    /// none answered stops the job.
    pub(in crate::runner::job_run) failed: u32,
    pub(in crate::runner::job_run) answered: bool,
    /// Inputs in a row failed by a 5xx, a 408 or a network error past
    /// their retries, since a page was last answered: at
    /// [`super::failed::OUTAGE_INPUTS`] the job stops (an outage).
    pub(in crate::runner::job_run) outage: u32,
    /// The job stops for the inputs refused: no request is charged after
    /// it, those in flight finish (each refusal recorded), then the run
    /// ends with this error.
    pub(in crate::runner::job_run) stopping: Option<crate::Error>,
}

/// Why a job of inputs stops for its inputs failed.
pub(in crate::runner::job_run) enum Breaker {
    /// So many failed in a row by the upstream's own trouble (an outage).
    Outage(u32),
    /// The first so many of the run failed, none answered (a bad key).
    NoneAnswered(u32),
}

impl Feed {
    /// The skipped records past those warned about one by one, one line a
    /// kind: at the run's end, however it ends.
    pub(in crate::runner::job_run) fn say_skip_totals(&mut self, job: &str) {
        for line in self.warned.totals() {
            tracing::warn!(job, "{line}");
        }
    }

    /// The file as `reader` reads it from `at` (the cursor's place, its
    /// keys resuming where `cursor` says; a job of `steps` steps), for
    /// run `run`; nothing failed, answered or found on disk yet.
    pub(in crate::runner::job_run) fn new(
        reader: Reader,
        cursor: &Cursor,
        steps: usize,
        at: RecordStart,
        run: u64,
    ) -> Self {
        let (first, ahead) = resume_points(cursor, steps);
        Feed {
            reader,
            first,
            ahead,
            ended: false,
            next: at,
            warned: SkipWarnings::default(),
            seen: crate::runner::job_state::Map::seen(true, 0),
            seen_here: HashMap::new(),
            run,
            resume_line: at.line,
            on_disk: HashSet::new(),
            recent: None,
            retry: Default::default(),
            retrying: false,
            failed: 0,
            answered: false,
            outage: 0,
            stopping: None,
        }
    }

    /// A page answered: the key and the URL are good.
    pub(in crate::runner::job_run) fn answered(&mut self) {
        self.answered = true;
        self.outage = 0;
    }

    /// An input failed (`outage`: by the upstream's own trouble past its
    /// retries): whether the job stops now, and why.
    pub(in crate::runner::job_run) fn failed(&mut self, outage: bool) -> Option<Breaker> {
        use super::failed::{INPUTS_REFUSED, OUTAGE_INPUTS};
        self.failed += 1;
        self.outage = if outage { self.outage + 1 } else { 0 };
        if self.outage >= OUTAGE_INPUTS {
            Some(Breaker::Outage(self.outage))
        } else if !self.answered && self.failed >= INPUTS_REFUSED {
            Some(Breaker::NoneAnswered(self.failed))
        } else {
            None
        }
    }

    /// The job stops for its inputs failed, with `error` once the
    /// requests in flight are over (the first reason stays).
    pub(in crate::runner::job_run) fn stop(&mut self, error: crate::Error) {
        self.stopping.get_or_insert(error);
    }

    /// Whether the job stops for its inputs failed.
    pub(in crate::runner::job_run) fn stopping(&self) -> bool {
        self.stopping.is_some()
    }

    /// The error the job stops with for its inputs failed, once.
    pub(in crate::runner::job_run) fn take_stop(&mut self) -> Option<crate::Error> {
        self.stopping.take()
    }

    /// Up to `room` items from the file, none once it ended.
    pub(in crate::runner::job_run) fn take(&mut self, room: usize) -> std::io::Result<Vec<Item>> {
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

    /// Where an input just read starts: done already (the cursor says so,
    /// or its result is on disk: `written` says whether one of a set of
    /// runs wrote its last step's result to the outputs), where the cursor
    /// says it is, or afresh.
    pub(in crate::runner::job_run) fn read_state_of(
        &mut self,
        key: &str,
        written: impl FnOnce(&std::ops::RangeInclusive<u64>) -> bool,
    ) -> Slot {
        let recent = match &mut self.recent {
            Some((runs, left)) if *left > 0 => {
                *left -= 1;
                Some(runs.clone())
            }
            _ => None,
        };
        // (a page of a one-request last step is the whole result)
        // (with a table, the rows are the result: a page written whose
        // rows a kill or a locked database kept out is not done)
        let written = recent.is_some_and(|runs| written(&runs));
        if self.on_disk.remove(key) || written {
            if self.first.as_ref().is_some_and(|(first, _)| first == key) {
                self.first = None;
            }
            self.ahead.remove(key);
            return Slot::Done;
        }
        self.state_of(key)
    }

    /// Where an input with `key`, just read, starts: where the cursor left
    /// it (or done, ahead of it), else from its first step.
    pub(in crate::runner::job_run) fn state_of(&mut self, key: &str) -> Slot {
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

/// The keys ahead of the cursor's, and where each resumes (`None`: done).
pub(in crate::runner::job_run) type KeysAhead = HashMap<Key, Option<Start>>;

/// Where the cursor's key resumes, and the keys ahead of it (`None`:
/// done); a step gone from the file restarts its input.
fn resume_points(cursor: &Cursor, steps: usize) -> (Option<(Key, Start)>, KeysAhead) {
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

/// How many inputs the window holds at most: a slow input at its front
/// lets the others go on this far, and no further (the cursor carries the
/// window: it stays small).
pub(in crate::runner::job_run) fn window_cap(concurrency: usize, batch: Option<usize>) -> usize {
    let cap = (4 * concurrency).max(64);
    // (inputs in batches: room for every batch in flight and the next)
    batch.map_or(cap, |b| cap.max((concurrency + 1) * b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{InputFormat, Inputs};
    use crate::runner::cursor::{Ahead, Place};

    /// A feed over a `.txt` file of `keys`, from its start, with `cursor`.
    fn feed(dir: &std::path::Path, keys: &[&str], cursor: &Cursor) -> Feed {
        let file = dir.join("ids.txt");
        std::fs::write(&file, keys.join("\n") + "\n").unwrap();
        let inputs = Inputs {
            file,
            format: InputFormat::Txt,
            key: String::new(),
            fields: Vec::new(),
            max_key: 150,
            batch: None,
            join: ",".into(),
        };
        let reader = Reader::open(&inputs, RecordStart::default()).unwrap();
        Feed::new(reader, cursor, 2, RecordStart::default(), 7)
    }

    /// The file read a window at a time; each key where the cursor left
    /// it: the cursor's own key resumed at its place, one ahead of it done,
    /// another resumed, the rest from their first step.
    #[test]
    fn keys_are_read_a_window_at_a_time_and_resume_where_the_cursor_says() {
        let dir = tempfile::tempdir().unwrap();
        let place = |step| Place {
            step,
            ..Place::default()
        };
        let cursor = Cursor {
            key: "b".into(),
            place: place(1),
            ahead: vec![
                Ahead {
                    key: "c".into(),
                    done: true,
                    place: Place::default(),
                },
                Ahead {
                    key: "d".into(),
                    done: false,
                    place: place(1),
                },
            ],
            ..Cursor::default()
        };
        let mut f = feed(dir.path(), &["a", "b", "c", "d", "e"], &cursor);
        let keys = |items: Vec<Item>| -> Vec<String> {
            items
                .into_iter()
                .map(|i| match i {
                    Item::Record(r) => r.key,
                    Item::Skip(_) => "skip".into(),
                })
                .collect()
        };
        assert_eq!(keys(f.take(3).unwrap()), ["a", "b", "c"]);
        assert!(!f.ended);
        assert_eq!(f.state_of("a"), Slot::Waiting(None));
        let resumed = |step| {
            Slot::Waiting(Some(Start {
                index: 0,
                place: place(step),
            }))
        };
        assert_eq!(f.state_of("b"), resumed(1));
        assert_eq!(f.state_of("c"), Slot::Done);
        assert_eq!(keys(f.take(3).unwrap()), ["d", "e"]);
        assert!(f.ended);
        assert_eq!(f.state_of("d"), resumed(1));
        assert_eq!(f.state_of("e"), Slot::Waiting(None));
        // (a key seen again after its place was taken starts afresh)
        assert_eq!(f.state_of("b"), Slot::Waiting(None));
    }

    /// An input whose result is on disk, or that one of the recent runs
    /// wrote (asked of the first `left` inputs only), is done whatever
    /// the cursor says; the others are as the cursor says.
    #[test]
    fn an_input_with_its_result_on_disk_or_written_by_a_recent_run_is_done() {
        let dir = tempfile::tempdir().unwrap();
        let cursor = Cursor {
            key: "a".into(),
            place: Place {
                step: 1,
                ..Place::default()
            },
            ..Cursor::default()
        };
        let mut f = feed(dir.path(), &["a", "b", "c", "d"], &cursor);
        f.on_disk.insert("a".into());
        f.recent = Some((3..=5, 2));
        let asked = std::cell::RefCell::new(Vec::new());
        let written = |key: &'static str| {
            let asked = &asked;
            move |runs: &std::ops::RangeInclusive<u64>| {
                asked.borrow_mut().push((key, runs.clone()));
                key == "b"
            }
        };
        assert_eq!(f.read_state_of("a", written("a")), Slot::Done);
        // (the cursor's own place was the done input's: gone with it)
        assert!(f.first.is_none());
        assert_eq!(f.read_state_of("b", written("b")), Slot::Done);
        assert_eq!(f.read_state_of("c", written("c")), Slot::Waiting(None));
        // Past the window's worth of inputs, the outputs are not asked.
        assert_eq!(f.read_state_of("b", written("b")), Slot::Waiting(None));
        assert_eq!(*asked.borrow(), [("a", 3..=5), ("b", 3..=5)]);
    }

    /// The two breakers: 3 inputs in a row failed by an outage stop the
    /// job, one refused for itself between resets the count; the first
    /// 10 failed with none answered stop it, one answered page disarms it.
    #[test]
    fn inputs_failed_stop_the_job_in_a_row_or_when_none_answered() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = feed(dir.path(), &["a"], &Cursor::default());
        assert!(f.failed(true).is_none());
        assert!(f.failed(true).is_none());
        assert!(f.failed(false).is_none(), "a refusal for itself");
        assert!(f.failed(true).is_none());
        assert!(f.failed(true).is_none());
        assert!(matches!(f.failed(true), Some(Breaker::Outage(3))));

        let mut f = feed(dir.path(), &["a"], &Cursor::default());
        for _ in 0..9 {
            assert!(f.failed(false).is_none());
        }
        assert!(matches!(f.failed(false), Some(Breaker::NoneAnswered(10))));

        let mut f = feed(dir.path(), &["a"], &Cursor::default());
        f.failed(true);
        f.failed(true);
        f.answered();
        for _ in 0..20 {
            assert!(f.failed(false).is_none(), "one was answered");
        }
        assert!(f.failed(true).is_none() && f.failed(true).is_none());
        assert!(!f.stopping());
        f.stop(crate::Error::Usage("first".into()));
        f.stop(crate::Error::Usage("second".into()));
        assert!(f.stopping());
        assert!(matches!(f.take_stop(), Some(crate::Error::Usage(m)) if m == "first"));
        assert!(!f.stopping());
    }
}
