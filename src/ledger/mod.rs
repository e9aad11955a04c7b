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

mod embedded;
mod redis;
pub mod topology;

pub use self::embedded::EmbeddedLedger;
pub use self::redis::{RedisLedger, cursor_key, lock_key, log_key, state_key};

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

/// Microseconds since the Unix epoch, read from the store's clock.
pub type Micros = i64;

/// How long a charge id is remembered, so that a retried charge is recorded once.
pub const IDEMPOTENCY_HORIZON: Duration = Duration::from_secs(60);

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
}

/// What one call spends from one pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolCost {
    pub pool: Pool,
    pub units: u64,
}

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

/// Why the ledger could not answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be reached (connection refused, timed out, dropped).
    #[error("store unreachable: {0}")]
    Unavailable(String),
    /// A cost above a window's budget can never fit: a configuration error.
    #[error("the cost of {units} units in pool '{pool}' exceeds its budget of {budget}")]
    CostExceedsBudget {
        pool: String,
        units: u64,
        budget: u64,
    },
    /// Anything else the store reported.
    #[error("store error: {0}")]
    Other(String),
}

/// Refuse a cost that can never fit, before asking any store.
pub(crate) fn check_fits(cost: &[PoolCost]) -> Result<(), StoreError> {
    for c in cost {
        for w in &c.pool.windows {
            if c.units > w.budget() {
                return Err(StoreError::CostExceedsBudget {
                    pool: c.pool.name.clone(),
                    units: c.units,
                    budget: w.budget(),
                });
            }
        }
    }
    Ok(())
}

/// One logged call, as a usage report sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub at: Micros,
    pub cost: u64,
    pub endpoint: String,
    pub job: String,
}

/// The raw log of a credential, as read from a store, before summarising.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialLog {
    pub at: Micros,
    pub serial: u64,
    pub blocked_until: Micros,
    pub blocked_reason: String,
    /// Per pool asked about, in order: its entries, oldest first.
    pub pools: Vec<Vec<LogEntry>>,
}

/// Usage of one window, read without spending.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WindowUsage {
    #[serde(flatten)]
    pub window: Window,
    pub budget: u64,
    pub used: u64,
    pub remaining: u64,
    /// When the oldest entry leaves the window (`None`: the window is empty).
    pub next_free_at: Option<Micros>,
    /// When the newest entry leaves the window (`None`: the window is empty).
    pub fully_free_at: Option<Micros>,
    pub by_endpoint: BTreeMap<String, u64>,
    pub by_job: BTreeMap<String, u64>,
    /// Units spent in equal time buckets across the window, oldest first.
    pub buckets: Vec<u64>,
}

/// Usage of one pool: its windows, in configuration order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PoolUsage {
    pub pool: String,
    pub windows: Vec<WindowUsage>,
}

/// Usage of one credential at one instant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CredentialUsage {
    pub credential: String,
    pub at: Micros,
    pub charges_recorded: u64,
    pub blocked_until: Option<Micros>,
    pub blocked_reason: Option<String>,
    pub pools: Vec<PoolUsage>,
}

/// How many time buckets a usage report splits each window into.
pub const USAGE_BUCKETS: usize = 24;

/// Summarise a raw log into per-window usage. Shared by both stores, so their
/// reports can only differ if their logs do.
pub fn summarize(credential: &str, pools: &[Pool], log: &CredentialLog) -> CredentialUsage {
    let now = log.at;
    let pools_usage = pools
        .iter()
        .zip(&log.pools)
        .map(|(pool, entries)| PoolUsage {
            pool: pool.name.clone(),
            windows: pool
                .windows
                .iter()
                .map(|w| summarize_window(w, entries, now))
                .collect(),
        })
        .collect();
    let blocked = log.blocked_until > now;
    CredentialUsage {
        credential: credential.to_string(),
        at: now,
        charges_recorded: log.serial,
        blocked_until: blocked.then_some(log.blocked_until),
        blocked_reason: blocked.then(|| log.blocked_reason.clone()),
        pools: pools_usage,
    }
}

fn summarize_window(window: &Window, entries: &[LogEntry], now: Micros) -> WindowUsage {
    let len = window.len_us();
    let start = now - len;
    let inside: Vec<&LogEntry> = entries.iter().filter(|e| e.at > start).collect();
    let used: u64 = inside.iter().map(|e| e.cost).sum();
    let mut by_endpoint = BTreeMap::new();
    let mut by_job = BTreeMap::new();
    let mut buckets = vec![0u64; USAGE_BUCKETS];
    for e in &inside {
        *by_endpoint.entry(e.endpoint.clone()).or_insert(0) += e.cost;
        *by_job.entry(e.job.clone()).or_insert(0) += e.cost;
        // Bucket i covers (start + i*len/n, start + (i+1)*len/n].
        let offset = (e.at - start - 1).max(0) as i128;
        let i = (offset * USAGE_BUCKETS as i128 / len as i128) as usize;
        buckets[i.min(USAGE_BUCKETS - 1)] += e.cost;
    }
    WindowUsage {
        window: window.clone(),
        budget: window.budget(),
        used,
        remaining: window.budget().saturating_sub(used),
        next_free_at: inside.first().map(|e| e.at + len),
        fully_free_at: inside.last().map(|e| e.at + len),
        by_endpoint,
        by_job,
        buckets,
    }
}

/// The tag a log entry carries: who spent it.
pub(crate) fn tag(endpoint: &str, job: &str) -> String {
    format!("{endpoint}\t{job}")
}

pub(crate) fn untag(tag: &str) -> (String, String) {
    match tag.split_once('\t') {
        Some((e, j)) => (e.to_string(), j.to_string()),
        None => (tag.to_string(), String::new()),
    }
}

/// The interface every store implements. One conformance suite
/// (`tests/ledger_conformance.rs`) runs against each implementation.
pub trait Ledger: Send + Sync {
    /// Charge one call atomically against every window of every pool it names.
    fn charge(
        &self,
        charge: &Charge<'_>,
        at: At,
    ) -> impl Future<Output = Result<ChargeDecision, StoreError>> + Send;

    /// Block the credential until `until` (a later block never shortens an
    /// earlier one). Returns the time the credential is now blocked until.
    fn block(
        &self,
        credential: &str,
        until: Micros,
        reason: &str,
        at: At,
    ) -> impl Future<Output = Result<Micros, StoreError>> + Send;

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

/// Where the ledger lives, as the operator names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreLocation {
    /// One Redis, a Cluster or a Sentinel group: `redis://…`, `rediss://…`,
    /// `redis+cluster://…`, `redis+sentinel://…` (see [`topology`]).
    Redis(String),
    /// `embedded` (the default state directory) or `embedded:PATH`
    Embedded(Option<PathBuf>),
}

impl StoreLocation {
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if topology::is_redis_url(s) {
            Ok(Self::Redis(s.to_string()))
        } else if s == "embedded" {
            Ok(Self::Embedded(None))
        } else if let Some(path) = s.strip_prefix("embedded:") {
            Ok(Self::Embedded(Some(PathBuf::from(path))))
        } else {
            Err(format!(
                "unknown store '{}': expected redis://HOST:PORT/DB, rediss://…, redis+cluster://HOST:PORT,…, redis+sentinel://HOST:PORT,…/SERVICE, embedded or embedded:PATH",
                redact_url(s)
            ))
        }
    }
}

/// A store URL with any password masked, fit for logs and errors.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                "***".to_string()
            };
            format!("{}{}{}", &url[..scheme + 3], masked, &url[at..])
        }
        _ => url.to_string(),
    }
}

/// A ledger of either kind, chosen at run time from the configuration.
#[derive(Clone)]
pub enum Store {
    Redis(RedisLedger),
    Embedded(EmbeddedLedger),
}

impl Store {
    /// Open (or connect to) the store at `location`.
    pub async fn open(location: &StoreLocation) -> Result<Self, StoreError> {
        Ok(match location {
            StoreLocation::Redis(url) => Self::Redis(RedisLedger::connect(url).await?),
            StoreLocation::Embedded(path) => {
                let path = match path {
                    Some(p) => p.clone(),
                    None => EmbeddedLedger::default_path()?,
                };
                Self::Embedded(EmbeddedLedger::open(&path)?)
            }
        })
    }
}

impl Ledger for Store {
    async fn charge(&self, charge: &Charge<'_>, at: At) -> Result<ChargeDecision, StoreError> {
        match self {
            Self::Redis(l) => l.charge(charge, at).await,
            Self::Embedded(l) => l.charge(charge, at).await,
        }
    }

    async fn block(
        &self,
        credential: &str,
        until: Micros,
        reason: &str,
        at: At,
    ) -> Result<Micros, StoreError> {
        match self {
            Self::Redis(l) => l.block(credential, until, reason, at).await,
            Self::Embedded(l) => l.block(credential, until, reason, at).await,
        }
    }

    async fn read(
        &self,
        credential: &str,
        pools: &[Pool],
        at: At,
    ) -> Result<CredentialLog, StoreError> {
        match self {
            Self::Redis(l) => l.read(credential, pools, at).await,
            Self::Embedded(l) => l.read(credential, pools, at).await,
        }
    }

    async fn take_lock(
        &self,
        job: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<LockOutcome, StoreError> {
        match self {
            Self::Redis(l) => l.take_lock(job, holder, ttl).await,
            Self::Embedded(l) => l.take_lock(job, holder, ttl).await,
        }
    }

    async fn renew_lock(&self, job: &str, holder: &str, ttl: Duration) -> Result<bool, StoreError> {
        match self {
            Self::Redis(l) => l.renew_lock(job, holder, ttl).await,
            Self::Embedded(l) => l.renew_lock(job, holder, ttl).await,
        }
    }

    async fn release_lock(&self, job: &str, holder: &str) -> Result<bool, StoreError> {
        match self {
            Self::Redis(l) => l.release_lock(job, holder).await,
            Self::Embedded(l) => l.release_lock(job, holder).await,
        }
    }

    async fn load_cursor(&self, job: &str) -> Result<Option<String>, StoreError> {
        match self {
            Self::Redis(l) => l.load_cursor(job).await,
            Self::Embedded(l) => l.load_cursor(job).await,
        }
    }

    async fn save_cursor(&self, job: &str, cursor: &str) -> Result<(), StoreError> {
        match self {
            Self::Redis(l) => l.save_cursor(job, cursor).await,
            Self::Embedded(l) => l.save_cursor(job, cursor).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(at: Micros, cost: u64, endpoint: &str, job: &str) -> LogEntry {
        LogEntry {
            at,
            cost,
            endpoint: endpoint.into(),
            job: job.into(),
        }
    }

    #[test]
    fn summary_counts_only_entries_inside_each_window() {
        let pool = Pool {
            name: "units".into(),
            windows: vec![
                Window {
                    per: Duration::from_secs(100),
                    limit: 50,
                    headroom: 5,
                },
                Window {
                    per: Duration::from_secs(10),
                    limit: 20,
                    headroom: 0,
                },
            ],
        };
        let s = 1_000_000;
        let log = CredentialLog {
            at: 200 * s,
            serial: 3,
            blocked_until: 0,
            blocked_reason: String::new(),
            pools: vec![vec![
                entry(100 * s, 7, "a", "j1"), // exactly at the 100 s boundary: out
                entry(150 * s, 3, "a", "j1"),
                entry(195 * s, 4, "b", "j2"),
            ]],
        };
        let u = summarize("c", &[pool], &log);
        let day = &u.pools[0].windows[0];
        assert_eq!((day.budget, day.used, day.remaining), (45, 7, 38));
        assert_eq!(day.next_free_at, Some(250 * s));
        assert_eq!(day.fully_free_at, Some(295 * s));
        assert_eq!(day.by_endpoint.get("a"), Some(&3));
        assert_eq!(day.by_job.get("j2"), Some(&4));
        assert_eq!(day.buckets.iter().sum::<u64>(), 7);
        // Buckets of 100/24 s: 195 s lies in (191.7 s, 195.8 s], bucket 22.
        assert_eq!(day.buckets[22], 4);
        let short = &u.pools[0].windows[1];
        assert_eq!((short.used, short.remaining), (4, 16));
        assert_eq!(u.blocked_until, None);
    }

    #[test]
    fn redacts_store_passwords() {
        assert_eq!(
            redact_url("redis://user:hunter2@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact_url("redis://:pw@host"), "redis://:***@host");
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
    }

    #[test]
    fn parses_store_locations() {
        assert_eq!(
            StoreLocation::parse("embedded").unwrap(),
            StoreLocation::Embedded(None)
        );
        assert!(matches!(
            StoreLocation::parse("redis://127.0.0.1:1/0").unwrap(),
            StoreLocation::Redis(_)
        ));
        assert!(StoreLocation::parse("mongodb://x").is_err());
    }
}
