//! Sending a request again after a failure that may pass, so a lost reply
//! or a failover costs a pause rather than an error.

use std::time::Duration;

use redis::RedisError;

use super::RedisLedger;
use crate::ledger::StoreError;
use crate::ledger::topology::{Conn, is_transient, refused};

/// A request that failed in a way that may pass (a lost reply, a dropped
/// connection, a failover in progress) is sent again, the same request (a
/// charge keeps its id, so it is recorded once), with a growing pause,
/// until this long has passed since the first attempt: long enough to span
/// a Sentinel failover. With the 2 s response timeout, a store that never
/// answers is given up on after at most about 12 s.
pub const RETRY_WINDOW: Duration = Duration::from_secs(10);

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

impl RedisLedger {
    /// Run `op` until it succeeds, fails for good, or [`RETRY_WINDOW`] has
    /// passed.
    pub(super) async fn retrying<T, F, Fut>(&self, what: &str, op: F) -> Result<T, StoreError>
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
}
