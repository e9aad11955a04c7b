//! What `portion charge` and `portion exec` say about a decision: the reason a
//! charge was refused and when the units free up (a warning on stderr, as
//! runs say it), and `portion charge --json`'s document, whose field names
//! are stable (README, "portion charge and portion exec").

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use tracing::warn;

use super::{Outcome, Request};
use crate::commands::table::emit;
use crate::ledger::{At, ChargeDecision, Ledger, Micros, Store};
use crate::runner::Stop;
use crate::timefmt::{
    PRECISE_BELOW, clock_time, fmt_retry, fmt_wait, fmt_window, local_time, rfc3339,
};
use crate::{Error, ExitStatus, Result};

/// The refusal, on stderr: why, and when the units free up.
pub fn refused(request: &Request<'_>, outcome: &Outcome) {
    let cred = &request.cred.name;
    let why = reason(request, &outcome.decision);
    match (request.wait, free_at(&outcome.decision)) {
        (Some(wait), Some(_)) => warn!(
            "credential {cred}: charge refused: {why}; --wait {} ends before that",
            fmt_wait(wait)
        ),
        _ => warn!("credential {cred}: charge refused: {why}"),
    }
}

/// Why a charge was refused, and when it may fit ("" when admitted).
fn reason(request: &Request<'_>, decision: &ChargeDecision) -> String {
    match decision {
        ChargeDecision::Allowed { .. } => String::new(),
        ChargeDecision::Rejected {
            at,
            pool,
            per,
            retry_after,
            held,
            ..
        } => format!(
            "the {} window of pool '{pool}' is {}; units free up in {} (at {})",
            fmt_window(*per),
            crate::runner::held_text(held.as_ref()),
            fmt_retry(*retry_after),
            if *retry_after < PRECISE_BELOW {
                precise_time(at + micros(*retry_after))
            } else {
                local_time(at + micros(*retry_after), *at)
            }
        ),
        // (The reason is the store's text: another build may have stored
        // it raw.)
        ChargeDecision::Blocked { until, reason, .. } => Stop::Blocked {
            until: *until,
            reason: crate::logging::printable(reason).into_owned(),
        }
        .to_string(),
        ChargeDecision::LogLost {
            pool, since, until, ..
        } => Stop::LogLost {
            credential: request.cred.name.clone(),
            pool: pool.clone(),
            since: *since,
            until: *until,
        }
        .to_string(),
    }
}

/// A local time of day to the tenth of a second (a wait under
/// [`PRECISE_BELOW`] ends the same day, or the next: the time says which).
fn precise_time(us: Micros) -> String {
    chrono::DateTime::from_timestamp_micros(us)
        .map(|t| clock_time(&t.with_timezone(&chrono::Local), true))
        .unwrap_or_else(|| us.to_string())
}

/// When a refused charge may fit, on the store's clock.
fn free_at(decision: &ChargeDecision) -> Option<Micros> {
    match decision {
        ChargeDecision::Allowed { .. } => None,
        ChargeDecision::Rejected {
            at, retry_after, ..
        } => Some(at + micros(*retry_after)),
        ChargeDecision::Blocked { until, .. } | ChargeDecision::LogLost { until, .. } => {
            Some(*until)
        }
    }
}

fn micros(d: Duration) -> Micros {
    d.as_micros().min(i64::MAX as u128) as Micros
}

/// `portion charge --json`: the decision and what remains.
#[derive(Serialize)]
pub struct ChargeJson {
    /// `admitted`, `rejected`, `blocked` or `log_lost`.
    pub decision: &'static str,
    pub admitted: bool,
    pub credential: String,
    pub endpoint: String,
    pub job: String,
    /// Units charged (or asked for) per pool.
    pub cost: BTreeMap<String, u64>,
    /// The decision's time on the store's clock (RFC 3339, UTC).
    pub at: String,
    /// Charges the credential has recorded, this one included when admitted.
    pub charges_recorded: u64,
    /// How long `--wait` waited before this decision.
    pub waited_ms: u64,
    /// Refused: how long until it may fit, and when (else null).
    pub retry_after_ms: Option<u64>,
    pub retry_at: Option<String>,
    /// Refused: why, as stderr says it (else null).
    pub reason: Option<String>,
    /// Rejected: the window that is full (else null).
    pub full: Option<ChargeWindowJson>,
    /// Per window of every pool charged: its budget and what remains of it.
    pub remaining: Vec<RemainingJson>,
    /// Admitted by an observe-mode credential although it did not fit: the
    /// window that would have refused it (null: the pool's log was lost)
    /// and when it would have fitted (else null).
    pub observed: Option<ObservedJson>,
}

#[derive(Serialize)]
pub struct ObservedJson {
    pub pool: String,
    pub window: Option<String>,
    pub per_seconds: Option<u64>,
    pub retry_after_ms: u64,
}

#[derive(Serialize)]
pub struct ChargeWindowJson {
    pub pool: String,
    /// The window as the configuration writes it (`1h`, `1s500ms`).
    pub window: String,
    pub per_seconds: u64,
}

#[derive(Serialize)]
pub struct RemainingJson {
    pub pool: String,
    pub window: String,
    pub per_seconds: u64,
    pub budget: u64,
    pub remaining: u64,
}

/// Print the JSON document of `outcome` on stdout. What remains comes with
/// an admitted decision; a refused one reads it from the store.
pub async fn json(store: &Store, request: &Request<'_>, outcome: &Outcome) -> Result<ExitStatus> {
    let d = &outcome.decision;
    let free_at = free_at(d);
    let doc = ChargeJson {
        decision: match d {
            ChargeDecision::Allowed { .. } => "admitted",
            ChargeDecision::Rejected { .. } => "rejected",
            ChargeDecision::Blocked { .. } => "blocked",
            ChargeDecision::LogLost { .. } => "log_lost",
        },
        admitted: d.is_allowed(),
        credential: request.cred.name.clone(),
        endpoint: request.endpoint.clone(),
        job: request.job.clone(),
        cost: request
            .cost
            .iter()
            .map(|c| (c.pool.name.clone(), c.units))
            .collect(),
        at: rfc3339(d.at()),
        charges_recorded: d.serial(),
        waited_ms: outcome.waited.as_millis() as u64,
        retry_after_ms: free_at.map(|t| ((t - d.at()).max(0) as u64).div_ceil(1000)),
        retry_at: free_at.map(rfc3339),
        reason: free_at.map(|_| reason(request, d)),
        full: match d {
            ChargeDecision::Rejected { pool, per, .. } => Some(ChargeWindowJson {
                pool: pool.clone(),
                window: fmt_window(*per),
                per_seconds: per.as_secs(),
            }),
            _ => None,
        },
        remaining: remaining(store, request, d).await?,
        observed: match d {
            ChargeDecision::Allowed {
                observed: Some(w), ..
            } => Some(ObservedJson {
                pool: w.pool.clone(),
                window: w.per.map(fmt_window),
                per_seconds: w.per.map(|p| p.as_secs()),
                // (rounded up, as the refusal's own retry_after_ms)
                retry_after_ms: (w.retry_after.as_micros() as u64).div_ceil(1000),
            }),
            _ => None,
        },
    };
    let text = serde_json::to_string_pretty(&doc).expect("a charge report serializes");
    emit(&(text + "\n"))
}

/// What remains per window of the pools charged: from an admitted
/// decision, else read from the store.
async fn remaining(
    store: &Store,
    request: &Request<'_>,
    decision: &ChargeDecision,
) -> Result<Vec<RemainingJson>> {
    let budget = |pool: &str, per: Duration| {
        request
            .cost
            .iter()
            .filter(|c| c.pool.name == pool)
            .flat_map(|c| &c.pool.windows)
            .find(|w| w.per == per)
            .map_or(0, |w| w.budget())
    };
    if let ChargeDecision::Allowed { remaining, .. } = decision {
        return Ok(remaining
            .iter()
            .map(|r| RemainingJson {
                pool: r.pool.clone(),
                window: fmt_window(r.per),
                per_seconds: r.per.as_secs(),
                budget: budget(&r.pool, r.per),
                remaining: r.remaining,
            })
            .collect());
    }
    let pools: Vec<_> = request.cost.iter().map(|c| c.pool.clone()).collect();
    let usage = store
        .usage(&request.cred.name, &pools, At::StoreClock)
        .await
        .map_err(Error::from)?;
    Ok(usage
        .pools
        .iter()
        .flat_map(|p| {
            p.windows.iter().map(|w| RemainingJson {
                pool: p.pool.clone(),
                window: fmt_window(w.window.per),
                per_seconds: w.window.per.as_secs(),
                budget: w.budget,
                remaining: w.remaining,
            })
        })
        .collect())
}
