//! [`Refusals`]: the two breakers of a job of regions, apart from the
//! walk so that they can be tested without one. A region's first page
//! refused for itself may be the region's fault; two regions in a row
//! refused so, no page answered between, is the file's or the key's, met
//! by every region: the job stops. A fan-out's batch refused is skipped;
//! two in a row refused with none taken in this run skips the rest of
//! that fan-out (every batch would be refused, each charged, every tick).
//! A job of inputs has its own ([`super::inputs::Feed::failed`]).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

/// Refused batches in a row of one region's fan-out step, none accepted
/// in this run, before the rest of that fan-out is skipped.
pub(super) const BATCHES_REFUSED: u32 = 2;

/// Regions in a row whose first page is refused before the job stops.
pub(super) const FIRST_PAGES_REFUSED: u32 = 2;

/// What a run's refusals so far say.
#[derive(Default)]
pub(super) struct Refusals {
    /// Regions in a row whose first page the upstream refused, no page
    /// answered since.
    first_pages: Cell<u32>,
    /// Per region and fan-out step: batches refused in a row, and whether
    /// one was taken in this run.
    batches: RefCell<HashMap<(String, usize), (u32, bool)>>,
}

impl Refusals {
    /// A page answered: the key and the requests are good.
    pub(super) fn answered(&self) {
        self.first_pages.set(0);
    }

    /// A region's first page refused for itself: `Some(n)` when the job
    /// stops, the `n`th region in a row so (counted afresh after).
    pub(super) fn first_page_refused(&self) -> Option<u32> {
        let n = self.first_pages.get() + 1;
        if n < FIRST_PAGES_REFUSED {
            self.first_pages.set(n);
            return None;
        }
        self.first_pages.set(0);
        Some(n)
    }

    /// A batch of region `key`'s fan-out step `step` answered (`taken`) or
    /// refused: whether the rest of that fan-out is to be skipped.
    pub(super) fn batch(&self, key: &str, step: usize, taken: bool) -> bool {
        let mut batches = self.batches.borrow_mut();
        let (in_a_row, any_taken) = batches.entry((key.to_string(), step)).or_default();
        if taken {
            (*in_a_row, *any_taken) = (0, true);
            return false;
        }
        *in_a_row += 1;
        !*any_taken && *in_a_row >= BATCHES_REFUSED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_first_pages_refused_in_a_row_stop_the_job_a_page_between_does_not() {
        let r = Refusals::default();
        assert_eq!(r.first_page_refused(), None);
        r.answered();
        assert_eq!(r.first_page_refused(), None);
        assert_eq!(r.first_page_refused(), Some(2));
        // (counted afresh after a stop)
        assert_eq!(r.first_page_refused(), None);
    }

    #[test]
    fn a_fan_out_is_cut_after_two_refused_batches_unless_one_was_taken() {
        let r = Refusals::default();
        assert!(!r.batch("a", 1, false));
        assert!(r.batch("a", 1, false));
        // Another region's, or another step's, counts apart.
        assert!(!r.batch("b", 1, false));
        assert!(!r.batch("a", 2, false));
        // One taken in this run: the fan-out goes on, refused or not.
        assert!(!r.batch("b", 1, true));
        assert!(!r.batch("b", 1, false));
        assert!(!r.batch("b", 1, false));
        assert!(!r.batch("b", 1, false));
    }
}
