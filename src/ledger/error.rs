//! Why the ledger could not answer: [`StoreError`], typed so that callers
//! tell an outage (exit 69 under `fail_closed`) from a configuration error
//! and from keys an older build wrote.

use super::PoolCost;
use super::embedded::BUSY_TIMEOUT;

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
    /// The credential's keys were written by an older build, in a layout
    /// this one would misread; nothing was written.
    #[error(
        "the Redis keys of credential '{credential}' were written by a build of portion \
         older than 2026-11-24, in a layout this one would misread; stop its timers and \
         delete them: redis-cli --scan --pattern 'portion:{{{credential}}}:*' | xargs -r redis-cli del"
    )]
    OlderLayout { credential: String },
    /// The store URL names something that cannot be connected to as given
    /// (the message names the URL, password masked).
    #[error("{0}")]
    BadLocation(String),
    /// No place for the embedded store: no state directory is known.
    #[error("no state directory: set STATE_DIRECTORY, XDG_STATE_HOME or HOME, or name a store")]
    NoStateDirectory,
    /// Redis refused a command (not an outage: a script error, a wrong type).
    #[error("store error: {0}")]
    Redis(redis::RedisError),
    /// A script answered in a shape this build does not expect.
    #[error("store error: unexpected reply from a script: {0}")]
    Reply(String),
    /// The embedded store's SQLite reported an error (other than its file
    /// staying locked past the busy timeout: that is [`StoreError::Unavailable`]).
    #[error("store error: embedded store: {0}")]
    Sql(rusqlite::Error),
    /// The embedded store's thread failed a transaction (a panic), or
    /// has ended.
    #[error("store error: embedded store task failed: {0}")]
    Worker(String),
}

/// SQLite's errors, except that a file locked by another connection
/// (`SQLITE_BUSY`, `SQLITE_LOCKED`) is an outage: the store cannot answer
/// now, so the endpoint's fail_closed/fail_open policy applies, as for an
/// unreachable Redis. Said without a wait: SQLite answers some of them at
/// once, without its busy handler ([`busy_after`] says one that waited).
impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        if crate::atomic_file::is_busy(&e) {
            return Self::Unavailable(format!("its file is locked by another writer: {e}"));
        }
        Self::Sql(e)
    }
}

/// SQLite's error `e` after the store waited `waited` for the file (the
/// busy timeout, or a retried WAL switch): a lock is said to have stayed
/// past the timeout only when that much time went by.
pub(in crate::ledger) fn busy_after(e: rusqlite::Error, waited: std::time::Duration) -> StoreError {
    if crate::atomic_file::is_busy(&e) && waited >= BUSY_TIMEOUT {
        return StoreError::Unavailable(format!(
            "its file stayed locked by another writer past the {}s busy timeout: {e}",
            BUSY_TIMEOUT.as_secs()
        ));
    }
    e.into()
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
