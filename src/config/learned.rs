//! A window whose limit is the upstream's (`{ from: upstream, per: 1m }`,
//! issue 38): its budget is the last limit the upstream announced for that
//! window (`upstream_headers`), kept in the store so every host uses it; a
//! `limit` beside it is a cap (the lower wins). Resolved here from the
//! YAML; the runner and `status` turn a learned limit into a [`Window`].

use std::time::Duration;

use crate::ledger::Window;

use super::MAX_UNITS;

/// One window of a pool whose limit is learned from the upstream.
#[derive(Clone, Debug, PartialEq)]
pub struct LearnedWindow {
    pub pool: String,
    /// Its place among the pool's windows.
    pub index: usize,
    pub per: Duration,
    /// A `limit` beside `from: upstream`: the most it may be.
    pub cap: Option<u64>,
    pub headroom: Headroom,
}

/// A window's headroom as written: units, or a part of the limit (known
/// only once the limit is).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Headroom {
    Units(u64),
    Percent(f64),
}

impl Headroom {
    /// The units kept of `limit`: a percentage rounded up, as for any
    /// window; never all of it (a learned limit may be small).
    pub fn of(self, limit: u64) -> u64 {
        let units = match self {
            Headroom::Units(u) => u,
            Headroom::Percent(pct) => ((limit as f64) * pct / 100.0 - 1e-9).ceil().max(0.0) as u64,
        };
        units.min(limit.saturating_sub(1))
    }
}

impl LearnedWindow {
    /// The window with the upstream's `learned` limit (the cap's when
    /// lower); with none learned yet, the cap's, else no limit at all (the
    /// run sends one request to learn it).
    pub fn window(&self, learned: Option<u64>) -> Window {
        let limit = match (learned.filter(|l| *l > 0), self.cap) {
            (Some(l), Some(cap)) => l.min(cap),
            (Some(l), None) => l.min(MAX_UNITS),
            (None, Some(cap)) => cap,
            (None, None) => MAX_UNITS,
        };
        Window {
            per: self.per,
            limit,
            headroom: self.headroom.of(limit),
            aligned: None,
        }
    }
}
