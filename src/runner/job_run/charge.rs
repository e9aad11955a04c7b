//! [`JobRun`]'s charging: each request's cost charged to the ledger before it
//! is sent, what a refusal, a lost log or an unreachable store mean for the
//! run, and the block an upstream's own "quota spent" answer sets.

use std::time::Duration;

use tracing::{error, warn};

use super::{Charged, JobRun};
use crate::config::{Step, StorePolicy};
use crate::error::FailClosed;
use crate::ledger::{
    At, BlockEnd, Charge, ChargeDecision, Ledger, Micros, StoreError, WouldRefuse,
};
use crate::runner::Stop;
use crate::timefmt::{fmt_duration, local_datetime};
use crate::{Error, Result};

/// The block an upstream's refusal sets when its wait is nothing (never
/// past the credential's longest window).
const MIN_BLOCK: Duration = Duration::from_secs(5);

impl JobRun<'_> {
    /// Charge one attempt of `step` before it is sent.
    pub(super) async fn charge(&self, step: &Step) -> Result<Charged> {
        let Some(store) = self.store else {
            self.count_unmetered(step, "the store was unreachable when the run started");
            return Ok(Charged::Go {
                at: None,
                receipt: None,
                remaining: Vec::new(),
            });
        };
        // No id of our own: every charge is new, and the Redis store gives
        // each one an id for its own resends (an id given here would only be
        // remembered, and in SQLite written, for nothing).
        let estimated: Vec<&str> = step.settle.iter().map(|s| s.pool.as_str()).collect();
        let charge = Charge {
            credential: &self.cred.name,
            cost: &step.cost,
            endpoint: &step.endpoint,
            job: &self.job.name,
            id: None,
            seen_serial: self.seen_serial(),
            observe: self.cred.observe,
            estimated: &estimated,
        };
        let decision = store.charge(&charge, At::StoreClock).await;
        if let Ok(d) = &decision {
            self.last_serial.set(Some((d.serial(), d.at())));
            if !self.history_checked.get() {
                self.check_history();
            }
        }
        match decision {
            Ok(ChargeDecision::Allowed {
                at,
                receipt,
                remaining,
                observed,
                ..
            }) => {
                if let Some(w) = observed {
                    self.observed(step, &w);
                }
                let mut report = self.report.borrow_mut();
                for c in &step.cost {
                    *report.units.entry(c.pool.name.clone()).or_default() += c.units;
                }
                Ok(Charged::Go {
                    at: Some(at),
                    receipt: Some(receipt),
                    remaining,
                })
            }
            Ok(ChargeDecision::Rejected {
                pool,
                per,
                retry_after,
                ..
            }) => Ok(Charged::Stop(Stop::QuotaSaidNo {
                pool,
                per,
                retry_after,
            })),
            Ok(ChargeDecision::LogLost {
                pool, since, until, ..
            }) => {
                let stop = Stop::LogLost {
                    credential: self.cred.name.clone(),
                    pool,
                    since,
                    until,
                };
                error!(job = self.job.name, "{stop}");
                Ok(Charged::Stop(stop))
            }
            Ok(ChargeDecision::Blocked { until, reason, .. }) => {
                Ok(Charged::Stop(Stop::Blocked { until, reason }))
            }
            Err(StoreError::Unavailable(e)) => match step.on_store_error {
                StorePolicy::FailClosed => Err(Error::StoreUnavailable {
                    store: self.ctx.store_id.clone(),
                    reason: e,
                    fail_closed: Some(FailClosed {
                        job: self.job.name.clone(),
                        endpoint: step.endpoint.clone(),
                        at_start: false,
                    }),
                }),
                StorePolicy::FailOpen => {
                    self.count_unmetered(step, &e);
                    Ok(Charged::Go {
                        at: None,
                        receipt: None,
                        remaining: Vec::new(),
                    })
                }
            },
            Err(StoreError::CostExceedsBudget {
                pool,
                units,
                budget,
            }) => Err(Error::Config {
                file: self.ctx.config.file.clone(),
                field: format!("endpoints.{}.cost.{pool}", step.endpoint),
                message: format!("{units} units can never fit a budget of {budget}"),
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// The most charges this host has seen the credential reach: this run's
    /// latest decision, else the history.
    fn seen_serial(&self) -> u64 {
        match (self.last_serial.get(), self.store) {
            (Some((serial, _)), _) => serial,
            (None, Some(store)) => self
                .ctx
                .history
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .seen(&store.identity(&self.ctx.store_id), &self.cred.name),
            (None, None) => 0,
        }
    }

    /// Observe mode: a call the ledger would have stopped, recorded and
    /// sent all the same.
    fn observed(&self, step: &Step, w: &WouldRefuse) {
        self.report.borrow_mut().observed_rejections += 1;
        let why = match w.per {
            Some(per) => format!(
                "the {} window of pool {} is full",
                fmt_duration(per),
                w.pool
            ),
            None => format!("the store lost the log of pool {}", w.pool),
        };
        warn!(
            job = self.job.name,
            "observe mode: {} would have been stopped here ({why}; it would fit in {}); sent and recorded all the same",
            step.endpoint,
            fmt_duration(w.retry_after)
        );
    }

    fn count_unmetered(&self, step: &Step, why: &str) {
        self.report.borrow_mut().unmetered += 1;
        if !self.warned_unmetered.get() {
            warn!(
                job = self.job.name,
                "UNMETERED: {why}; endpoint {} is fail_open, so requests go out without a charge",
                step.endpoint
            );
            self.warned_unmetered.set(true);
        }
    }

    /// The upstream said its own quota is spent: block the credential in
    /// the store (so every host stops) until it is back, and stop the run.
    pub(super) async fn upstream_exhausted(
        &self,
        status: u16,
        reason: String,
        retry_after: Option<Duration>,
        charged_at: Option<Micros>,
    ) {
        // (a bare 429: no wait, no word of a spent daily quota, usually a
        // short-term rate limit; see block_end)
        let bare = status == 429
            && retry_after.is_none()
            && !["quotaExceeded", "dailyLimitExceeded"].contains(&reason.as_str());
        let end = self.block_end(charged_at, retry_after, bare);
        let mut until = end.estimate();
        if let Some(store) = self.store {
            // Who set it, when and why: `status` shows this text.
            let when = charged_at.map_or_else(
                || crate::timefmt::rfc3339(chrono::Utc::now().timestamp_micros()),
                crate::timefmt::rfc3339,
            );
            let why = format!(
                "upstream {status} {reason} (job {}, {} pid {}, at {when})",
                self.job.name,
                crate::runner::hostname(),
                std::process::id()
            );
            match store
                .block(&self.cred.name, end, &why, At::StoreClock)
                .await
            {
                Ok(stored) => until = stored,
                Err(e) => warn!(
                    job = self.job.name,
                    "cannot mark the credential blocked: {e}"
                ),
            }
        }
        // (after the store's word: a backoff's length is the store's)
        warn!(
            job = self.job.name,
            "upstream answered {status} ({reason}): its own quota is spent; blocking credential {} until {}",
            self.cred.name,
            local_datetime(until)
        );
        self.stop(Stop::UpstreamExhausted { reason, until });
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
        // Never longer than the credential's longest window: an upstream
        // that says "for a century" (or overflows) must not stop every
        // later tick for good. `quota unblock` lifts a block sooner.
        let longest = self.cred.longest_window();
        match retry_after {
            Some(wait) if wait > longest => {
                warn!(
                    job = self.job.name,
                    "the upstream asked to wait {}; capped at the credential's longest window, {}",
                    fmt_duration(wait.min(Duration::from_secs(100 * 365 * 86_400))),
                    fmt_duration(longest)
                );
                BlockEnd::After(longest)
            }
            // (a wait of nothing, `Retry-After: 0` or a date already past,
            // still blocks a moment: the upstream has just refused, and the
            // run's next jobs on this credential would only meet the same)
            Some(wait) if wait.is_zero() => BlockEnd::After(MIN_BLOCK.min(longest)),
            Some(wait) => BlockEnd::After(wait),
            None if bare => {
                let windows = self.cred.pools.iter().flat_map(|p| &p.windows);
                let shortest = windows.map(|w| w.per).min().unwrap_or(longest);
                BlockEnd::Backoff { shortest, longest }
            }
            None => BlockEnd::After(longest),
        }
    }
}
