//! The next run walked page by page: the pages of each step it sends, what
//! they spend of what remains, and where the run stops (or, for an
//! `observe` credential, what it sends that does not fit).

use super::RemainingUnits;
use crate::commands::plan::model::NextRun;
use crate::config::Step;
use crate::ledger::{Pool, PoolCost, Window};
use crate::runner::cursor::Start;

/// The calls the next run makes of one step in one region: `first` up to
/// before `last`, less those an earlier run already wrote.
pub(super) struct Pages {
    first: u64,
    last: u64,
    written: Vec<u64>,
}

impl Pages {
    /// The pages of `step`, from the cursor's place when it is in it.
    pub(super) fn of(step: &Step, at_cursor: Option<&Start>) -> Self {
        let first_page = at_cursor.map_or(0, |f| f.place.page);
        // A fan-out the cursor is inside of knows its values left.
        let last = match (
            &step.for_each,
            at_cursor.and_then(|f| f.place.values_left()),
        ) {
            (Some(f), Some(left)) => {
                u64::from(first_page) + (left as u64).div_ceil(u64::from(f.batch))
            }
            _ => step.max_requests(),
        };
        // A batch an earlier run wrote out of order is not sent again.
        let written: Vec<u64> = match (&step.for_each, at_cursor) {
            (Some(f), Some(c)) if c.place.batch_size == Some(f.batch) => {
                c.place.written.iter().map(|&w| u64::from(w)).collect()
            }
            _ => Vec::new(),
        };
        Pages {
            first: u64::from(first_page),
            last,
            written,
        }
    }
}

/// The next run as it is walked: what it has spent and counted so far.
pub(super) struct PlannedWalk<'r> {
    remaining: &'r mut RemainingUnits,
    observe: bool,
    calls: u64,
    /// (observe mode: the first call that would not have fitted, and how many)
    observed: Option<NextRun>,
}

impl<'r> PlannedWalk<'r> {
    /// A run about to be walked, spending from `remaining`.
    pub(super) fn new(remaining: &'r mut RemainingUnits, observe: bool) -> Self {
        PlannedWalk {
            remaining,
            observe,
            calls: 0,
            observed: None,
        }
    }

    /// Spend the `pages` of step `s` in `region`; where the run stops
    /// (not in observe mode), if it stops there.
    pub(super) fn step(
        &mut self,
        region: &str,
        s: usize,
        step: &Step,
        pages: &Pages,
    ) -> Option<NextRun> {
        // Pages in spans, as many at once as fit: a budget near 2^53 and a
        // fan-out of as many requests must not be counted one by one.
        // Spans end before each page already written.
        let mut page = pages.first;
        while page < pages.last {
            if pages.written.contains(&page) {
                page += 1;
                continue;
            }
            let end = pages
                .written
                .iter()
                .copied()
                .filter(|&w| w > page)
                .fold(pages.last, u64::min);
            let span = end - page;
            let fit = span.min(fitting(&step.cost, self.remaining));
            spend(&step.cost, self.remaining, fit);
            (self.calls, page) = (self.calls.saturating_add(fit), page + fit);
            if fit == span {
                continue;
            }
            let refused = span - fit;
            let at = u32::try_from(page).unwrap_or(u32::MAX);
            if let Some(stop) = self.refused(region, s, &step.cost, at, refused) {
                return Some(stop);
            }
            page += refused;
        }
        None
    }

    /// `refused` calls of `cost` at `page` do not fit: the run stops there,
    /// or in observe mode they go out all the same, each refused (the full
    /// window stays full), and are counted.
    fn refused(
        &mut self,
        region: &str,
        step: usize,
        cost: &[PoolCost],
        page: u32,
        refused: u64,
    ) -> Option<NextRun> {
        let (pool, window) =
            full_window(cost, self.remaining).expect("a call that does not fit has a full window");
        let (region, pool, per_seconds) =
            (region.to_string(), pool.name.clone(), window.per.as_secs());
        if !self.observe {
            return Some(NextRun::Stops {
                region,
                step,
                page,
                calls: self.calls,
                pool,
                per_seconds,
            });
        }
        match &mut self.observed {
            Some(NextRun::Observes { refused: r, .. }) => *r = r.saturating_add(refused),
            _ => {
                self.observed = Some(NextRun::Observes {
                    calls: 0,
                    refused,
                    region,
                    step,
                    page,
                    pool,
                    per_seconds,
                })
            }
        }
        spend(cost, self.remaining, refused);
        self.calls = self.calls.saturating_add(refused);
        None
    }

    /// The run walked to its end: it fits, or (observe mode) what it
    /// sent that did not.
    pub(super) fn end(self) -> NextRun {
        match self.observed {
            Some(mut o) => {
                if let NextRun::Observes { calls: all, .. } = &mut o {
                    *all = self.calls;
                }
                o
            }
            None => NextRun::Fits { calls: self.calls },
        }
    }
}

/// The first window, in the order of `cost`, that has less left than one
/// call of `cost` spends from it.
fn full_window<'c>(
    cost: &'c [PoolCost],
    remaining: &RemainingUnits,
) -> Option<(&'c Pool, &'c Window)> {
    for c in cost {
        for (w, window) in c.pool.windows.iter().enumerate() {
            let left = remaining
                .get(&(c.pool.name.clone(), w))
                .copied()
                .unwrap_or(0);
            if left < c.units {
                return Some((&c.pool, window));
            }
        }
    }
    None
}

/// How many calls of `cost` fit in `remaining` (any number when it costs
/// nothing).
fn fitting(cost: &[PoolCost], remaining: &RemainingUnits) -> u64 {
    let mut fit = u64::MAX;
    for c in cost.iter().filter(|c| c.units > 0) {
        for w in 0..c.pool.windows.len() {
            let left = remaining
                .get(&(c.pool.name.clone(), w))
                .copied()
                .unwrap_or(0);
            fit = fit.min(left / c.units);
        }
    }
    fit
}

/// Take `n` calls of `cost` from `remaining` (they were checked to fit, or
/// an observe-mode credential records them all the same: none left then).
fn spend(cost: &[PoolCost], remaining: &mut RemainingUnits, n: u64) {
    for c in cost {
        for w in 0..c.pool.windows.len() {
            if let Some(left) = remaining.get_mut(&(c.pool.name.clone(), w)) {
                *left = left.saturating_sub(c.units.saturating_mul(n));
            }
        }
    }
}
