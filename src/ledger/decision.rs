//! One charge and the ledger's answers: [`Charge`] in, [`ChargeDecision`]
//! out, read on the clock [`At`] names; and the run lock's [`LockOutcome`].

use std::time::Duration;

use super::{Micros, PoolCost};

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

/// What is left in one window after an allowed charge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remaining {
    pub pool: String,
    pub per: Duration,
    pub remaining: u64,
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
    },
    /// Nothing recorded: `pool`'s window of length `per` is short, and the
    /// call would fit again after `retry_after` (if nothing else is spent).
    Rejected {
        at: Micros,
        serial: u64,
        pool: String,
        per: Duration,
        retry_after: Duration,
    },
    /// Nothing recorded: the credential is blocked until `until` (the upstream
    /// reported its own quota spent).
    Blocked {
        at: Micros,
        serial: u64,
        until: Micros,
        reason: String,
    },
}

impl ChargeDecision {
    pub fn at(&self) -> Micros {
        match self {
            Self::Allowed { at, .. } | Self::Rejected { at, .. } | Self::Blocked { at, .. } => *at,
        }
    }

    /// How many charges the credential had recorded at this decision.
    pub fn serial(&self) -> u64 {
        match self {
            Self::Allowed { serial, .. }
            | Self::Rejected { serial, .. }
            | Self::Blocked { serial, .. } => *serial,
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
