//! The vocabulary of budgets: a [`Window`] (at most `limit - headroom`
//! units in any `per`), a [`Pool`] of windows, and a [`PoolCost`] (what one
//! call spends from one pool).

use std::time::Duration;

use serde::Serialize;

use chrono_tz::Tz;

use super::{Micros, calendar};

/// One window of a pool: at most `limit - headroom` units in any `per`
/// (sliding), or in each calendar period of `per` in a time zone
/// (`aligned`: see [`super::calendar`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Window {
    #[serde(serialize_with = "serialize_secs")]
    pub per: Duration,
    pub limit: u64,
    pub headroom: u64,
    #[serde(
        serialize_with = "serialize_zone",
        skip_serializing_if = "Option::is_none"
    )]
    pub aligned: Option<Tz>,
}

impl Window {
    /// The units the ledger hands out in this window: the limit less the reserve.
    pub fn budget(&self) -> u64 {
        self.limit - self.headroom
    }

    pub(crate) fn len_us(&self) -> Micros {
        self.per.as_micros() as Micros
    }

    /// How long an entry can count in this window: its length, or the
    /// longest of its calendar periods.
    pub(crate) fn reach_us(&self) -> Micros {
        match self.aligned {
            Some(_) => calendar::longest_period(self.len_us()),
            None => self.len_us(),
        }
    }

    /// Where this window starts at `now` (entries after it count) and, for
    /// a calendar window, when its period ends (all its units free at once).
    pub(crate) fn span_at(&self, now: Micros) -> (Micros, Option<Micros>) {
        match self.aligned {
            Some(tz) => {
                let (start, end) = calendar::period(tz, self.len_us(), now);
                (start - 1, Some(end))
            }
            None => (now - self.len_us(), None),
        }
    }
}

fn serialize_zone<S: serde::Serializer>(tz: &Option<Tz>, s: S) -> Result<S::Ok, S::Error> {
    match tz {
        Some(tz) => s.serialize_str(tz.name()),
        None => s.serialize_none(),
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
    /// (A calendar window's is its longest period: see [`Window::reach_us`].)
    pub fn longest(&self) -> Duration {
        self.windows
            .iter()
            .map(|w| Duration::from_micros(w.reach_us() as u64))
            .max()
            .unwrap_or_default()
    }

    /// The longest window (the first of the longest): where units spent by
    /// others, as the upstream's own count says, are counted.
    pub fn longest_window(&self) -> Option<&Window> {
        let longest = self.longest().as_micros() as Micros;
        self.windows.iter().find(|w| w.reach_us() == longest)
    }
}

/// What one call spends from one pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolCost {
    pub pool: Pool,
    pub units: u64,
}
