//! The [`Meter`] when an answer announces the upstream's own limit
//! (`upstream_headers`: `X-RateLimit-Limit`, `RateLimit-Policy`, …): one
//! the pool's windows do not say is warned about once a run, naming both,
//! rather than dropped in a DEBUG line; and what it announces is kept in
//! the store with when it was seen, for `portion status` and every host.

use std::time::{Duration, Instant};

use reqwest::header::HeaderMap;
use tracing::{debug, warn};

use super::Meter;
use crate::runner::upstream_limits::{self, Announced, differs, pool_says, upstream_says};
use crate::upstream::quota_headers::announced_limits;

/// How often a run keeps the same announcement again (its time seen moves
/// on): a store call a minute per pool, not one per request.
const KEEP_AGAIN: Duration = Duration::from_secs(60);

impl Meter<'_> {
    /// Read the limits `headers` announce for the credential's pools: warn
    /// once a run per pool of one its windows do not say, and keep each in
    /// the store when it changed since this run kept it (or a minute on).
    pub(super) async fn announced(&self, headers: &HeaderMap) {
        let Some(store) = self.store else {
            return;
        };
        let announced = announced_limits(&self.cred.upstream_headers, headers);
        let seen = self
            .last_serial
            .get()
            .map_or_else(|| chrono::Utc::now().timestamp_micros(), |(_, at)| at);
        self.learn(
            (announced.iter())
                .map(|(name, limits)| {
                    let limits = limits.clone();
                    (name.clone(), Announced { limits, seen })
                })
                .collect(),
        );
        // (a learned window as learned: the cap is what may differ)
        let pools = self.pools();
        for (name, limits) in announced {
            let Some(pool) = pools.iter().find(|p| p.name == name) else {
                continue;
            };
            if differs(pool.windows.iter(), &limits)
                && self.limits_warned.borrow_mut().insert(name.clone())
            {
                warn!(
                    job = self.job,
                    "the upstream says {}; pool {} says {} (the pool's budget stands; `portion status` shows both)",
                    upstream_says(&limits),
                    pool.name,
                    pool_says(pool.windows.iter())
                );
            }
            let due = self
                .limits_kept
                .borrow()
                .get(&name)
                .is_none_or(|(kept, at)| *kept != limits || at.elapsed() >= KEEP_AGAIN);
            if !due {
                continue;
            }
            // (seen: the latest charge's time, on the store's clock: this answer's)
            let announced = Announced {
                limits: limits.clone(),
                seen,
            };
            match upstream_limits::keep(store, &self.cred.name, &name, &announced).await {
                Ok(()) => {
                    self.limits_kept
                        .borrow_mut()
                        .insert(name, (limits, Instant::now()));
                }
                Err(e) => debug!(
                    job = self.job,
                    "the upstream's limits of {name} were not kept: {e}"
                ),
            }
        }
    }
}
