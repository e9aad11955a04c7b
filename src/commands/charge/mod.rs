//! `portion charge` and `portion exec`: one charge against the configured
//! ledger for a script that is not a YAML job (a shell loop, a Python
//! script, a vendor SDK), so that it spends the same key under the same
//! budget as the jobs. This module makes the charge (waiting for the units
//! with `--wait`); [`report`] says what was decided, [`exec`] runs a
//! command once admitted, [`cost`] reads `--cost`.

mod cost;
pub mod exec;
mod report;

use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, warn};

use crate::cli::{ChargeArgs, ChargeSpec};
use crate::commands::context;
use crate::config::{Config, Credential};
use crate::ledger::{At, Charge, ChargeDecision, Ledger, PoolCost, Store, StoreLocation};
use crate::timefmt::fmt_wait;
use crate::{Error, ExitStatus, Result};

/// The tags a charge is logged with when `--endpoint` is not given.
pub const DEFAULT_ENDPOINT_CHARGE: &str = "charge";
pub const DEFAULT_ENDPOINT_EXEC: &str = "exec";

/// The most characters a `--job` or `--endpoint` tag may take, as a job's
/// or an endpoint's name in the file: every tag is a row of `status` and a
/// label of its OpenMetrics, for as long as the log keeps the charge.
pub const MAX_TAG_CHARS: usize = 64;

/// A charge read from the command line and checked against the configuration.
pub struct Request<'a> {
    pub cred: &'a Credential,
    pub cost: Vec<PoolCost>,
    pub endpoint: String,
    pub job: String,
    pub wait: Option<Duration>,
}

/// What the ledger decided, and how long the command waited for it.
pub struct Outcome {
    pub decision: ChargeDecision,
    pub waited: Duration,
}

/// `portion charge`: charge once (or until admitted, within `--wait`); exit
/// 0 admitted, 75 refused.
pub async fn execute(
    config: &Config,
    location: &StoreLocation,
    args: &ChargeArgs,
) -> Result<ExitStatus> {
    let request = Request::read(config, &args.spec, DEFAULT_ENDPOINT_CHARGE)?;
    let store = context::open(location).await?;
    let store_name = context::store_name(location);
    let outcome = decide(&store, &store_name, &request).await?;
    if !outcome.decision.is_allowed() {
        report::refused(&request, &outcome);
    }
    if args.json {
        report::json(&store, &request, &outcome).await?;
    }
    Ok(if outcome.decision.is_allowed() {
        ExitStatus::OK
    } else {
        ExitStatus::STOPPED
    })
}

impl<'a> Request<'a> {
    /// The credential, cost and tags `spec` names, checked: a configuration
    /// error (78) for an unknown pool, or a cost that is not a positive
    /// number or can never fit; a usage error (2) for an unknown credential
    /// or a tag no report could show.
    pub fn read(config: &'a Config, spec: &ChargeSpec, default_endpoint: &str) -> Result<Self> {
        let cred = config.credential_named(&spec.credential)?;
        let cost = cost::parse(config, cred, &spec.cost)?;
        let endpoint = spec
            .endpoint
            .clone()
            .unwrap_or_else(|| default_endpoint.to_string());
        for (flag, tag) in [("--endpoint", &endpoint), ("--job", &spec.job)] {
            if tag.is_empty() || tag.chars().any(crate::logging::is_hidden) {
                return Err(Error::Usage(format!(
                    "{flag}: '{}' is not a name: it must be non-empty, without control or bidirectional characters",
                    tag.escape_debug()
                )));
            }
            let chars = tag.chars().count();
            if chars > MAX_TAG_CHARS {
                return Err(Error::Usage(format!(
                    "{flag}: a tag of {chars} characters is too long: at most {MAX_TAG_CHARS}"
                )));
            }
        }
        share_fits(config, cred, &spec.job, &cost)?;
        Ok(Self {
            cred,
            cost,
            endpoint,
            job: spec.job.clone(),
            wait: spec.wait,
        })
    }
}

/// A cost above the limit of `job`'s share in any window can never fit:
/// a configuration error (78), as a cost above a budget is.
fn share_fits(config: &Config, cred: &Credential, job: &str, cost: &[PoolCost]) -> Result<()> {
    let Some((share, limit)) = (cred.shares.of(job)).and_then(|s| Some((s, s.limit?))) else {
        return Ok(());
    };
    for c in cost {
        for w in &c.pool.windows {
            if c.units > limit.of(w.budget()) {
                return Err(Error::Config {
                    file: config.file.clone(),
                    field: format!("--cost (credential {}, --job {job})", cred.name),
                    message: format!(
                        "{} units of pool {} can never fit: share {}'s limit is {} units of its {} window",
                        c.units,
                        c.pool.name,
                        share.name,
                        limit.of(w.budget()),
                        crate::timefmt::fmt_window(w.per)
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Charge `request`; with `--wait D`, while refused and the ledger says the
/// units free up before D has passed, sleep until then and charge again.
pub async fn decide(store: &Store, store_name: &str, request: &Request<'_>) -> Result<Outcome> {
    // (a `--wait` past what an Instant can hold waits as long as needed)
    let deadline = request.wait.map(|w| Instant::now().checked_add(w));
    let mut waited = Duration::ZERO;
    // What this host has seen the credential's log reach (`history.json`,
    // kept by runs): a store that reports fewer charges has lost the log,
    // and the ledger answers LOG LOST. Read only, so a charge stays cheap.
    let seen_serial =
        crate::history::History::open().seen(&store.identity(store_name), &request.cred.name);
    let charge = Charge {
        credential: &request.cred.name,
        cost: &request.cost,
        endpoint: &request.endpoint,
        job: &request.job,
        id: None,
        seen_serial,
        // (an observe-mode credential records what does not fit, and says so)
        observe: request.cred.observe,
        estimated: &[],
        shares: Some(&request.cred.shares),
    };
    loop {
        let decision = store
            .charge(&charge, At::StoreClock)
            .await
            .map_err(|e| context::store_error(store_name, e))?;
        if let ChargeDecision::Allowed {
            observed: Some(w), ..
        } = &decision
        {
            warn!(
                "observe mode: credential {} would have refused this charge (pool {}; it would fit in {}); recorded all the same",
                request.cred.name,
                w.pool,
                fmt_wait(w.retry_after)
            );
        }
        let pause = match (free_in(&decision), deadline) {
            (Some(pause), Some(deadline))
                if deadline
                    .is_none_or(|d| Instant::now().checked_add(pause).is_some_and(|t| t <= d)) =>
            {
                pause
            }
            _ => return Ok(Outcome { decision, waited }),
        };
        debug!(
            "credential {}: refused; waiting {} for the units",
            request.cred.name,
            fmt_wait(pause)
        );
        let slept = Instant::now();
        tokio::time::sleep(pause).await;
        waited += slept.elapsed();
    }
}

/// How long until a refused charge may fit, as the ledger says (a block or
/// a lost log as well as a full window); `None` when it was admitted.
/// Never zero, so that a wait cannot spin.
fn free_in(decision: &ChargeDecision) -> Option<Duration> {
    let micros = |from: i64, to: i64| Duration::from_micros(to.saturating_sub(from).max(0) as u64);
    let wait = match decision {
        ChargeDecision::Allowed { .. } => return None,
        ChargeDecision::Rejected { retry_after, .. } => *retry_after,
        ChargeDecision::Blocked { at, until, .. } => micros(*at, *until),
        ChargeDecision::LogLost { at, until, .. } => micros(*at, *until),
    };
    Some(wait.max(Duration::from_millis(1)))
}
