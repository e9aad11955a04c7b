//! [`Shutdown`]: the stop signal (SIGTERM, SIGINT) as the runner sees it,
//! a flag checked at every safe point and a future that resolves when it is
//! set, so a request in flight can be abandoned.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// Set once a stop signal (SIGTERM, SIGINT) arrives; the runner stops at
/// the next safe point, abandoning a request in flight.
#[derive(Clone, Default)]
pub struct Shutdown {
    flag: Arc<AtomicBool>,
    notify: Arc<Notify>,
}

impl Shutdown {
    pub fn trigger(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Resolves once a stop was asked for.
    pub async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }
}
