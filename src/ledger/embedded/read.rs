//! The embedded store's usage report: one deferred (read-only) transaction
//! reads each pool's entries inside the retention, tags interned, with
//! what the log keeps beside them.

use rusqlite::params;

use super::charge::clock;
use super::{credential_row, log};
use crate::ledger::{
    At, CredentialLog, IDEMPOTENCY_HORIZON, LogEntry, LogSegment, Micros, StoreError, untag,
};

/// The log of `credential`'s pools `names`, read inside `tx` (see
/// [`crate::ledger::Ledger::read`]).
pub(super) fn read(
    tx: &rusqlite::Transaction<'_>,
    credential: &str,
    names: &[String],
    at: At,
) -> Result<CredentialLog, StoreError> {
    let row = credential_row(tx, credential)?;
    let now = clock(at, row.last);
    // Entries at or before now - R count in no window (as in charge.rs),
    // nor do those at or before a pool's dead mark: not read.
    let visible = now - row.retain.max(IDEMPOTENCY_HORIZON.as_micros() as Micros);
    let mut tags: Vec<String> = Vec::new();
    let (mut logs, mut others, mut observed) = (Vec::new(), Vec::new(), Vec::new());
    let mut reserved = Vec::new();
    for pool in names {
        let after = log::dead_mark(tx, credential, pool)?.max(visible);
        logs.push(read_pool(tx, credential, pool, after, &mut tags)?);
        others.push(log::others(tx, credential, pool)?);
        observed.push(log::observed(tx, credential, pool)?);
        reserved.push(log::reserved(tx, credential, pool, after)?);
    }
    Ok(CredentialLog {
        at: now,
        serial: row.serial,
        blocked_until: row.blocked_until,
        blocked_reason: row.blocked_reason,
        retain: row.retain,
        lost: vec![row.lost_at; logs.len()],
        others,
        observed,
        reserved,
        tags: tags.iter().map(|t| untag(t)).collect(),
        pools: logs,
    })
}

/// One pool's entries after `after`, oldest first, their tags interned in
/// `tags` (rows read in place: no string is copied per row).
fn read_pool(
    tx: &rusqlite::Transaction<'_>,
    credential: &str,
    pool: &str,
    after: Micros,
    tags: &mut Vec<String>,
) -> Result<Vec<LogSegment>, StoreError> {
    let mut stmt = tx.prepare_cached(
        "SELECT at, cost, tag FROM log WHERE credential = ?1 AND pool = ?2 AND at > ?3
         ORDER BY at, rowid",
    )?;
    let mut rows = stmt.query(params![credential, pool, after])?;
    let mut entries = Vec::new();
    let mut last: Option<usize> = None;
    while let Some(r) = rows.next()? {
        let name = r.get_ref(2)?.as_str().map_err(rusqlite::Error::from)?;
        // Runs of one tag are the rule: check the last one first.
        let tag = match last.filter(|&i| tags[i] == name) {
            Some(i) => i,
            None => match tags.iter().position(|t| t == name) {
                Some(i) => i,
                None => {
                    tags.push(name.to_string());
                    tags.len() - 1
                }
            },
        };
        last = Some(tag);
        entries.push(LogSegment::Entry(LogEntry {
            at: r.get(0)?,
            cost: r.get::<_, i64>(1)? as u64,
            tag: tag as u32,
        }));
    }
    Ok(entries)
}
