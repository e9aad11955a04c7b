//! The warnings a run gives its file's skipped records, bounded: the first
//! [`SkipWarnings::SHOWN`] of each kind are said one by one, the rest only
//! counted and said once, in one line, at the run's end. A file of 200,000
//! ragged CSV rows logged 200,000 lines (24 MB) of the same warning.

use std::collections::HashMap;
use std::mem::Discriminant;

use super::record::SkipReason;

/// What a run's skips came to, by kind: a [`SkipReason`]'s variant (whatever
/// its numbers), or a key seen again.
#[derive(Debug, Default)]
pub struct SkipWarnings {
    kinds: HashMap<Kind, SkipCount>,
}

/// A kind of skip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Reason(Discriminant<SkipReason>),
    /// A key already met on an earlier line.
    KeyAgain,
}

impl Kind {
    pub fn of(reason: &SkipReason) -> Self {
        Self::Reason(std::mem::discriminant(reason))
    }
}

#[derive(Debug)]
struct SkipCount {
    total: u64,
    /// The first skip of the kind, said as its warning said it.
    first: String,
}

impl SkipWarnings {
    /// The skips of one kind warned about one by one.
    pub const SHOWN: u64 = 20;

    /// Count a skip of `kind` (`said`: what its warning says); whether to
    /// warn about this one (the first [`Self::SHOWN`] of its kind).
    pub fn note(&mut self, kind: Kind, said: impl FnOnce() -> String) -> bool {
        let count = self.kinds.entry(kind).or_insert_with(|| SkipCount {
            total: 0,
            first: said(),
        });
        count.total += 1;
        count.total <= Self::SHOWN
    }

    /// One line for each kind with more skips than were warned about: how
    /// many in all, and the first of them. (Then empty: said once.)
    pub fn totals(&mut self) -> Vec<String> {
        let mut lines: Vec<(String, String)> = (self.kinds.drain())
            .filter(|(_, c)| c.total > Self::SHOWN)
            .map(|(_, c)| {
                let line = format!(
                    "{} records skipped in all like the first, {}; the first {} were warned about one by one, the other {} only counted",
                    c.total,
                    c.first,
                    Self::SHOWN,
                    c.total - Self::SHOWN
                );
                (c.first, line)
            })
            .collect();
        lines.sort();
        lines.into_iter().map(|(_, l)| l).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_twenty_of_a_kind_are_said_then_counted_and_said_once() {
        let mut w = SkipWarnings::default();
        let ragged = |found| SkipReason::Width { expected: 2, found };
        let said: Vec<bool> = (0..25)
            .map(|i| w.note(Kind::of(&ragged(3 + i)), || format!("line {i}")))
            .collect();
        assert_eq!(said.iter().filter(|s| **s).count(), 20);
        assert!(said[..20].iter().all(|s| *s));
        // Another kind has its own twenty.
        assert!(w.note(Kind::of(&SkipReason::NoKey), || "no key".into()));
        assert!(w.note(Kind::KeyAgain, || "again".into()));
        let totals = w.totals();
        assert_eq!(totals.len(), 1, "{totals:?}");
        assert!(
            totals[0].starts_with("25 records skipped in all like the first, line 0;"),
            "{totals:?}"
        );
        assert!(
            totals[0].ends_with("the other 5 only counted"),
            "{totals:?}"
        );
        assert!(w.totals().is_empty(), "said once");
    }
}
