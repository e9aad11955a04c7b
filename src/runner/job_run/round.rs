//! [`Round`]: where each region of a run's round is, and the one cursor
//! that says it. With `concurrency` above 1 several regions are walked side
//! by side and finish in any order, so "the page to do next" is no longer
//! one position: the cursor saved is the earliest region (in round order)
//! not yet served, at its earliest page not yet written, and every region
//! after it that was started or served rides along in [`Cursor::ahead`].
//! A stop or a kill then redoes at most the pages that were in flight.

use crate::runner::Key;
use crate::runner::cursor::{Ahead, Cursor, Start};

/// Where one region of the round is.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Slot {
    /// Not started by this run: from its first step, or from where an
    /// earlier run left it.
    Waiting(Option<Start>),
    /// Started: the next run resumes it here.
    At(Cursor),
    /// Served this round (or given up on, its error reported).
    Done,
}

/// The keys (regions) of one run in round order (slot 0 is where it started).
#[derive(Default)]
pub(super) struct Round {
    run: u64,
    keys: Vec<Key>,
    slots: Vec<Slot>,
    /// How many times a slot changed: which state a cursor write carried.
    version: u64,
}

impl Round {
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
            keys,
            slots,
            version: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn key(&self, slot: usize) -> &str {
        &self.keys[slot]
    }

    pub(super) fn slot(&self, slot: usize) -> &Slot {
        &self.slots[slot]
    }

    pub(super) fn set(&mut self, slot: usize, state: Slot) {
        self.slots[slot] = state;
        self.version += 1;
    }

    pub(super) fn version(&self) -> u64 {
        self.version
    }

    /// The cursor that says this round: the earliest region not served,
    /// where it is, and the regions after it already started or served.
    /// Once all are served, the region the round started from (the one
    /// served longest ago when the next run starts).
    pub(super) fn cursor(&self) -> Cursor {
        let Some(first) = self.slots.iter().position(|s| *s != Slot::Done) else {
            return self.fresh(0);
        };
        let mut cursor = self.at(first).unwrap_or_else(|| self.fresh(first));
        cursor.ahead = (first + 1..self.slots.len())
            .filter_map(|i| match &self.slots[i] {
                Slot::Done => Some(Ahead {
                    key: self.keys[i].clone(),
                    done: true,
                    ..Ahead::default()
                }),
                _ => self.at(i).map(|c| Ahead::of(&c)),
            })
            .collect();
        cursor
    }

    /// Where slot `i` resumes, if it is anywhere but its first page.
    fn at(&self, i: usize) -> Option<Cursor> {
        match &self.slots[i] {
            Slot::At(c) => Some(Cursor {
                run: self.run,
                ..c.clone()
            }),
            Slot::Waiting(Some(s)) => Some(s.at(self.run, &self.keys[i])),
            Slot::Waiting(None) | Slot::Done => None,
        }
    }

    fn fresh(&self, i: usize) -> Cursor {
        Cursor {
            run: self.run,
            key: self.keys[i].clone(),
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
        r.set(2, Slot::At(at("US", 2)));
        r.set(0, Slot::At(at("GB", 1)));
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
        r.set(0, Slot::At(at("GB", 3)));
        r.set(1, Slot::Done);
        r.set(3, Slot::At(at("FR", 1)));
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
