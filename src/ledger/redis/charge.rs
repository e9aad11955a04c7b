//! Everything sent to `lua/charge.lua`: a charge's keys and arguments, its
//! id (fresh, or the number of a caller-given one), the decision read back
//! from the reply, and the upstream's own count, which the same script
//! records.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis::Value;

use super::RedisLedger;
use super::keys::{index_key, log_key, state_key};
use super::wire::{array, clock_arg, int, older_layout, text};
use crate::ledger::shares::SharedCharge;
use crate::ledger::topology::Conn;
use crate::ledger::{
    At, BlockEnd, Charge, ChargeDecision, Held, IDEMPOTENCY_HORIZON, Micros, Others, Pool,
    PoolCost, Receipt, Remaining, StoreError, WouldRefuse, calendar, check_fits, shares, tag,
};

impl RedisLedger {
    /// The charge script's invocation for `charge` under `id`; `resend`
    /// when it may have been recorded already.
    fn charge_invocation<'s>(
        &'s self,
        charge: &Charge<'_>,
        plan: Option<&SharedCharge>,
        (id, resend): (u64, bool),
        at: At,
    ) -> redis::ScriptInvocation<'s> {
        let mut inv = self.charge.prepare_invoke();
        let flag = u8::from(resend)
            + if charge.observe { 4 } else { 0 }
            + if charge.estimated.is_empty() { 0 } else { 8 }
            + if plan.is_some() { 16 } else { 0 };
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
        if let Some(plan) = plan {
            // (shares: the pools of its own, the pools recorded, when
            // calendar periods lend, then per own pool every other share's
            // pool and reserves)
            inv.arg(plan.base).arg(plan.charged).arg(plan.lend);
            for rows in &plan.rows {
                inv.arg(rows.len());
                for row in rows {
                    inv.arg(row.sub + 1);
                    for r in &row.reserves {
                        inv.arg(*r);
                    }
                }
            }
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

/// Send `charge` (see [`crate::ledger::Ledger::charge`]).
pub(super) async fn charge(
    ledger: &RedisLedger,
    charge: &Charge<'_>,
    at: At,
) -> Result<ChargeDecision, StoreError> {
    check_fits(charge.cost)?;
    // (shares: the charge as planned, its share's pools added)
    let plan = shares::plan(charge);
    let planned = plan.as_ref().map(|p| shares::planned(charge, p));
    let charge = planned.as_ref().unwrap_or(charge);
    check_fits(charge.cost)?;
    let decision = decide(ledger, charge, plan.as_ref(), at).await?;
    Ok(match &plan {
        Some(plan) => shares::answer(plan, decision),
        None => decision,
    })
}

/// Send a charge as planned, and read the decision.
async fn decide(
    ledger: &RedisLedger,
    charge: &Charge<'_>,
    plan: Option<&SharedCharge>,
    at: At,
) -> Result<ChargeDecision, StoreError> {
    // Always send an id: a charge whose reply was lost is sent again under
    // the same id, flagged as a resend, and the script records it once.
    let (id, seen) = match charge.id {
        Some(given) => {
            let id = charge_number(given);
            (id, ledger.sent_before(id))
        }
        None => (new_charge_id(), false),
    };
    let attempts = &AtomicUsize::new(0);
    let reply: Value = ledger
        .retrying("charge", |c| async move {
            let resend = seen || attempts.fetch_add(1, Ordering::Relaxed) > 0;
            let inv = &ledger.charge_invocation(charge, plan, (id, resend), at);
            match c {
                Conn::Sentinel(s) => s.confirmed(inv).await,
                mut c => inv.invoke_async(&mut c).await,
            }
        })
        .await
        .map_err(|e| older_layout(e, charge.credential))?;
    let r = array(&reply)?;
    let (outcome, now, serial) = (int(&r[0])?, int(&r[1])?, int(&r[2])? as u64);
    match outcome {
        1 => allowed(charge, r, id, now, serial),
        0 => {
            let pool = &charge.cost[int(&r[3])? as usize - 1].pool;
            let window = &pool.windows[int(&r[4])? as usize - 1];
            // (shares: the pool of the largest reserve kept, and its units)
            let kept = match (r.get(6).map(int).transpose()?, r.get(7)) {
                (Some(sub), Some(units)) if sub > 0 => {
                    let name = &charge.cost[sub as usize - 1].pool.name;
                    Some(Held::Reserve {
                        share: name.split_once('/').map_or("", |s| s.1).to_string(),
                        units: int(units)?.max(0) as u64,
                    })
                }
                _ => None,
            };
            Ok(ChargeDecision::Rejected {
                at: now,
                serial,
                pool: pool.name.clone(),
                per: window.per,
                retry_after: Duration::from_micros(int(&r[5])?.max(0) as u64),
                held: kept,
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

/// The decision of a charge that `lua/charge.lua` allowed (status 1), read
/// from its reply `r`.
fn allowed(
    charge: &Charge<'_>,
    r: &[Value],
    id: u64,
    now: Micros,
    serial: u64,
) -> Result<ChargeDecision, StoreError> {
    let mut remaining = Vec::new();
    let mut values = r[4..].iter();
    for c in charge.cost {
        for w in &c.pool.windows {
            let v = values
                .next()
                .ok_or_else(|| StoreError::Reply("a short reply from charge.lua".into()))?;
            remaining.push(Remaining {
                pool: c.pool.name.clone(),
                per: w.per,
                remaining: int(v)?.max(0) as u64,
                others: 0,
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
    // (then per pool the units of others its remaining counts, and in
    // which of its windows)
    let mut at = 0;
    for c in charge.cost {
        let (others, w) = (next()?.max(0) as u64, next()?);
        if let Some(r) = remaining.get_mut(at + w.max(1) as usize - 1) {
            r.others = others;
        }
        at += c.pool.windows.len();
    }
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
        receipt: Receipt::new(id, entries, &largest_budgets(charge)),
        observed,
    })
}

/// Each pool's largest budget, for a receipt.
fn largest_budgets<'c>(charge: &'c Charge<'_>) -> Vec<(&'c str, u64)> {
    (charge.cost.iter())
        .map(|c| {
            let largest = c.pool.windows.iter().map(|w| w.budget()).max();
            (c.pool.name.as_str(), largest.unwrap_or(0))
        })
        .collect()
}

/// Record the upstream's own count (see
/// [`crate::ledger::Ledger::upstream_remaining`]).
pub(super) async fn upstream_remaining(
    ledger: &RedisLedger,
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
        shares: None,
    };
    let limit = pool.longest_window().map_or(0, |w| w.limit);
    let (reset_at, reset_after) = match reset {
        Some(BlockEnd::At(t)) => (t, 0),
        Some(BlockEnd::After(d) | BlockEnd::Backoff { shortest: d, .. }) => {
            (0, d.as_micros().min(i64::MAX as u128) as i64)
        }
        None => (0, -1),
    };
    let mut inv = ledger.charge.prepare_invoke();
    RedisLedger::charge_keys_and_args(&charge, new_charge_id(), "2", at, &mut inv);
    inv.arg(remaining).arg(limit).arg(reset_at).arg(reset_after);
    let inv = &inv;
    let reply: Value = ledger
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
