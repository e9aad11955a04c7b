//! The [`Meter`] when the upstream says its own quota is spent: the block
//! set in the store (so that every host stops), and how long it lasts;
//! by a refusal, or by an answer whose counts say nothing remains (a 200
//! with `X-RateLimit-Remaining: 0`), before the refusal that would follow.

use std::time::Duration;

use tracing::warn;

use super::Meter;
use crate::ledger::{At, BlockEnd, Ledger, Micros};
use crate::timefmt::fmt_duration;

/// The block an upstream's refusal sets when its wait is nothing (never
/// past the credential's longest window).
const MIN_BLOCK: Duration = Duration::from_secs(5);

impl Meter<'_> {
    /// Block the credential in the store until the upstream's quota is
    /// back (`status` and `reason`: its answer; `charged_at`: the refused
    /// call's charge, on the store's clock): when that is, as the store set
    /// it, else as estimated here.
    pub(in crate::runner) async fn block(
        &self,
        status: u16,
        reason: &str,
        retry_after: Option<Duration>,
        charged_at: Option<Micros>,
    ) -> Micros {
        // (see block_end)
        let bare = crate::upstream::bare_rate_limit(status, reason, retry_after);
        let end = self.block_end(charged_at, retry_after, bare);
        self.set_block(status, reason, end, charged_at).await
    }

    /// An answer that is no refusal (`reported`), whose counts say nothing
    /// remains: GitHub's `X-RateLimit-Remaining: 0`, OpenAI's
    /// `x-ratelimit-remaining-requests: 0` (or `-tokens`), the IETF
    /// `RateLimit`'s `r=0` or `RateLimit-Remaining: 0`. The next request
    /// would be refused (and the window-boundary one, charged here just
    /// before the upstream's count frees, is), so the credential is blocked
    /// until the count's reset, whatever the pools' limits: the next
    /// charge, on any host, stops. Unmetered, nothing is blocked (no store):
    /// the upstream's refusal does it. The block's end, when one was set.
    pub(in crate::runner) async fn upstream_spent(
        &self,
        reported: &crate::upstream::Reported,
        charged_at: Option<Micros>,
    ) -> Option<Micros> {
        let (Some(_), Some(headers), Some(status)) =
            (self.store, &reported.headers, reported.status)
        else {
            return None;
        };
        let quota = crate::upstream::quota_headers::QuotaHeaders::read(headers);
        let said = quota.said?;
        // (the count names its own reset: that, not a calendar period's end)
        let end = match quota.wait {
            Some(wait) => self.waited(wait),
            None => self.block_end(charged_at, None, false),
        };
        let until = self.set_block(status, said, end, charged_at).await;
        warn!(
            job = self.job,
            "the upstream answered {status} with {said}: nothing remains of its own quota; credential {} blocked until {} (no request goes out before)",
            self.cred.name,
            crate::timefmt::local_datetime(until)
        );
        Some(until)
    }

    /// Set the block `end` in the store, its reason the answer's `status`
    /// and `reason`: when it ends, as the store set it, else as estimated.
    async fn set_block(
        &self,
        status: u16,
        reason: &str,
        end: BlockEnd,
        charged_at: Option<Micros>,
    ) -> Micros {
        let mut until = end.estimate();
        if let Some(store) = self.store {
            // Who set it, when and why: `status` shows this text.
            let when = charged_at.map_or_else(
                || crate::timefmt::rfc3339(chrono::Utc::now().timestamp_micros()),
                crate::timefmt::rfc3339,
            );
            let why = format!(
                "upstream {status} {reason} (job {}, {} pid {}, at {when})",
                self.job,
                crate::runner::hostname(),
                std::process::id()
            );
            match store
                .block(&self.cred.name, end, &why, At::StoreClock)
                .await
            {
                Ok(stored) => until = stored,
                Err(e) => warn!(job = self.job, "cannot mark the credential blocked: {e}"),
            }
        }
        until
    }

    /// When the upstream's quota is back, on the store's clock: its next
    /// reset after the charge's time (a reading of the store's clock), else,
    /// with a calendar window and no `upstream_reset`, the end of its period
    /// (the longest one's), else what it said (a duration from the store's
    /// now), else, for a `bare` 429, the credential's shortest window,
    /// doubling with each repeat up to its longest (the store keeps the
    /// previous one's length: see [`BlockEnd::Backoff`]), else the end of
    /// the credential's longest window. The host's clock is never compared.
    fn block_end(
        &self,
        charged_at: Option<Micros>,
        retry_after: Option<Duration>,
        bare: bool,
    ) -> BlockEnd {
        let calendar = self
            .cred
            .pools
            .iter()
            .flat_map(|p| &p.windows)
            .filter(|w| w.aligned.is_some())
            .max_by_key(|w| w.per);
        if self.cred.upstream_reset.is_none()
            && let (Some(w), Some(at)) = (calendar, charged_at)
            && let Some(tz) = w.aligned
        {
            let per = w.per.as_micros() as Micros;
            return BlockEnd::At(crate::ledger::calendar::period(tz, per, at).1);
        }
        if let Some(reset) = &self.cred.upstream_reset {
            return match charged_at.and_then(chrono::DateTime::from_timestamp_micros) {
                Some(at) => BlockEnd::At(reset.next_after(at).timestamp_micros()),
                // Unmetered (no reading of the store's clock): the wait as
                // this host sees it, a duration all the same.
                None => {
                    let now = chrono::Utc::now();
                    BlockEnd::After((reset.next_after(now) - now).to_std().unwrap_or_default())
                }
            };
        }
        match retry_after {
            Some(wait) => self.waited(wait),
            None if bare => {
                let longest = self.cred.longest_window();
                let windows = self.cred.pools.iter().flat_map(|p| &p.windows);
                let shortest = windows.map(|w| w.per).min().unwrap_or(longest);
                BlockEnd::Backoff { shortest, longest }
            }
            None => BlockEnd::After(self.cred.longest_window()),
        }
    }

    /// A block of the `wait` the upstream said.
    fn waited(&self, wait: Duration) -> BlockEnd {
        // Never longer than the credential's longest window: an upstream
        // that says "for a century" (or overflows) must not stop every
        // later tick for good. `portion unblock` lifts a block sooner.
        let longest = self.cred.longest_window();
        match wait {
            wait if wait > longest => {
                warn!(
                    job = self.job,
                    "the upstream asked to wait {}; capped at the credential's longest window, {}",
                    fmt_duration(wait.min(Duration::from_secs(100 * 365 * 86_400))),
                    fmt_duration(longest)
                );
                BlockEnd::After(longest)
            }
            // (a wait of nothing, `Retry-After: 0` or a date already past,
            // still blocks a moment: the upstream has just refused, and the
            // run's next jobs on this credential would only meet the same)
            wait if wait.is_zero() => BlockEnd::After(MIN_BLOCK.min(longest)),
            wait => BlockEnd::After(wait),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::history::History;
    use crate::runner::meter::tests::{config, meter};

    #[test]
    fn a_block_is_never_past_the_longest_window_and_never_nothing() {
        let config = config(
            "{ secret: { env: UNUSED }, pools: { units: [ { limit: 5, per: 1m }, { limit: 50, per: 1h } ] } }",
        );
        let history = Mutex::new(History::in_memory());
        let m = meter(&config, None, &history);
        let (hour, minute) = (Duration::from_secs(3600), Duration::from_secs(60));
        let end = |wait, bare| m.block_end(Some(0), wait, bare);
        let century = Duration::from_secs(100 * 365 * 86_400);
        assert_eq!(end(Some(century), false), BlockEnd::After(hour));
        assert_eq!(end(Some(Duration::ZERO), false), BlockEnd::After(MIN_BLOCK));
        assert_eq!(end(Some(minute), false), BlockEnd::After(minute));
        assert_eq!(
            end(None, true),
            BlockEnd::Backoff {
                shortest: minute,
                longest: hour
            }
        );
        assert_eq!(end(None, false), BlockEnd::After(hour));
    }
}
