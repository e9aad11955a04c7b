//! [`RunLock`]: a job's run lock as a value that owns its life. Taking it
//! starts a task that renews it every third of its TTL; dropping the guard
//! stops the renewal (so a lock left behind expires by itself), and
//! [`RunLock::release`] gives it back at once. Only one run of a job is
//! active at a time, across hosts.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::ledger::{JobStore, LockOutcome, Store, StoreError};

/// How long a finished run waits to release its lock.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(3);

/// A held run lock, renewed in the background until released or dropped.
pub struct RunLock {
    store: Store,
    job: String,
    holder: String,
    /// Set by the renewal task when the lock was lost (it expired, and
    /// perhaps another run took it).
    lost: Arc<AtomicBool>,
    renewal: JoinHandle<()>,
}

impl RunLock {
    /// Take `job`'s lock for `ttl` as `holder`. `Ok(Err(busy))` when another
    /// holder has it.
    pub async fn take(
        store: &Store,
        job: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Result<Self, LockOutcome>, StoreError> {
        match store.take_lock(job, holder, ttl).await? {
            LockOutcome::Held => {}
            busy => return Ok(Err(busy)),
        }
        let lost = Arc::new(AtomicBool::new(false));
        let renewal = tokio::spawn(renew(
            store.clone(),
            job.to_string(),
            holder.to_string(),
            ttl,
            lost.clone(),
        ));
        Ok(Ok(Self {
            store: store.clone(),
            job: job.to_string(),
            holder: holder.to_string(),
            lost,
            renewal,
        }))
    }

    /// Whether the lock was lost while the run held it.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Stop renewing and give the lock back. Best effort, and brief: a lock
    /// that is not released expires by itself.
    pub async fn release(self) {
        self.renewal.abort();
        let job = &self.job;
        match tokio::time::timeout(RELEASE_TIMEOUT, self.store.release_lock(job, &self.holder))
            .await
        {
            Ok(Ok(_)) => debug!(job, "run lock released"),
            Ok(Err(e)) => warn!(
                job,
                "cannot release the run lock (it expires by itself): {e}"
            ),
            Err(_) => warn!(
                job,
                "releasing the run lock timed out (it expires by itself)"
            ),
        }
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        self.renewal.abort();
    }
}

/// Renew the lock every third of its TTL until it is lost or the task is
/// aborted; a store error is retried at the next renewal.
async fn renew(store: Store, job: String, holder: String, ttl: Duration, lost: Arc<AtomicBool>) {
    loop {
        tokio::time::sleep(ttl / 3).await;
        match store.renew_lock(&job, &holder, ttl).await {
            Ok(true) => debug!(job, "run lock renewed"),
            Ok(false) => {
                lost.store(true, Ordering::SeqCst);
                return;
            }
            Err(e) => warn!(job, "cannot renew the run lock: {e}"),
        }
    }
}
