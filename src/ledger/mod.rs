//! The quota ledger: an exact, weighted, multi-pool sliding-window log per
//! credential.
//!
//! This module owns the vocabulary (`Window`, `Pool`, `Charge`,
//! `ChargeDecision`, usage reports) and the [`Ledger`] trait. Two stores
//! implement it with the same semantics:
//!
//! * [`RedisLedger`]: the shared store; every decision is one Lua script run
//!   inside Redis, on Redis's clock (`lua/*.lua`).
//! * [`EmbeddedLedger`]: a single-host SQLite file; every decision is one
//!   `BEGIN IMMEDIATE` transaction, on the local clock.
//!
//! Semantics, shared by both: an entry logged at time `t` is inside a window
//! of length `L` at time `now` iff `t > now - L`. A call fits when, in every
//! window of every pool it names, `used + cost <= limit - headroom`. Time never
//! runs backwards for a credential: `now` is clamped to its latest decision.

//!
//! Rooms: [`window`] (budgets), [`decision`] (a charge and its answers),
//! [`usage`] (reports), [`error`], [`store`] (where the ledger lives, and a
//! ledger of either kind); [`embedded`] and [`redis`] implement the trait;
//! [`topology`] connects to one Redis, a Cluster or a Sentinel group.

pub mod calendar;
mod decision;
mod embedded;
mod error;
mod redis;
pub mod shares;
mod store;
pub mod topology;
mod usage;
mod window;

pub(crate) use self::decision::backoff_len;
pub use self::decision::{
    At, BlockEnd, Charge, ChargeDecision, Held, LockOutcome, Others, Receipt, Remaining,
    SAME_PERIOD_US, Settled, WouldRefuse,
};
pub use self::embedded::EmbeddedLedger;
pub use self::error::StoreError;
pub(crate) use self::error::check_fits;
pub use self::redis::{
    LOG_SEGMENT, RedisLedger, cursor_key, index_key, index_segment_key, lock_key, log_key,
    log_segment_key, script_source, state_key,
};
pub use self::shares::{Amount, Share, Shares};
pub use self::store::{Store, StoreLocation, redact_url};
pub use self::usage::{
    CredentialLog, CredentialUsage, LogBlock, LogEntry, LogLost, LogSegment, PoolUsage,
    USAGE_BUCKETS, WindowUsage, straddles, summarize,
};
pub(crate) use self::usage::{tag, untag};
pub use self::window::{Pool, PoolCost, Window};

use std::future::Future;
use std::time::Duration;

/// Microseconds since the Unix epoch, read from the store's clock.
pub type Micros = i64;

/// How long a charge id is remembered, so that a retried charge is recorded once.
pub const IDEMPOTENCY_HORIZON: Duration = Duration::from_secs(60);

/// How far behind its pool's newest call an entry may lie and still be
/// settled exactly (the running totals after it move with it, so the work
/// is bounded by this); further behind, see [`Settled::Late`]. The same in
/// both stores, so they settle alike.
pub const SETTLE_REACH: u64 = 4096;

/// How many of a pool's reservations not settled yet a store keeps for
/// `status` (the newest; `RESERVED` in lua/charge.lua): more are in flight
/// only after runs were killed by the thousand, and they still count in
/// `used` at their estimate.
pub const RESERVED: usize = 1024;

/// The interface every store implements. One conformance suite
/// (`tests/ledger_conformance.rs`) runs against each implementation.
pub trait Ledger: Send + Sync {
    /// Charge one call atomically against every window of every pool it names.
    fn charge(
        &self,
        charge: &Charge<'_>,
        at: At,
    ) -> impl Future<Output = Result<ChargeDecision, StoreError>> + Send;

    /// Settle the cost that an allowed charge (its `receipt`) reserved in
    /// `pool`, `estimate` units, to the `actual` units the response
    /// reported: on the same entry, at its original time. An actual above
    /// the estimate is recorded in full, whatever the budget. `at` reads
    /// the clock that says whether the entry still counts in a window.
    fn settle(
        &self,
        credential: &str,
        receipt: &Receipt,
        cost: (&str, u64, u64),
        at: At,
    ) -> impl Future<Output = Result<Settled, StoreError>> + Send;

    /// The upstream says `remaining` units of `pool` are left (of its
    /// longest window's limit), until `reset` (none: a window's length).
    /// What it counts beyond the ledger's own usage in that window was spent
    /// by others: recorded as such, counted by every later charge until the
    /// reset. Within one period they only grow; a later period's count, or
    /// one after their reset, replaces them ([`Others::after_count`]).
    /// Never raises a budget. Returns what is now recorded.
    fn upstream_remaining(
        &self,
        credential: &str,
        pool: &Pool,
        remaining: u64,
        reset: Option<BlockEnd>,
        at: At,
    ) -> impl Future<Output = Result<Others, StoreError>> + Send;

    /// Block the credential until `end`, on the store's clock (a later block
    /// never shortens an earlier one). Returns the time the credential is now
    /// blocked until.
    fn block(
        &self,
        credential: &str,
        end: impl Into<BlockEnd> + Send,
        reason: &str,
        at: At,
    ) -> impl Future<Output = Result<Micros, StoreError>> + Send;

    /// Lift the credential's upstream block, and forget the units the
    /// upstream said others spent from its pools. Returns the block that
    /// was lifted (until, reason), if there was one in force or not.
    fn unblock(
        &self,
        credential: &str,
    ) -> impl Future<Output = Result<Option<(Micros, String)>, StoreError>> + Send;

    /// Read the credential's log for these pools, without spending.
    fn read(
        &self,
        credential: &str,
        pools: &[Pool],
        at: At,
    ) -> impl Future<Output = Result<CredentialLog, StoreError>> + Send;

    /// Per pool and window: budget, used, remaining, when units free up, who
    /// spent them and when.
    fn usage(
        &self,
        credential: &str,
        pools: &[Pool],
        at: At,
    ) -> impl Future<Output = Result<CredentialUsage, StoreError>> + Send {
        async move {
            let log = self.read(credential, pools, at).await?;
            Ok(summarize(credential, pools, &log))
        }
    }
}

/// What a store keeps for jobs, beside the ledger: each job's run lock,
/// its cursor and its maps (what they hold: [`crate::runner::job_state`]).
/// The same stores implement both; a job's state is not the ledger's.
pub trait JobStore: Send + Sync {
    /// Take `job`'s run lock for `ttl` as `holder`, unless another holder has
    /// it. Taking a lock one already holds renews it.
    fn take_lock(
        &self,
        job: &str,
        holder: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<LockOutcome, StoreError>> + Send;

    /// Extend `holder`'s lock on `job` to `ttl` from now. `false` when the
    /// lock was lost (it expired, and perhaps another run took it).
    fn renew_lock(
        &self,
        job: &str,
        holder: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Release `holder`'s lock on `job`; `false` when it was not held.
    fn release_lock(
        &self,
        job: &str,
        holder: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The job's saved cursor, if it has one (an opaque string to the store).
    fn load_cursor(
        &self,
        job: &str,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;

    /// Save the job's cursor.
    fn save_cursor(
        &self,
        job: &str,
        cursor: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// A map a job keeps beside its cursor (field to value, both text),
    /// for what grows with its work rather than with its position (a
    /// list's keys seen, its failed inputs): set each field of `entries`
    /// that the map does not hold yet. Returns, entry by entry, the value
    /// the map holds now: the entry's own, or the one set before it. One
    /// writer at a time (the job's run lock), so not one atomic step.
    fn map_put_new(
        &self,
        map: &str,
        entries: &[(String, String)],
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// Set each field of `entries` in `map` to its value, whatever it
    /// held: in one store round trip (one transaction embedded, one
    /// pipeline in Redis), however many.
    fn map_put(
        &self,
        map: &str,
        entries: &[(String, String)],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// How many fields `map` holds.
    fn map_len(&self, map: &str) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Every field of `map` with its value, by field.
    fn map_read(
        &self,
        map: &str,
    ) -> impl Future<Output = Result<Vec<(String, String)>, StoreError>> + Send;

    /// The values of `fields` of `map`, in their order (`None`: a field
    /// the map does not hold): a part of a long map, read without the
    /// rest.
    fn map_get(
        &self,
        map: &str,
        fields: &[String],
    ) -> impl Future<Output = Result<Vec<Option<String>>, StoreError>> + Send;

    /// Forget `map` entirely.
    fn map_forget(&self, map: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
}
