//! A usage report from Redis in bounded steps: `lua/read.lua` says what a
//! credential's logs hold (call numbers, blocks the index may hold), then
//! `lua/read_log.lua` returns slices of at most 512 calls or block
//! records, so no script runs long however long the log (issue 11: a
//! million-call log once held Redis for 1.4 s in one read).
//!
//! Blocks are read as summaries; a block that straddles a boundary the
//! report draws (a window's start, a chart bucket's edge, the retention) is
//! read again call by call, so the report is exact. The slices are read on
//! the clock reading of the first script: calls logged since lie past the
//! tail it reported and are not asked for; calls trimmed since had left the
//! retention, at most a few milliseconds' worth of them was still inside
//! the longest window at that reading.

use redis::Value;

use super::wire::{array, clock_arg, int, older_layout, tag_names, text};
use super::{RedisLedger, state_key};
use crate::ledger::{
    At, CredentialLog, IDEMPOTENCY_HORIZON, LogBlock, LogEntry, LogSegment, Micros, Others, Pool,
    StoreError, index_key, log_key, straddles,
};

/// Calls per block of the index (the scripts' `BLOCK`).
const BLOCK: i64 = super::BLOCK as i64;
/// The most calls or blocks one `read_log.lua` call returns: half of what
/// it accepts, as a slice of 1,024 block records was `status`'s slowest
/// script at 10^6 calls (0.5 to 1.9 ms on a shared machine, near issue
/// 11's 2 ms), and a share's log adds as many slices as its pool's.
const SLICE: i64 = 512;

/// What `read.lua` reports of one pool's log.
struct PoolExtent {
    lost: Micros,
    /// The calls the log holds: `head..tail`.
    head: i64,
    tail: i64,
    /// The blocks whose records the index may hold: `first..first + indexed`.
    first: i64,
    indexed: i64,
    /// Calls at or before this time count in no window (`lua/charge.lua`).
    dead: Micros,
}

pub(super) async fn read(
    ledger: &RedisLedger,
    credential: &str,
    pools: &[Pool],
    at: At,
) -> Result<CredentialLog, StoreError> {
    let mut inv = ledger.read.prepare_invoke();
    inv.key(state_key(credential));
    for p in pools {
        inv.key(log_key(credential, &p.name));
    }
    for p in pools {
        inv.key(index_key(credential, &p.name));
    }
    inv.arg(clock_arg(at));
    for p in pools {
        inv.arg(format!("pool:{}", p.name));
    }
    // (each pool's longest reach: a log segment that expired before it is
    // passed, not taken for lost)
    for p in pools {
        inv.arg(p.windows.iter().map(|w| w.reach_us()).max().unwrap_or(0));
    }
    let inv = &inv;
    let reply: Value = ledger
        .retrying(
            "read",
            |mut c| async move { inv.invoke_async(&mut c).await },
        )
        .await
        .map_err(|e| older_layout(e, credential))?;
    let r = array(&reply)?;
    if r.len() != 6 + 11 * pools.len() {
        return Err(StoreError::Reply("an odd reply from read.lua".into()));
    }
    let (now, retain) = (int(&r[0])?, int(&r[5])?);
    let visible = now - retain.max(IDEMPOTENCY_HORIZON.as_micros() as Micros);
    let (mut logs, mut lost, mut others, mut observed) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut reserved = Vec::new();
    for (pool, f) in pools.iter().zip(r[6..].chunks(11)) {
        let extent = PoolExtent {
            lost: int(&f[0])?,
            head: int(&f[1])?,
            tail: int(&f[2])?,
            first: int(&f[3])?,
            indexed: int(&f[4])?,
            dead: int(&f[5])?,
        };
        lost.push(extent.lost);
        others.push(Others {
            units: int(&f[6])?.max(0) as u64,
            until: int(&f[7])?,
        });
        observed.push((int(&f[8])?.max(0) as u64, int(&f[9])?));
        reserved.push(reservations(&f[10], &extent, visible));
        let reader = PoolLogReader {
            ledger,
            credential,
            pool,
        };
        logs.push(reader.segments(&extent, now, visible).await?);
    }
    Ok(CredentialLog {
        at: now,
        serial: int(&r[1])? as u64,
        blocked_until: int(&r[2])?,
        blocked_reason: text(&r[3]),
        retain,
        tags: tag_names(array(&r[4])?)?,
        pools: logs,
        lost,
        others,
        observed,
        reserved,
    })
}

/// A pool's reservations not settled yet (`reserved:P`, packed (call
/// number, time, units) triples: lua/charge.lua), as (time, units): those
/// whose call the log still holds and that count in some window.
fn reservations(field: &Value, e: &PoolExtent, visible: Micros) -> Vec<(Micros, u64)> {
    let Value::BulkString(bytes) = field else {
        return Vec::new();
    };
    let double = |b: &[u8]| f64::from_le_bytes(b.try_into().expect("8 bytes"));
    bytes
        .chunks_exact(24)
        .map(|t| (double(&t[..8]), double(&t[8..16]), double(&t[16..])))
        .filter(|&(s, at, _)| s as i64 >= e.head && (at as i64) > visible.max(e.dead))
        .map(|(_, at, units)| (at as i64, units.max(0.0) as u64))
        .collect()
}

/// Reads one pool's log through `read_log.lua`.
struct PoolLogReader<'a> {
    ledger: &'a RedisLedger,
    credential: &'a str,
    pool: &'a Pool,
}

impl PoolLogReader<'_> {
    /// The pool's log as segments, oldest first: calls outside the index,
    /// block summaries inside it, and the blocks that straddle a boundary
    /// of the report at `now` read call by call. Calls at or before the dead
    /// mark are left out, as the embedded store deletes them.
    async fn segments(
        &self,
        e: &PoolExtent,
        now: Micros,
        visible: Micros,
    ) -> Result<Vec<LogSegment>, StoreError> {
        let mut out = self.all_segments(e, now, visible.max(e.dead)).await?;
        out.retain(|s| s.span().1 > e.dead);
        Ok(out)
    }

    /// The pool's log as segments, oldest first, with blocks that straddle a
    /// boundary of the report (`visible` included) read call by call, and
    /// so are blocks whose record the index lacks.
    async fn all_segments(
        &self,
        e: &PoolExtent,
        now: Micros,
        visible: Micros,
    ) -> Result<Vec<LogSegment>, StoreError> {
        let mut out = Vec::new();
        // (the next call not yet in `out`)
        let mut at = e.head;
        for (b, block) in self.blocks(e.first, e.first + e.indexed).await? {
            let (start, end) = (b * BLOCK, (b + 1) * BLOCK);
            if end <= at {
                continue;
            }
            out.extend(self.calls(at, start.max(at)).await?);
            let segment = LogSegment::Block(block);
            if straddles(self.pool, &segment, now, visible) {
                out.extend(self.calls(start.max(at), end).await?);
            } else {
                out.push(segment);
            }
            at = end;
        }
        out.extend(self.calls(at, e.tail).await?);
        Ok(out)
    }

    /// Calls `from..to`, in slices.
    async fn calls(&self, from: i64, to: i64) -> Result<Vec<LogSegment>, StoreError> {
        let mut out = Vec::new();
        let mut at = from;
        while at < to {
            let end = (at + SLICE).min(to);
            for t in self
                .slice("calls", at, end)
                .await?
                .1
                .chunks(super::ENTRY as usize)
            {
                let [time, cost, tag, _id] = t else {
                    return Err(StoreError::Reply("a log entry of the wrong size".into()));
                };
                out.push(LogSegment::Entry(LogEntry {
                    at: int(time)?,
                    cost: int(cost)? as u64,
                    tag: int(tag)? as u32,
                }));
            }
            at = end;
        }
        Ok(out)
    }

    /// The block records the index holds of `from..to`, in slices, with
    /// their block numbers, oldest first.
    async fn blocks(&self, from: i64, to: i64) -> Result<Vec<(i64, LogBlock)>, StoreError> {
        let mut out: Vec<(i64, LogBlock)> = Vec::new();
        let mut at = from;
        while at < to {
            let end = (at + SLICE).min(to);
            for r in self.slice("blocks", at, end).await?.1 {
                let (b, block) = block(&r)?;
                // (a record out of place is left out: its calls are read)
                if (at..end).contains(&b) && out.last().is_none_or(|(last, _)| *last < b) {
                    out.push((b, block));
                }
            }
            at = end;
        }
        Ok(out)
    }

    /// One `read_log.lua` call for the range `from..to`: the number of the
    /// first call or block returned, and the flat reply.
    async fn slice(&self, kind: &str, from: i64, to: i64) -> Result<(i64, Vec<Value>), StoreError> {
        let mut inv = self.ledger.read_log.prepare_invoke();
        inv.key(state_key(self.credential))
            .key(log_key(self.credential, &self.pool.name))
            .key(index_key(self.credential, &self.pool.name))
            .arg(format!("pool:{}", self.pool.name))
            .arg(kind)
            .arg(from)
            .arg(to);
        let inv = &inv;
        let reply: Value = self
            .ledger
            .retrying(
                "read log",
                |mut c| async move { inv.invoke_async(&mut c).await },
            )
            .await?;
        let ranges = array(&reply)?;
        let [range] = ranges else {
            return Err(StoreError::Reply("an odd reply from read_log.lua".into()));
        };
        let range = array(range)?;
        let [first, items] = range else {
            return Err(StoreError::Reply("an odd reply from read_log.lua".into()));
        };
        Ok((int(first)?, array(items)?.to_vec()))
    }
}

/// A block record (`lua/charge.lua`): packed little-endian doubles, first
/// and last call's time, cumulative cost, the block's cost, calls, the
/// block's number, its origin, then (tag id, cost) per tag.
fn block(record: &Value) -> Result<(i64, LogBlock), StoreError> {
    let Value::BulkString(bytes) = record else {
        return Err(StoreError::Reply(
            "a block record that is not a string".into(),
        ));
    };
    let fixed = 8 * super::RECORD_FIELDS;
    if bytes.len() < fixed || !(bytes.len() - fixed).is_multiple_of(16) {
        return Err(StoreError::Reply("a block record of the wrong size".into()));
    }
    let f: Vec<f64> = bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let block = LogBlock {
        first: f[0] as Micros,
        last: f[1] as Micros,
        cost: f[3] as u64,
        calls: f[4] as u64,
        by_tag: f[super::RECORD_FIELDS..]
            .chunks_exact(2)
            .map(|t| (t[0] as u32, t[1] as u64))
            .collect(),
    };
    Ok((f[5] as i64, block))
}
