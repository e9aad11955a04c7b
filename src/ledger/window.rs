//! The vocabulary of budgets: a [`Window`] (at most `limit - headroom`
//! units in any `per`), a [`Pool`] of windows, and a [`PoolCost`] (what one
//! call spends from one pool).

use std::time::Duration;

use serde::Serialize;

use super::Micros;

/// One sliding window of a pool: at most `limit - headroom` units in any `per`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Window {
    #[serde(serialize_with = "serialize_secs")]
    pub per: Duration,
    pub limit: u64,
    pub headroom: u64,
}

impl Window {
    /// The units the ledger hands out in this window: the limit less the reserve.
    pub fn budget(&self) -> u64 {
        self.limit - self.headroom
    }

    pub(crate) fn len_us(&self) -> Micros {
        self.per.as_micros() as Micros
    }
}

fn serialize_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_secs())
}

/// A named budget of a credential, holding one or more windows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pool {
    pub name: String,
    pub windows: Vec<Window>,
}

impl Pool {
    /// The longest window: how long the pool's log must be kept.
    pub fn longest(&self) -> Duration {
        self.windows.iter().map(|w| w.per).max().unwrap_or_default()
    }

    /// The longest window (the first of the longest): where units spent by
    /// others, as the upstream's own count says, are counted.
    pub fn longest_window(&self) -> Option<&Window> {
        let longest = self.longest();
        self.windows.iter().find(|w| w.per == longest)
    }
}

/// What one call spends from one pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolCost {
    pub pool: Pool,
    pub units: u64,
}
