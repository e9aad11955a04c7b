//! One charge and the ledger's answers: [`Charge`] in, [`ChargeDecision`]
//! out, read on the clock [`At`] names; and the run lock's [`LockOutcome`].

use std::time::Duration;

use super::{Micros, PoolCost, Shares};

/// One call's charge: its cost in every pool it names, and who spends it.
#[derive(Clone, Debug)]
pub struct Charge<'a> {
    pub credential: &'a str,
    pub cost: &'a [PoolCost],
    pub endpoint: &'a str,
    pub job: &'a str,
    /// A client-generated id; the same id charged twice (within
    /// [`IDEMPOTENCY_HORIZON`]) is recorded once. The Redis store makes one up
    /// when it is `None`, so its own retries are safe; it recognises a repeat
    /// of a given id when the repeat comes through the same ledger (the only
    /// way a charge is resent: ids are random per charge).
    pub id: Option<&'a str>,
    /// The charge serial the caller has already seen this credential reach
    /// (0: none). A store that reports fewer has lost the log since: its
    /// pools then count as spent until their longest window has passed.
    pub seen_serial: u64,
    /// Observe mode: a call that does not fit (or whose pool's log was
    /// lost) is recorded all the same, and the refusal it would have met
    /// is reported ([`ChargeDecision::Allowed`]'s `observed`) and counted.
    pub observe: bool,
    /// The pools (by name) whose units are an estimate, settled after the
    /// call ([`Ledger::settle`]): reserved until then, which `status` shows.
    ///
    /// [`Ledger::settle`]: super::Ledger::settle
    pub estimated: &'a [&'a str],
    /// The credential's shares (issue 28): the charge spends as the share
    /// named `job`, if there is one, and keeps every other share's unused
    /// reserve. None: no shares.
    pub shares: Option<&'a Shares>,
}

/// Which clock a decision reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    /// The store's own clock (Redis `TIME`, or the local clock for the embedded
    /// store). What every real run uses.
    StoreClock,
    /// A fixed reading, for tests and replays: lets the same sequence of clock
    /// readings be fed to both stores.
    Fixed(Micros),
}

/// When a block of a credential ends, on the store's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockEnd {
    /// At this instant, computed from a reading of the store's clock (the
    /// upstream's next reset after a decision's `at`).
    At(Micros),
    /// This long after the store's clock when the block is recorded (a
    /// `Retry-After`, or a window's length).
    After(Duration),
    /// A refusal that says nothing of when (a bare 429): `shortest` after
    /// the store's clock, or twice as long as the previous such block when
    /// this one repeats it, up to `longest`. The store keeps the previous
    /// one's end and length with the block, for every host: a refusal that
    /// comes while it is in force (a request in flight then) blocks as
    /// long again, one that comes within `longest` after its end doubles
    /// it, a later one starts again at `shortest`.
    Backoff {
        shortest: Duration,
        longest: Duration,
    },
}

/// How long a [`BlockEnd::Backoff`] blocks, given the previous one's end and
/// length (µs; 0, 0: none) and the store's `now`: both stores' rule.
pub(crate) fn backoff_len(
    (shortest, longest): (Micros, Micros),
    (prev_until, prev_len): (Micros, Micros),
    now: Micros,
) -> Micros {
    let len = if prev_len > 0 && now < prev_until {
        prev_len
    } else if prev_len > 0 && now - prev_until <= longest {
        prev_len.saturating_mul(2)
    } else {
        shortest
    };
    len.clamp(shortest.min(longest), longest)
}

impl BlockEnd {
    /// The end as this host would guess it (for messages when the store
    /// cannot say).
    pub fn estimate(self) -> Micros {
        self.end_at(chrono::Utc::now().timestamp_micros())
    }

    /// The end, given the store's now.
    pub fn end_at(self, now: Micros) -> Micros {
        match self {
            Self::At(t) => t,
            Self::After(d) | Self::Backoff { shortest: d, .. } => {
                now.saturating_add(d.as_micros().min(i64::MAX as u128) as Micros)
            }
        }
    }
}

impl From<Micros> for BlockEnd {
    fn from(t: Micros) -> Self {
        Self::At(t)
    }
}

/// What is left in one window after an allowed charge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remaining {
    pub pool: String,
    pub per: Duration,
    pub remaining: u64,
    /// Of the units counted as spent there, those the upstream said others
    /// spent (the pool's longest window only; else 0).
    pub others: u64,
}

/// Where an allowed charge's entries sit in the store, so that a cost
/// reserved by an estimate can be settled on them ([`Ledger::settle`]).
/// The numbers are the store's own (Redis call numbers, SQLite row ids), so
/// a receipt takes no part in a decision's equality or its debug output:
/// both stores give the same decisions with different receipts.
///
/// [`Ledger::settle`]: super::Ledger::settle
#[derive(Clone, Default)]
pub struct Receipt {
    /// The charge's id as the store logged it (Redis), else 0.
    pub(crate) id: u64,
    /// Per pool charged: its name and its entry's number in the store.
    pub(crate) entries: Vec<(String, i64)>,
    /// Per pool charged: its name and the most units a settle records
    /// there (its largest budget, plus one: see [`Receipt::recordable`]).
    pub(crate) caps: Vec<(String, u64)>,
}

impl Receipt {
    /// The receipt of a charge of `cost` whose entries are `entries`.
    pub(crate) fn new(id: u64, entries: Vec<(String, i64)>, cost: &[(&str, u64)]) -> Self {
        let caps = cost
            .iter()
            .map(|&(pool, largest)| (pool.to_string(), largest.saturating_add(1)))
            .collect();
        Self { id, entries, caps }
    }

    /// What a settle of `pool` records of an `actual`: all of it, up to the
    /// pool's largest budget plus one. An actual above every budget says no
    /// more than "over", and recording it in full would let one response
    /// carry a window's sum past 2^53, where the Redis store's doubles stop
    /// counting exactly (issue 23): the cap keeps the call over every
    /// budget of the pool until it leaves, as the actual would.
    pub(crate) fn recordable(&self, pool: &str, actual: u64) -> u64 {
        let cap = self.caps.iter().find(|(p, _)| p == pool).map(|&(_, c)| c);
        match cap {
            Some(cap) if actual > cap => {
                tracing::warn!(
                    "{pool}: an actual of {actual} units is above every budget of the pool: recorded as {cap}, its largest budget plus one"
                );
                cap
            }
            _ => actual,
        }
    }

    /// The entry of `pool`, if the charge logged one there (a resent charge
    /// found already recorded has none: it keeps its estimate).
    pub(crate) fn entry(&self, pool: &str) -> Option<i64> {
        self.entries
            .iter()
            .find(|(p, _)| p == pool)
            .map(|&(_, e)| e)
    }
}

impl PartialEq for Receipt {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Receipt {}

impl std::fmt::Debug for Receipt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Receipt")
    }
}

/// What settling a reserved cost did ([`Ledger::settle`]).
///
/// [`Ledger::settle`]: super::Ledger::settle
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// The entry now holds the actual cost, at its original time: every
    /// window counts exactly what the upstream said was spent.
    Exact,
    /// The entry lies more than [`SETTLE_REACH`] calls behind its pool's
    /// newest: an actual above the estimate was added to the newest call
    /// (counted later than it was spent, so for longer: conservative), a
    /// refund was dropped (the estimate stays).
    ///
    /// [`SETTLE_REACH`]: super::SETTLE_REACH
    Late,
    /// The entry is gone (it left the retention, or the log was lost): it
    /// counts in no window any more, so there is nothing to settle.
    Gone,
}

/// The refusal a call met in observe mode, and was recorded through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WouldRefuse {
    pub pool: String,
    /// The window that was full (none: the pool's log was lost).
    pub per: Option<Duration>,
    /// When the call would have fitted.
    pub retry_after: Duration,
}

/// Units of a pool spent by others (the upstream counted them, the ledger
/// did not), counted in the pool's longest window until `until`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Others {
    pub units: u64,
    pub until: Micros,
}

/// How far apart two answers' resets may fall and still name one upstream
/// period (µs; `SAME_PERIOD` in lua/charge/decide.lua): an instant written
/// in whole seconds, against a `Date` in whole seconds, and the answer's
/// travel, move each reading by up to about a second.
pub const SAME_PERIOD_US: Micros = 2_000_000;

impl Others {
    /// What stands after the upstream counted `counted` units as spent by
    /// others, until `until` (`from_reset`: its reset said so; otherwise a
    /// window from now), at `now`. The upstream's counts win downward,
    /// never upward (issue 36, item 11): within one period units spent by
    /// others never come back, since a lower count than before is a stale
    /// one (a cache, a lagging replica). They are cleared, or lowered,
    /// only once their time has passed or a reset names a later period.
    /// `lua/charge/decide.lua` (observe) decides the same.
    pub fn after_count(self, counted: u64, until: Micros, from_reset: bool, now: Micros) -> Self {
        let in_force = self.units > 0 && self.until > now;
        let later_period = from_reset && until > self.until + SAME_PERIOD_US;
        if !in_force || later_period {
            return if counted > 0 {
                Self {
                    units: counted,
                    until,
                }
            } else {
                Self::default()
            };
        }
        if counted >= self.units {
            Self {
                units: counted,
                until: until.max(self.until),
            }
        } else {
            self
        }
    }
}

/// Why a window that has units left refused a charge: shares (issue 28).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Held {
    /// The units left are kept for `share`'s unused reserve (`units` of it,
    /// the largest of the reserves kept).
    Reserve { share: String, units: u64 },
    /// The charging job's share has taken its limit of the window
    /// (`units`).
    Limit { share: String, units: u64 },
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Reserve { share, units } => write!(f, "kept for {share}: {units} units"),
            Self::Limit { share, units } => write!(f, "at the limit of {share}: {units} units"),
        }
    }
}

/// The ledger's answer to a charge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChargeDecision {
    /// Recorded in every window (or recorded before, under the same id).
    Allowed {
        at: Micros,
        /// How many charges the credential has recorded, this one included.
        serial: u64,
        duplicate: bool,
        remaining: Vec<Remaining>,
        /// Where its entries sit, for a settle.
        receipt: Receipt,
        /// Observe mode: the refusal the call would have met (recorded all
        /// the same).
        observed: Option<WouldRefuse>,
    },
    /// Nothing recorded: `pool`'s window of length `per` is short, and the
    /// call would fit again after `retry_after` (if nothing else is spent).
    Rejected {
        at: Micros,
        serial: u64,
        pool: String,
        per: Duration,
        retry_after: Duration,
        /// A refusal by shares: whose units the window keeps.
        held: Option<Held>,
    },
    /// Nothing recorded: the credential is blocked until `until` (the upstream
    /// reported its own quota spent).
    Blocked {
        at: Micros,
        serial: u64,
        until: Micros,
        reason: String,
    },
    /// Nothing recorded: `pool`'s log was lost at `since` (it vanished from
    /// the store, or the store holds fewer charges than the caller saw), so
    /// the pool counts as spent until its longest window has passed, `until`.
    LogLost {
        at: Micros,
        serial: u64,
        pool: String,
        since: Micros,
        until: Micros,
    },
}

impl ChargeDecision {
    pub fn at(&self) -> Micros {
        match self {
            Self::Allowed { at, .. }
            | Self::Rejected { at, .. }
            | Self::Blocked { at, .. }
            | Self::LogLost { at, .. } => *at,
        }
    }

    /// How many charges the credential had recorded at this decision.
    pub fn serial(&self) -> u64 {
        match self {
            Self::Allowed { serial, .. }
            | Self::Rejected { serial, .. }
            | Self::Blocked { serial, .. }
            | Self::LogLost { serial, .. } => *serial,
        }
    }

    pub fn is_allowed(&self) -> bool {
        matches!(self, Self::Allowed { .. })
    }
}

/// The answer to a request for a job's run lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockOutcome {
    /// The caller holds the lock for the TTL it asked.
    Held,
    /// Someone else holds it (`holder` says who) for `expires_in` more.
    Busy {
        holder: String,
        expires_in: Duration,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Micros = 1_000_000;

    #[test]
    fn others_units_only_grow_within_one_upstream_period() {
        let reset = 3600 * S;
        let none = Others::default();
        // A count of 3 left of 60, again and again, one more call of ours
        // each time: 56, then 55, 54 computed; 56 stands.
        let first = none.after_count(56, reset, true, 10 * S);
        assert_eq!(
            first,
            Others {
                units: 56,
                until: reset
            }
        );
        let again = first.after_count(55, reset + S, true, 11 * S);
        assert_eq!(again, first, "a stale count within the period");
        assert_eq!(again.after_count(0, reset, true, 12 * S), first);
        // A larger count within the period raises it.
        assert_eq!(first.after_count(57, reset, true, 12 * S).units, 57);
        // A later period, or the reset passed: the new count stands.
        let later = first.after_count(3, reset + 60 * S, true, 13 * S);
        assert_eq!(
            later,
            Others {
                units: 3,
                until: reset + 60 * S
            }
        );
        assert_eq!(first.after_count(0, reset + 60 * S, true, 13 * S), none);
        assert_eq!(
            first.after_count(2, reset + 10 * S, true, reset + S).units,
            2
        );
        // Without a reset: kept until a window has passed since seen.
        let window = 3600 * S;
        let seen = none.after_count(40, 10 * S + window, false, 10 * S);
        let stale = seen.after_count(10, 20 * S + window, false, 20 * S);
        assert_eq!(stale, seen);
        let higher = seen.after_count(45, 20 * S + window, false, 20 * S);
        assert_eq!(
            higher,
            Others {
                units: 45,
                until: 20 * S + window
            }
        );
        let past = seen.after_count(10, 11 * S + 2 * window, false, 11 * S + window);
        assert_eq!(past.units, 10);
    }
}
