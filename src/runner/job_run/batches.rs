//! [`Batches`]: a fan-out step's batches not yet written, by number. With
//! `concurrency` above 1 a region's batches go out side by side and are
//! written in any order, so "the next batch" is no longer one place: the
//! cursor keeps the earliest batch not yet written (`page`, its values and
//! all after them in `batch`) and the numbers of those after it already
//! written (`written`), which the next run skips. A kill then redoes at
//! most the batches in flight, and a batch keeps its number across runs.

use std::collections::BTreeSet;

use super::Position;
use crate::runner::cursor::Cursor;

/// The batches of one region's fan-out step not yet written.
#[derive(Debug)]
pub(super) struct Batches {
    /// The most values per batch.
    size: usize,
    /// The number of the earliest batch not yet written.
    first: u32,
    /// The values of batch `first` and every one after it, in order.
    values: Vec<String>,
    /// Batches after `first` already written.
    written: BTreeSet<u32>,
}

impl Batches {
    /// The batches of `values` (batch `first` first) in batches of `size`,
    /// those in `written` already done. `written` was counted in batches
    /// of `saved_size`: when that is not `size` (the file changed), the
    /// values of the written batches are dropped and the rest cut afresh.
    pub(super) fn resume(
        values: Vec<String>,
        first: u32,
        written: &[u32],
        saved_size: Option<u32>,
        size: u32,
    ) -> Self {
        let size = size.max(1) as usize;
        let mut values = values;
        let mut done: BTreeSet<u32> = written.iter().copied().filter(|&k| k > first).collect();
        match saved_size {
            Some(saved) if saved as usize != size && !done.is_empty() => {
                let saved = saved.max(1) as usize;
                values = values
                    .chunks(saved)
                    .zip(first..)
                    .filter(|(_, k)| !done.contains(k))
                    .flat_map(|(c, _)| c.to_vec())
                    .collect();
                done.clear();
            }
            None => done.clear(),
            _ => {}
        }
        let mut batches = Self {
            size,
            first,
            values,
            written: done,
        };
        let end = batches.end();
        batches.written.retain(|&k| k < end);
        batches
    }

    /// One past the last batch's number.
    fn end(&self) -> u32 {
        self.first + self.values.len().div_ceil(self.size) as u32
    }

    /// The batches still to send, in order.
    pub(super) fn todo(&self) -> Vec<u32> {
        (self.first..self.end())
            .filter(|k| !self.written.contains(k))
            .collect()
    }

    /// Batch `k`'s values joined with `join`.
    pub(super) fn joined(&self, k: u32, join: &str) -> String {
        let from = (k - self.first) as usize * self.size;
        let to = (from + self.size).min(self.values.len());
        self.values[from..to].join(join)
    }

    /// Batch `k` is written: the earliest not yet written moves past every
    /// batch written in a row.
    pub(super) fn mark_written(&mut self, k: u32) {
        if k < self.first || k >= self.end() {
            return;
        }
        self.written.insert(k);
        while self.written.remove(&self.first) {
            let n = self.size.min(self.values.len());
            self.values.drain(..n);
            self.first += 1;
        }
    }

    pub(super) fn is_done(&self) -> bool {
        self.values.is_empty()
    }

    /// Where the next run resumes this step (`found`: what its written
    /// pages hold for a fan-out after it). Without batches written ahead
    /// it is the cursor a sequential fan-out always saved.
    pub(super) fn cursor(&self, at: &Position<'_>, found: &[String]) -> Cursor {
        let written: Vec<u32> = self.written.iter().copied().collect();
        Cursor {
            batch: Some(self.values.clone()),
            batch_size: (!written.is_empty()).then_some(self.size as u32),
            written,
            found: found.to_vec(),
            ..at.cursor(at.region, at.step, self.first, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("v{i}")).collect()
    }

    fn at() -> Position<'static> {
        Position {
            region: "US",
            slot: 0,
            step: 1,
            run: 3,
        }
    }

    #[test]
    fn batches_written_out_of_order_move_the_cursor_only_past_a_row() {
        let mut b = Batches::resume(values(10), 2, &[], None, 3);
        assert_eq!(b.todo(), [2, 3, 4, 5]);
        assert_eq!(b.joined(5, ","), "v9");
        b.mark_written(3);
        b.mark_written(5);
        let c = b.cursor(&at(), &[]);
        assert_eq!(
            (c.page, c.written.clone(), c.batch_size),
            (2, vec![3, 5], Some(3))
        );
        assert_eq!(c.batch.as_ref().unwrap().len(), 10);
        b.mark_written(2);
        let c = b.cursor(&at(), &[]);
        assert_eq!((c.page, c.written.clone()), (4, vec![5]));
        assert_eq!(c.batch.unwrap(), ["v6", "v7", "v8", "v9"]);
        // The next run from that cursor sends batch 4 only, with its values.
        let back = Batches::resume(values(10)[6..].to_vec(), 4, &[5], Some(3), 3);
        assert_eq!(back.todo(), [4]);
        assert_eq!(back.joined(4, ","), "v6,v7,v8");
        b.mark_written(4);
        assert!(b.is_done());
        assert_eq!(b.todo(), Vec::<u32>::new());
    }

    #[test]
    fn in_a_row_the_cursor_is_the_sequential_one() {
        let mut b = Batches::resume(values(5), 0, &[], None, 2);
        b.mark_written(0);
        let c = b.cursor(&at(), &[]);
        assert_eq!((c.page, c.written.len(), c.batch_size), (1, 0, None));
        assert_eq!(c.batch.unwrap(), ["v2", "v3", "v4"]);
    }

    #[test]
    fn a_changed_batch_size_drops_the_written_values_and_cuts_the_rest_afresh() {
        // Saved in threes: batch 1 (v3 v4 v5) written; now in fours.
        let b = Batches::resume(values(9), 0, &[1], Some(3), 4);
        assert_eq!(b.todo(), [0, 1]);
        assert_eq!(b.joined(0, ","), "v0,v1,v2,v6");
        assert_eq!(b.joined(1, ","), "v7,v8");
        // Numbers that do not fit are ignored.
        let b = Batches::resume(values(4), 2, &[1, 2, 9], Some(2), 2);
        assert_eq!(b.todo(), [2, 3]);
    }
}
