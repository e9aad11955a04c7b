//! The shared store: the ledger in Redis. Every decision is one Lua script
//! (`lua/*.lua`) run atomically inside Redis, on Redis's own clock, so hosts
//! with skewed clocks agree.
//!
//! Keys of credential `C` (all share the hash tag `{C}`, so they live in one
//! Cluster slot and the scripts run unchanged on Redis Cluster):
//!
//! * `portion:{C}:state`  hash: per pool (one packed field) the log's head and
//!   tail sequence numbers and per window the running sum, a pointer to the
//!   oldest entry still inside and that entry's time; the latest decision's
//!   time and the charge serial; tag names; the upstream block.
//! * `portion:{C}:log:P:k`  lists per pool, segment `k` holding calls
//!   `k * 65536..`: `(time µs, cost, tag id, charge id)` quadruples, one per
//!   call whatever its cost, oldest first, trimmed past the longest window
//!   (and never before [`IDEMPOTENCY_HORIZON`]). Segments keep every read of
//!   the log positional in bounded time.
//! * `portion:{C}:index:P:k`  lists per pool: a summary per block of 128 calls
//!   of log segment `k` (times, cumulative cost, cost by tag), so that no
//!   charge and no status read walks a long log call by call.
//!
//! Idempotency costs nothing on the common path: a charge's id rides in its
//! log entry, and the log is searched for it only when the charge is sent
//! again (a retry after a lost reply, or an id this ledger has sent before).
//! For that to hold, no layer below resends on its own: the Cluster client is
//! built with no retries of its own, and [`RedisLedger::retrying`] resends.
//!
//! Keys of job `J`: `portion:job:{J}:lock` (the run lock: who holds it, with a
//! TTL; `lua/lock.lua`) and `portion:job:{J}:cursor` (where the job resumes; no
//! TTL: a job that runs once a month still resumes where it stopped). A
//! job's maps (`portion:map:{M}:*`, no TTL either) are spread over small
//! hashes: see [`maps`].
//!
//! Idle keys expire a minute (plus 1/8 window) after the longest window, or
//! the block, ends.
//!
//! Rooms: [`keys`] (the key names), [`scripts`] (the scripts built at load:
//! a prelude of the layout's constants and shared helpers, then the body;
//! `lua/charge.lua` in parts), [`charge`] (everything sent to
//! `lua/charge.lua`), [`read`] (a usage report in bounded steps), [`retry`]
//! (sending again), [`wire`] (arguments and replies).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis::{Script, Value};

mod charge;
mod keys;
mod maps;
mod read;
mod retry;
mod scripts;
mod wire;

pub use self::keys::{
    LOG_SEGMENT, cursor_key, index_key, index_segment_key, lock_key, log_key, log_segment_key,
    state_key,
};
use self::scripts::SOURCES;
pub use self::scripts::{BLOCK, ENTRY, RECORD_FIELDS, source as script_source};
use self::wire::{array, clock_arg, int, text};

use super::topology::{Conn, Topology};

use super::JobStore;
use super::{
    At, BlockEnd, Charge, ChargeDecision, CredentialLog, IDEMPOTENCY_HORIZON, Ledger, LockOutcome,
    Micros, Others, Pool, Receipt, Settled, StoreError, redact_url, shares,
};

/// The ledger in one Redis server.
#[derive(Clone)]
pub struct RedisLedger {
    conn: Conn,
    /// What the clones of one ledger share.
    shared: std::sync::Arc<SharedByClones>,
    charge: Script,
    block: Script,
    read: Script,
    read_log: Script,
    settle: Script,
    lock: Script,
    unblock: Script,
}

#[derive(Default)]
struct SharedByClones {
    /// Set when a request gave up on a transient failure: later requests
    /// try once instead of for a whole retry window, until one succeeds,
    /// so a store that is down costs one window per run, not one per request.
    degraded: std::sync::atomic::AtomicBool,
    /// The caller-given charge ids sent in the last [`IDEMPOTENCY_HORIZON`],
    /// by their number (one sent again is flagged as a resend), and the size
    /// at which to drop the old ones next.
    sent: std::sync::Mutex<(HashMap<u64, Instant>, usize)>,
}

impl RedisLedger {
    /// Connect to `url`: one server (`redis://`, `rediss://`), a Cluster
    /// (`redis+cluster://`) or a Sentinel group (`redis+sentinel://`); see
    /// [`super::topology`]. Fails with `StoreError::Unavailable` when no
    /// server answers in time.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let topology = Topology::parse(url).map_err(StoreError::BadLocation)?;
        let conn = topology.connect(&redact_url(url)).await?;
        let sources = &*SOURCES;
        Ok(Self {
            conn,
            shared: Default::default(),
            charge: Script::new(&sources.charge),
            block: Script::new(&sources.block),
            read: Script::new(&sources.read),
            read_log: Script::new(&sources.read_log),
            settle: Script::new(&sources.settle),
            lock: Script::new(&sources.lock),
            unblock: Script::new(&sources.unblock),
        })
    }

    /// The connection, for measurements and tests.
    pub fn connection(&self) -> Conn {
        self.conn.clone()
    }

    /// Run `lua/lock.lua`: (held, current holder, its TTL in ms).
    async fn lock_op(
        &self,
        op: &str,
        job: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<(bool, String, i64), StoreError> {
        let mut inv = self.lock.prepare_invoke();
        inv.key(lock_key(job))
            .arg(op)
            .arg(holder)
            .arg(ttl.as_millis().max(1) as u64);
        let inv = &inv;
        let reply: Value = self
            .retrying(
                "lock",
                |mut c| async move { inv.invoke_async(&mut c).await },
            )
            .await?;
        let r = array(&reply)?;
        Ok((int(&r[0])? == 1, text(&r[1]), int(&r[2])?))
    }
}

impl Ledger for RedisLedger {
    async fn charge(&self, charge: &Charge<'_>, at: At) -> Result<ChargeDecision, StoreError> {
        charge::charge(self, charge, at).await
    }

    async fn block(
        &self,
        credential: &str,
        end: impl Into<BlockEnd> + Send,
        reason: &str,
        at: At,
    ) -> Result<Micros, StoreError> {
        let us = |d: Duration| d.as_micros().min(i64::MAX as u128).to_string();
        let (until, after, backoff) = match end.into() {
            BlockEnd::At(t) => (t.to_string(), String::new(), None),
            BlockEnd::After(d) => (String::new(), us(d), None),
            BlockEnd::Backoff { shortest, longest } => (
                String::new(),
                us(shortest),
                Some((us(shortest), us(longest))),
            ),
        };
        let mut inv = self.block.prepare_invoke();
        inv.key(state_key(credential))
            .arg(clock_arg(at))
            .arg(until)
            .arg(after)
            .arg(reason);
        if let Some((shortest, longest)) = backoff {
            inv.arg(shortest).arg(longest);
        }
        let inv = &inv;
        let reply: Value = self
            .retrying(
                "block",
                |mut c| async move { inv.invoke_async(&mut c).await },
            )
            .await?;
        int(&array(&reply)?[1])
    }

    async fn upstream_remaining(
        &self,
        credential: &str,
        pool: &Pool,
        remaining: u64,
        reset: Option<BlockEnd>,
        at: At,
    ) -> Result<Others, StoreError> {
        charge::upstream_remaining(self, credential, pool, remaining, reset, at).await
    }

    async fn settle(
        &self,
        credential: &str,
        receipt: &Receipt,
        cost: (&str, u64, u64),
        at: At,
    ) -> Result<Settled, StoreError> {
        self.settle_one(credential, receipt, cost, at).await
    }

    async fn unblock(&self, credential: &str) -> Result<Option<(Micros, String)>, StoreError> {
        let mut inv = self.unblock.prepare_invoke();
        inv.key(state_key(credential));
        let inv = &inv;
        let reply: Value = self
            .retrying(
                "unblock",
                |mut c| async move { inv.invoke_async(&mut c).await },
            )
            .await?;
        let r = array(&reply)?;
        let until = int(&r[0])?;
        Ok((until > 0).then(|| (until, text(&r[1]))))
    }

    async fn read(
        &self,
        credential: &str,
        pools: &[Pool],
        at: At,
    ) -> Result<CredentialLog, StoreError> {
        read::read(self, credential, pools, at).await
    }
}

impl JobStore for RedisLedger {
    async fn take_lock(
        &self,
        job: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<LockOutcome, StoreError> {
        let (held, current, ttl_ms) = self.lock_op("take", job, holder, ttl).await?;
        Ok(if held {
            LockOutcome::Held
        } else {
            LockOutcome::Busy {
                holder: current,
                expires_in: Duration::from_millis(ttl_ms.max(0) as u64),
            }
        })
    }

    async fn renew_lock(&self, job: &str, holder: &str, ttl: Duration) -> Result<bool, StoreError> {
        Ok(self.lock_op("renew", job, holder, ttl).await?.0)
    }

    async fn release_lock(&self, job: &str, holder: &str) -> Result<bool, StoreError> {
        Ok(self
            .lock_op("release", job, holder, Duration::ZERO)
            .await?
            .0)
    }

    async fn load_cursor(&self, job: &str) -> Result<Option<String>, StoreError> {
        let cmd = &redis::cmd("GET").arg(cursor_key(job)).clone();
        self.retrying("load cursor", |mut c| async move {
            cmd.query_async(&mut c).await
        })
        .await
    }

    async fn save_cursor(&self, job: &str, cursor: &str) -> Result<(), StoreError> {
        let cmd = &redis::cmd("SET").arg(cursor_key(job)).arg(cursor).clone();
        self.retrying("save cursor", |mut c| async move {
            cmd.query_async::<()>(&mut c).await
        })
        .await
    }

    async fn map_put_new(
        &self,
        map: &str,
        entries: &[(String, String)],
    ) -> Result<Vec<String>, StoreError> {
        self.maps_put_new(map, entries).await
    }

    async fn map_put(&self, map: &str, entries: &[(String, String)]) -> Result<(), StoreError> {
        self.maps_put(map, entries).await
    }

    async fn map_len(&self, map: &str) -> Result<u64, StoreError> {
        self.maps_len(map).await
    }

    async fn map_read(&self, map: &str) -> Result<Vec<(String, String)>, StoreError> {
        self.maps_read(map).await
    }

    async fn map_get(
        &self,
        map: &str,
        fields: &[String],
    ) -> Result<Vec<Option<String>>, StoreError> {
        self.maps_get(map, fields).await
    }

    async fn map_forget(&self, map: &str) -> Result<(), StoreError> {
        self.maps_forget(map).await
    }
}

impl RedisLedger {
    /// Settle one pool's entry of a charge (see [`Ledger::settle`]).
    async fn settle_one(
        &self,
        credential: &str,
        receipt: &Receipt,
        (pool, estimate, actual): (&str, u64, u64),
        at: At,
    ) -> Result<Settled, StoreError> {
        let Some(call) = receipt.entry(pool) else {
            return Ok(Settled::Gone);
        };
        let raw = actual;
        let actual = receipt.recordable(pool, actual);
        let mut inv = self.settle.prepare_invoke();
        inv.key(state_key(credential))
            .key(log_key(credential, pool))
            .key(index_key(credential, pool))
            .arg(format!("pool:{pool}"))
            .arg(call)
            .arg(receipt.id)
            .arg(estimate)
            .arg(actual)
            .arg(IDEMPOTENCY_HORIZON.as_micros() as u64)
            .arg(clock_arg(at));
        // (a share's pool holds the same call: settled in the same step)
        for sub in shares::settled_with(receipt, pool) {
            if let Some(call) = receipt.entry(sub) {
                inv.key(log_key(credential, sub))
                    .key(index_key(credential, sub))
                    .arg(format!("pool:{sub}"))
                    .arg(call)
                    .arg(receipt.recordable(sub, raw));
            }
        }
        let inv = &inv;
        let reply: Value = self
            .retrying(
                "settle",
                |mut c| async move { inv.invoke_async(&mut c).await },
            )
            .await?;
        match int(&array(&reply)?[0])? {
            1 => Ok(Settled::Exact),
            2 => Ok(Settled::Late),
            _ => Ok(Settled::Gone),
        }
    }
}
