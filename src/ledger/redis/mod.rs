//! The shared store: the ledger in Redis. Every decision is one Lua script
//! (`lua/*.lua`) run atomically inside Redis, on Redis's own clock, so hosts
//! with skewed clocks agree.
//!
//! Keys of credential `C` (all share the hash tag `{C}`, so they live in one
//! Cluster slot and the scripts run unchanged on Redis Cluster):
//!
//! * `quota:{C}:state`  hash: per pool (one packed field) the log's head and
//!   tail sequence numbers and per window the running sum, a pointer to the
//!   oldest entry still inside and that entry's time; the latest decision's
//!   time and the charge serial; tag names; the upstream block.
//! * `quota:{C}:log:P:k`  lists per pool, segment `k` holding calls
//!   `k * 65536..`: `(time µs, cost, tag id, charge id)` quadruples, one per
//!   call whatever its cost, oldest first, trimmed past the longest window
//!   (and never before [`IDEMPOTENCY_HORIZON`]). Segments keep every read of
//!   the log positional in bounded time.
//! * `quota:{C}:index:P:k`  lists per pool: a summary per block of 128 calls
//!   of log segment `k` (times, cumulative cost, cost by tag), so that no
//!   charge and no status read walks a long log call by call.
//!
//! Idempotency costs nothing on the common path: a charge's id rides in its
//! log entry, and the log is searched for it only when the charge is sent
//! again (a retry after a lost reply, or an id this ledger has sent before).
//! For that to hold, no layer below resends on its own: the Cluster client is
//! built with no retries of its own, and [`RedisLedger::retrying`] resends.
//!
//! Keys of job `J`: `quota:job:{J}:lock` (the run lock: who holds it, with a
//! TTL; `lua/lock.lua`) and `quota:job:{J}:cursor` (where the job resumes; no
//! TTL: a job that runs once a month still resumes where it stopped).
//!
//! Idle keys expire a minute (plus 1/8 window) after the longest window, or
//! the block, ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis::{RedisError, Script, Value};

mod read;

use super::topology::{Conn, Topology, is_transient, refused};

use super::{
    At, BlockEnd, Charge, ChargeDecision, CredentialLog, IDEMPOTENCY_HORIZON, Ledger, LockOutcome,
    Micros, Others, Pool, PoolCost, Receipt, Remaining, Settled, StoreError, WouldRefuse, calendar,
    check_fits, redact_url, tag, untag,
};

const CHARGE_LUA: &str = include_str!("../../../lua/charge.lua");
const BLOCK_LUA: &str = include_str!("../../../lua/block.lua");
const READ_LUA: &str = include_str!("../../../lua/read.lua");
const READ_LOG_LUA: &str = include_str!("../../../lua/read_log.lua");
const LOCK_LUA: &str = include_str!("../../../lua/lock.lua");
const UNBLOCK_LUA: &str = include_str!("../../../lua/unblock.lua");
const SETTLE_LUA: &str = include_str!("../../../lua/settle.lua");

/// A request that failed in a way that may pass (a lost reply, a dropped
/// connection, a failover in progress) is sent again, the same request (a
/// charge keeps its id, so it is recorded once), with a growing pause,
/// until this long has passed since the first attempt: long enough to span
/// a Sentinel failover. With the 2 s response timeout, a store that never
/// answers is given up on after at most about 12 s.
pub const RETRY_WINDOW: Duration = Duration::from_secs(10);

/// The ledger in one Redis server.
#[derive(Clone)]
pub struct RedisLedger {
    conn: Conn,
    /// What the clones of one ledger share.
    shared: std::sync::Arc<Shared>,
    charge: Script,
    block: Script,
    read: Script,
    read_log: Script,
    settle: Script,
    lock: Script,
    unblock: Script,
}

#[derive(Default)]
struct Shared {
    /// Set when a request gave up on a transient failure: later requests
    /// try once instead of for a whole retry window, until one succeeds,
    /// so a store that is down costs one window per run, not one per request.
    degraded: std::sync::atomic::AtomicBool,
    /// The caller-given charge ids sent in the last [`IDEMPOTENCY_HORIZON`],
    /// by their number (one sent again is flagged as a resend), and the size
    /// at which to drop the old ones next.
    sent: std::sync::Mutex<(HashMap<u64, Instant>, usize)>,
}

/// The key of credential `credential`'s state hash.
pub fn state_key(credential: &str) -> String {
    format!("quota:{{{credential}}}:state")
}

/// Calls per segment of a pool's log (`lua/charge.lua`): call `s` sits in
/// segment `s / LOG_SEGMENT`, and so does its block's record in the index.
pub const LOG_SEGMENT: u64 = 65536;

/// The prefix of the keys of the log of `pool` of `credential`: its
/// segments are [`log_segment_key`]s.
pub fn log_key(credential: &str, pool: &str) -> String {
    format!("quota:{{{credential}}}:log:{pool}")
}

/// The key of segment `k` of the log of `pool` of `credential`.
pub fn log_segment_key(credential: &str, pool: &str, k: u64) -> String {
    format!("{}:{k}", log_key(credential, pool))
}

/// The prefix of the keys of the index of the log of `pool` of
/// `credential` (one record per block of calls: see `lua/charge.lua`).
pub fn index_key(credential: &str, pool: &str) -> String {
    format!("quota:{{{credential}}}:index:{pool}")
}

/// The key of segment `k` of the index of `pool` of `credential`: the
/// records of the blocks of log segment `k`.
pub fn index_segment_key(credential: &str, pool: &str, k: u64) -> String {
    format!("{}:{k}", index_key(credential, pool))
}

/// The key of job `job`'s run lock.
pub fn lock_key(job: &str) -> String {
    format!("quota:job:{{{job}}}:lock")
}

/// The key of job `job`'s cursor.
pub fn cursor_key(job: &str) -> String {
    format!("quota:job:{{{job}}}:cursor")
}

fn store_error(e: RedisError) -> StoreError {
    if e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
        || e.kind() == redis::ErrorKind::AuthenticationFailed
        || e.code() == Some("WRONGPASS")
        || e.code() == Some("NOAUTH")
    {
        refused(&e)
    } else {
        StoreError::Redis(e)
    }
}

/// A script's refusal of keys that an older build wrote (an `OLDER_LAYOUT`
/// error reply), typed.
fn older_layout(e: StoreError, credential: &str) -> StoreError {
    match e {
        StoreError::Redis(r) if r.code() == Some("OLDER_LAYOUT") => StoreError::OlderLayout {
            credential: credential.to_string(),
        },
        e => e,
    }
}

/// The names of a credential's tags, indexed by tag id, from the flat
/// (id, "endpoint<TAB>job", ...) list the read scripts return.
fn tag_names(flat: &[Value]) -> Result<Vec<(String, String)>, StoreError> {
    let mut names = Vec::new();
    for kv in flat.chunks(2) {
        let id = usize::try_from(int(&kv[0])?)
            .ok()
            .filter(|id| *id < 1 << 20)
            .ok_or_else(|| StoreError::Reply("a tag id out of range".into()))?;
        if names.len() <= id {
            names.resize(id + 1, (String::new(), String::new()));
        }
        names[id] = untag(&text(&kv[1]));
    }
    Ok(names)
}

fn clock_arg(at: At) -> String {
    match at {
        At::StoreClock => String::new(),
        At::Fixed(us) => us.to_string(),
    }
}

fn int(v: &Value) -> Result<i64, StoreError> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| StoreError::Reply("a number that is not one".into())),
        other => Err(StoreError::Reply(format!("{other:?}"))),
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        _ => String::new(),
    }
}

fn array(v: &Value) -> Result<&[Value], StoreError> {
    match v {
        Value::Array(a) => Ok(a),
        other => Err(StoreError::Reply(format!("{other:?}"))),
    }
}

impl RedisLedger {
    /// Connect to `url`: one server (`redis://`, `rediss://`), a Cluster
    /// (`redis+cluster://`) or a Sentinel group (`redis+sentinel://`); see
    /// [`super::topology`]. Fails with `StoreError::Unavailable` when no
    /// server answers in time.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let topology = Topology::parse(url).map_err(StoreError::BadLocation)?;
        let conn = topology.connect(&redact_url(url)).await?;
        Ok(Self {
            conn,
            shared: Default::default(),
            charge: Script::new(CHARGE_LUA),
            block: Script::new(BLOCK_LUA),
            read: Script::new(READ_LUA),
            read_log: Script::new(READ_LOG_LUA),
            settle: Script::new(SETTLE_LUA),
            lock: Script::new(LOCK_LUA),
            unblock: Script::new(UNBLOCK_LUA),
        })
    }

    /// Run `op` until it succeeds, fails for good, or [`RETRY_WINDOW`] has
    /// passed.
    async fn retrying<T, F, Fut>(&self, what: &str, op: F) -> Result<T, StoreError>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        use std::sync::atomic::Ordering::Relaxed;
        let start = tokio::time::Instant::now();
        let window = if self.shared.degraded.load(Relaxed) {
            Duration::ZERO
        } else {
            RETRY_WINDOW
        };
        let mut pause = Duration::from_millis(100);
        loop {
            match op(self.conn.clone()).await {
                Ok(v) => {
                    self.shared.degraded.store(false, Relaxed);
                    return Ok(v);
                }
                Err(e) if is_transient(&e) && start.elapsed() < window => {
                    tracing::debug!("{what}: {e}; sending it again in {pause:?}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(e) => {
                    if is_transient(&e) {
                        self.shared.degraded.store(true, Relaxed);
                    }
                    return Err(store_error(e));
                }
            }
        }
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

    /// The charge script's invocation for `charge` under `id`; `resend`
    /// when it may have been recorded already.
    fn charge_invocation<'s>(
        &'s self,
        charge: &Charge<'_>,
        id: u64,
        resend: bool,
        at: At,
    ) -> redis::ScriptInvocation<'s> {
        let mut inv = self.charge.prepare_invoke();
        let flag = u8::from(resend)
            + if charge.observe { 4 } else { 0 }
            + if charge.estimated.is_empty() { 0 } else { 8 };
        Self::charge_keys_and_args(charge, id, &flag.to_string(), at, &mut inv);
        if !charge.estimated.is_empty() {
            // (the pools reserved: "1" at the place of each, in pool order)
            let places: String = (charge.cost.iter())
                .map(|c| match charge.estimated.contains(&c.pool.name.as_str()) {
                    true => '1',
                    false => '0',
                })
                .collect();
            inv.arg(places);
        }
        inv
    }

    /// The keys and arguments of a charge, added to any script's invocation
    /// (the benchmark sends them to `return 1` to measure their transport).
    pub fn charge_arguments(&self, charge: &Charge<'_>, inv: &mut redis::ScriptInvocation<'_>) {
        Self::charge_keys_and_args(charge, new_charge_id(), "0", At::StoreClock, inv);
    }

    /// `flag`: "0" a new charge, "1" one sent again, "2" an observation
    /// of the upstream's count, plus 4 in observe mode, plus 8 with pools
    /// reserved (ARGV[3] of charge.lua; the caller adds their mask).
    fn charge_keys_and_args(
        charge: &Charge<'_>,
        id: u64,
        flag: &str,
        at: At,
        inv: &mut redis::ScriptInvocation<'_>,
    ) {
        inv.key(state_key(charge.credential));
        for c in charge.cost {
            inv.key(log_key(charge.credential, &c.pool.name));
        }
        for c in charge.cost {
            inv.key(index_key(charge.credential, &c.pool.name));
        }
        inv.arg(clock_arg(at))
            .arg(id)
            .arg(flag)
            .arg(IDEMPOTENCY_HORIZON.as_micros() as u64)
            .arg(format!("tag:{}", tag(charge.endpoint, charge.job)))
            .arg(charge.seen_serial)
            .arg(charge.cost.len());
        for c in charge.cost {
            inv.arg(format!("pool:{}", c.pool.name));
        }
        for c in charge.cost {
            inv.arg(c.units).arg(c.pool.windows.len());
            for w in &c.pool.windows {
                // (a calendar window: minus its period's length)
                let len = if w.aligned.is_some() {
                    -w.len_us()
                } else {
                    w.len_us()
                };
                inv.arg(len).arg(w.budget());
            }
        }
        // Each calendar window's local midnights around this host's clock:
        // the script finds its period on the store's.
        let around = match at {
            At::Fixed(t) => t,
            At::StoreClock => chrono::Utc::now().timestamp_micros(),
        };
        for w in charge.cost.iter().flat_map(|c| &c.pool.windows) {
            if let Some(tz) = w.aligned {
                for m in calendar::midnights(tz, around) {
                    inv.arg(m);
                }
            }
        }
    }

    /// Whether the caller-given id `id` was sent in the last
    /// [`IDEMPOTENCY_HORIZON`]; remembers it.
    fn sent_before(&self, id: u64) -> bool {
        let now = Instant::now();
        let mut guard = self.shared.sent.lock().unwrap_or_else(|e| e.into_inner());
        let (sent, prune_at) = &mut *guard;
        if sent.len() >= *prune_at {
            sent.retain(|_, t| now.duration_since(*t) < IDEMPOTENCY_HORIZON);
            // Twice what is left: pruning stays a constant cost per charge.
            *prune_at = (sent.len() * 2).max(4096);
        }
        sent.insert(id, now)
            .is_some_and(|t| now.duration_since(t) < IDEMPOTENCY_HORIZON)
    }
}

/// A fresh charge id: random, in 1..2^63 (Redis keeps it as a 9-byte integer
/// in the log entry).
fn new_charge_id() -> u64 {
    (rand::random::<u64>() >> 1).max(1)
}

/// The number that stands for a caller-given charge id in the log: its
/// 64-bit FNV-1a hash, in 1..2^63. Stable across processes and versions.
fn charge_number(id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (h >> 1).max(1)
}

impl Ledger for RedisLedger {
    async fn charge(&self, charge: &Charge<'_>, at: At) -> Result<ChargeDecision, StoreError> {
        check_fits(charge.cost)?;
        // Always send an id: a charge whose reply was lost is sent again under
        // the same id, flagged as a resend, and the script records it once.
        let (id, seen) = match charge.id {
            Some(given) => {
                let id = charge_number(given);
                (id, self.sent_before(id))
            }
            None => (new_charge_id(), false),
        };
        let attempts = &AtomicUsize::new(0);
        let reply: Value = self
            .retrying("charge", |c| async move {
                let resend = seen || attempts.fetch_add(1, Ordering::Relaxed) > 0;
                let inv = &self.charge_invocation(charge, id, resend, at);
                match c {
                    Conn::Sentinel(s) => s.confirmed(inv).await,
                    mut c => inv.invoke_async(&mut c).await,
                }
            })
            .await
            .map_err(|e| older_layout(e, charge.credential))?;
        let r = array(&reply)?;
        let (status, now, serial) = (int(&r[0])?, int(&r[1])?, int(&r[2])? as u64);
        match status {
            1 => {
                let mut remaining = Vec::new();
                let mut values = r[4..].iter();
                for c in charge.cost {
                    for w in &c.pool.windows {
                        let v = values.next().ok_or_else(|| {
                            StoreError::Reply("a short reply from charge.lua".into())
                        })?;
                        remaining.push(Remaining {
                            pool: c.pool.name.clone(),
                            per: w.per,
                            remaining: int(v)?.max(0) as u64,
                        });
                    }
                }
                let mut next = || {
                    values
                        .next()
                        .ok_or_else(|| StoreError::Reply("a short reply from charge.lua".into()))
                        .and_then(int)
                };
                let mut entries = Vec::new();
                for c in charge.cost {
                    let call = next()?;
                    if call >= 0 {
                        entries.push((c.pool.name.clone(), call));
                    }
                }
                let (p, w, retry) = (next()?, next()?, next()?);
                let observed = (p > 0).then(|| {
                    let pool = &charge.cost[p as usize - 1].pool;
                    WouldRefuse {
                        pool: pool.name.clone(),
                        per: (w > 0).then(|| pool.windows[w as usize - 1].per),
                        retry_after: Duration::from_micros(retry.max(0) as u64),
                    }
                });
                Ok(ChargeDecision::Allowed {
                    at: now,
                    serial,
                    duplicate: int(&r[3])? == 1,
                    remaining,
                    receipt: Receipt { id, entries },
                    observed,
                })
            }
            0 => {
                let pool = &charge.cost[int(&r[3])? as usize - 1].pool;
                let window = &pool.windows[int(&r[4])? as usize - 1];
                Ok(ChargeDecision::Rejected {
                    at: now,
                    serial,
                    pool: pool.name.clone(),
                    per: window.per,
                    retry_after: Duration::from_micros(int(&r[5])?.max(0) as u64),
                })
            }
            2 => Ok(ChargeDecision::Blocked {
                at: now,
                serial,
                until: int(&r[3])?,
                reason: text(&r[4]),
            }),
            3 => Ok(ChargeDecision::LogLost {
                at: now,
                serial,
                pool: charge.cost[int(&r[3])? as usize - 1].pool.name.clone(),
                since: int(&r[4])?,
                until: int(&r[5])?,
            }),
            other => Err(StoreError::Reply(format!(
                "unknown status {other} from charge.lua"
            ))),
        }
    }

    async fn block(
        &self,
        credential: &str,
        end: impl Into<BlockEnd> + Send,
        reason: &str,
        at: At,
    ) -> Result<Micros, StoreError> {
        let (until, after) = match end.into() {
            BlockEnd::At(t) => (t.to_string(), String::new()),
            BlockEnd::After(d) => (String::new(), d.as_micros().to_string()),
        };
        let mut inv = self.block.prepare_invoke();
        inv.key(state_key(credential))
            .arg(clock_arg(at))
            .arg(until)
            .arg(after)
            .arg(reason);
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
        let cost = [PoolCost {
            pool: pool.clone(),
            units: 0,
        }];
        let charge = Charge {
            credential,
            cost: &cost,
            endpoint: "",
            job: "",
            id: None,
            seen_serial: 0,
            observe: false,
            estimated: &[],
        };
        let limit = pool.longest_window().map_or(0, |w| w.limit);
        let (reset_at, reset_after) = match reset {
            Some(BlockEnd::At(t)) => (t, 0),
            Some(BlockEnd::After(d)) => (0, d.as_micros().min(i64::MAX as u128) as i64),
            None => (0, -1),
        };
        let mut inv = self.charge.prepare_invoke();
        Self::charge_keys_and_args(&charge, new_charge_id(), "2", at, &mut inv);
        inv.arg(remaining).arg(limit).arg(reset_at).arg(reset_after);
        let inv = &inv;
        let reply: Value = self
            .retrying("upstream count", |mut c| async move {
                inv.invoke_async(&mut c).await
            })
            .await
            .map_err(|e| older_layout(e, credential))?;
        let r = array(&reply)?;
        if int(&r[0])? != 4 {
            return Err(StoreError::Reply("an odd reply from charge.lua".into()));
        }
        Ok(Others {
            units: int(&r[3])?.max(0) as u64,
            until: int(&r[4])?,
        })
    }

    async fn settle(
        &self,
        credential: &str,
        receipt: &Receipt,
        (pool, estimate, actual): (&str, u64, u64),
        at: At,
    ) -> Result<Settled, StoreError> {
        let Some(call) = receipt.entry(pool) else {
            return Ok(Settled::Gone);
        };
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

    async fn read(
        &self,
        credential: &str,
        pools: &[Pool],
        at: At,
    ) -> Result<CredentialLog, StoreError> {
        read::read(self, credential, pools, at).await
    }
}
