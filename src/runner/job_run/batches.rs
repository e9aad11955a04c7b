//! [`Batches`]: a fan-out step's batches not yet written, by number. With
//! `concurrency` above 1 a region's batches go out side by side and are
//! written in any order, so "the next batch" is no longer one place: the
//! cursor keeps the earliest batch not yet written (`page`, its values and
//! all after them in `batch`) and the numbers of those after it already
//! written (`written`), which the next run skips. A kill then redoes at
//! most the batches in flight, and a batch keeps its number across runs.
//!
//! When another fan-out follows, a batch's page also holds values for it,
//! which must reach it in page order: those of a batch written ahead wait
//! here (and in the cursor's `found_ahead`) until every batch before it
//! is written, then [`Batches::mark_written`] hands them over in order.

use std::collections::{BTreeMap, BTreeSet};

use super::Position;
use super::found::FoundValues;
use crate::runner::cursor::{BatchAt, Cursor, Place};

/// Where a fan-out's values not yet sent are: in memory (a cursor that
/// holds them, a run without a store), or in the store's list.
#[derive(Debug)]
pub(super) enum Values {
    Held(Vec<String>),
    /// `left` values from position `from` of the list `id`.
    Listed {
        id: String,
        from: usize,
        left: usize,
    },
}

/// The batches of one region's fan-out step not yet written.
#[derive(Debug)]
pub(super) struct Batches {
    /// The most values per batch.
    size: usize,
    /// The number of the earliest batch not yet written.
    first: u32,
    /// The values of batch `first` and every one after it, in order, when
    /// held in memory (no `list`).
    values: Vec<String>,
    /// How many values batch `first` and those after it hold.
    left: usize,
    /// Batches after `first` already written.
    written: BTreeSet<u32>,
    /// What the pages of batches in `written` hold for a fan-out after
    /// this step, by number (none kept for a batch that holds none).
    found: BTreeMap<u32, Vec<String>>,
    /// What batches written ahead under another batch size held for the
    /// next step: their numbers no longer fit, so it goes first.
    early: Vec<String>,
    /// The list in the store that holds the values (its id, and where
    /// batch `first` starts in it), once kept there: the cursor then says
    /// a position in it, not the values, and a batch's values are read
    /// from it when the batch is sent.
    list: Option<(String, usize)>,
    /// The cursor that resumed these batches points into a stored list
    /// that `values` no longer end (cut afresh): a new list may take its
    /// place only once a cursor that does not point into it is saved.
    replaces: bool,
}

impl Batches {
    /// Whether batches saved in batches of `saved_size`, `written` of them
    /// after `first`, are cut afresh in batches of `size` (the file
    /// changed): then every value not yet written is needed at once.
    pub(super) fn cut_afresh(
        saved_size: Option<u32>,
        size: u32,
        first: u32,
        written: &[u32],
    ) -> bool {
        saved_size.is_some_and(|saved| saved.max(1) != size.max(1))
            && written.iter().any(|&k| k > first)
    }

    /// The batches of `values` (batch `first` first) in batches of `size`,
    /// those in `written` already done, their pages holding `found` for
    /// the next step. `written` was counted in batches of `saved_size`:
    /// when that is not `size` (the file changed), the values of the
    /// written batches are dropped and the rest cut afresh (values held
    /// only: [`Self::cut_afresh`] says when to read a list first), and
    /// what they found goes to the next step first ([`Self::take_early`]):
    /// the one case where its values' order is not the pages' order.
    /// `replaces`: the values held were read from the list the saved
    /// cursor points into.
    pub(super) fn resume(
        values: Values,
        first: u32,
        written: &[u32],
        found: BTreeMap<u32, Vec<String>>,
        saved_size: Option<u32>,
        size: u32,
        replaces: bool,
    ) -> Self {
        let size = size.max(1) as usize;
        let (mut values, mut list) = match values {
            Values::Held(v) => (v, None),
            Values::Listed { id, from, left } => (Vec::new(), Some((id, from, left))),
        };
        let mut replaces = replaces;
        let mut done: BTreeSet<u32> = written.iter().copied().filter(|&k| k > first).collect();
        let mut early = Vec::new();
        match saved_size {
            Some(saved) if saved as usize != size && !done.is_empty() && list.is_none() => {
                let saved = saved.max(1) as usize;
                values = values
                    .chunks(saved)
                    .zip(first..)
                    .filter(|(_, k)| !done.contains(k))
                    .flat_map(|(c, _)| c.to_vec())
                    .collect();
                early = (found.iter())
                    .filter(|(k, _)| done.contains(k))
                    .flat_map(|(_, v)| v.iter().cloned())
                    .collect();
                done.clear();
            }
            Some(saved) if saved as usize != size && !done.is_empty() => {
                // (not reached: the caller reads the list first)
                list = None;
                done.clear();
            }
            None => done.clear(),
            _ => replaces = false,
        }
        let left = list.as_ref().map_or(values.len(), |l| l.2);
        let mut batches = Self {
            size,
            first,
            values,
            left,
            written: done,
            found,
            early,
            list: list.map(|(id, from, _)| (id, from)),
            replaces,
        };
        let end = batches.end();
        batches.written.retain(|&k| k < end);
        let written = &batches.written;
        batches.found.retain(|k, _| written.contains(k));
        batches
    }

    /// What batches written under another batch size found (see
    /// [`Self::resume`]), once.
    pub(super) fn take_early(&mut self) -> Vec<String> {
        std::mem::take(&mut self.early)
    }

    /// One past the last batch's number.
    fn end(&self) -> u32 {
        self.first + self.left.div_ceil(self.size) as u32
    }

    /// The batches still to send, in order.
    pub(super) fn todo(&self) -> impl Iterator<Item = u32> + use<> {
        let written = self.written.clone();
        (self.first..self.end()).filter(move |k| !written.contains(k))
    }

    /// Where batch `k`'s values are among those not yet sent: the first,
    /// and how many.
    fn span(&self, k: u32) -> (usize, usize) {
        let from = (k - self.first) as usize * self.size;
        (from, self.size.min(self.left - from))
    }

    /// Batch `k`'s values joined with `join`, when held in memory.
    pub(super) fn joined(&self, k: u32, join: &str) -> Option<String> {
        let (from, n) = self.span(k);
        (self.list.is_none()).then(|| self.values[from..from + n].join(join))
    }

    /// Where batch `k`'s values are in the list: its id, the position of
    /// the first, and how many.
    pub(super) fn in_list(&self, k: u32) -> Option<(&str, u64, u64)> {
        let (from, n) = self.span(k);
        let (id, start) = self.list.as_ref()?;
        Some((id, (start + from) as u64, n as u64))
    }

    /// Batch `k` is written, its page holding `found` for the next step:
    /// the earliest not yet written moves past every batch written in a
    /// row, and what those found comes back, in batch order, for the next
    /// step's values (the rest waits for the batches before it).
    pub(super) fn mark_written(&mut self, k: u32, found: Vec<String>) -> Vec<(u32, Vec<String>)> {
        if k < self.first || k >= self.end() {
            return Vec::new();
        }
        self.written.insert(k);
        if !found.is_empty() {
            self.found.insert(k, found);
        }
        let mut in_row = Vec::new();
        while self.written.remove(&self.first) {
            let found = self.found.remove(&self.first).unwrap_or_default();
            in_row.push((self.first, found));
            let n = self.size.min(self.left);
            if self.list.is_none() {
                self.values.drain(..n);
            }
            self.left -= n;
            if let Some((_, from)) = &mut self.list {
                *from += n;
            }
            self.first += 1;
        }
        in_row
    }

    /// How many values are not yet sent (batch `first` and after).
    pub(super) fn left(&self) -> usize {
        self.left
    }

    pub(super) fn is_done(&self) -> bool {
        self.left == 0
    }

    /// The values not yet sent, when no stored list holds them yet.
    pub(super) fn unlisted(&self) -> Option<&[String]> {
        self.list.is_none().then_some(self.values.as_slice())
    }

    /// Whether the saved cursor points into the stored list these values
    /// were cut from (see [`Self::resume`]).
    pub(super) fn replaces_list(&self) -> bool {
        self.replaces && self.list.is_none()
    }

    /// Whether a stored list holds these values.
    pub(super) fn is_listed(&self) -> bool {
        self.list.is_some()
    }

    /// The values not yet sent are now the whole of the stored list `id`:
    /// no longer held in memory.
    pub(super) fn listed(&mut self, id: String) {
        self.list = Some((id, 0));
        self.values = Vec::new();
    }

    /// Where the next run resumes this step (`found`: what its written
    /// pages hold for a fan-out after it). Without batches written ahead
    /// it is the cursor a sequential fan-out always saved.
    pub(super) fn cursor(&self, at: &Position<'_>, found: &FoundValues) -> Cursor {
        let written: Vec<u32> = self.written.iter().copied().collect();
        let (batch, batch_at) = match &self.list {
            Some((list, from)) => (
                None,
                Some(Box::new(BatchAt {
                    list: list.clone(),
                    from: *from,
                    left: self.left,
                    mapped: true,
                })),
            ),
            None => (Some(self.values.clone()), None),
        };
        at.cursor(Place {
            step: at.step,
            page: self.first,
            token: None,
            batch,
            batch_at,
            batch_size: (!written.is_empty()).then_some(self.size as u32),
            written,
            found: found.held_values().to_vec(),
            found_in: found.found_in(),
            found_ahead: self.found.clone(),
            largest: None,
        })
    }
}

#[cfg(test)]
mod tests;
