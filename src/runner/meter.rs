//! [`Meter`]: a run's metering, apart from its loop. It owns what charging
//! needs (the store, the credential, the latest charge serial and the
//! history check it feeds, the unmetered warning) and does the ledger's
//! side of each request: the charge before it ([`Meter::charge`]), the
//! settle of its estimates and the upstream's own counts after it
//! (`settle.rs`), the block an upstream's "quota spent" sets (`block.rs`),
//! the limits the upstream announces (`announced.rs`) and the windows whose
//! limit is the upstream's (`learned.rs`).
//! It says what it charged and settled; the run counts it in its report.
//! Kept out of [`JobRun`](super::job_run) so that its decisions can be
//! tested against a real store without a run, an upstream or a page.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tracing::{error, warn};

use crate::config::{Credential, Step, StorePolicy};
use crate::error::FailClosed;
use crate::history::History;
use crate::ledger::{
    At, Charge, ChargeDecision, Ledger, Micros, PoolCost, Receipt, Remaining, Store, StoreError,
    WouldRefuse,
};
use crate::runner::Stop;
use crate::runner::upstream_limits::Announced;
use crate::timefmt::{fmt_duration, local_datetime};
use crate::upstream::quota_headers::AnnouncedLimit;
use crate::{Error, Result};

mod announced;
mod block;
mod learned;
mod settle;

pub(super) use self::settle::Settlement;

/// The metering of one run of one job on one credential.
pub(super) struct Meter<'a> {
    cred: &'a Credential,
    /// The job, as logs name it.
    job: &'a str,
    /// `None` when the run goes unmetered (store unreachable, every endpoint fail_open).
    store: Option<&'a Store>,
    /// The store as logs name it (the key of the history).
    store_id: &'a str,
    /// What this host has seen of each credential's log.
    history: &'a Mutex<History>,
    /// The configuration file, for a cost no budget can ever hold.
    config_file: &'a Path,
    /// The credential's charge serial and time of the latest decision.
    last_serial: Cell<Option<(u64, Micros)>>,
    /// Whether this run compared the serial with the history yet.
    history_checked: Cell<bool>,
    warned_unmetered: Cell<bool>,
    /// Pools whose upstream limit this run warned differs from theirs.
    limits_warned: RefCell<BTreeSet<String>>,
    /// Per pool, the upstream's limits this run kept in the store, and when.
    limits_kept: RefCell<BTreeMap<String, (Vec<AnnouncedLimit>, Instant)>>,
    /// What the upstream announced of each pool, for the windows whose
    /// limit is its (`learned.rs`): `None` until the run's first charge of one.
    learned: RefCell<Option<BTreeMap<String, Announced>>>,
    /// Held by the one request that learns a limit not known yet.
    learning: Arc<tokio::sync::Mutex<()>>,
    learning_guard: RefCell<Option<tokio::sync::OwnedMutexGuard<()>>>,
    /// A request that was to learn a limit was answered.
    learn_answered: Cell<bool>,
}

/// What the charge before a request said.
#[derive(Debug)]
pub(super) enum Charged<'s> {
    /// Recorded in the ledger: send it.
    Go {
        /// What was charged: the step's cost, estimates at their estimate.
        charged: &'s [PoolCost],
        /// The ledger's time of the charge (a reading of the store's clock).
        at: Micros,
        receipt: Receipt,
        /// What the ledger said is left in every window, after this call.
        remaining: Vec<Remaining>,
        /// Observe mode: the ledger would have stopped it (warned).
        observed: bool,
    },
    /// Send it without a charge: the store is unreachable and the
    /// endpoint fail_open (warned once a run).
    Unmetered,
    Stop(Stop),
}

impl<'a> Meter<'a> {
    pub(super) fn new(
        cred: &'a Credential,
        job: &'a str,
        store_id: &'a str,
        history: &'a Mutex<History>,
        config_file: &'a Path,
    ) -> Self {
        Self {
            cred,
            job,
            store: None,
            store_id,
            history,
            config_file,
            last_serial: Cell::new(None),
            history_checked: Cell::new(false),
            warned_unmetered: Cell::new(false),
            limits_warned: RefCell::default(),
            limits_kept: RefCell::default(),
            learned: RefCell::default(),
            learning: Arc::default(),
            learning_guard: RefCell::default(),
            learn_answered: Cell::new(false),
        }
    }

    /// The store the run charges in (and keeps its cursor in), unless it
    /// runs unmetered.
    pub(super) fn store(&self) -> Option<&'a Store> {
        self.store
    }

    /// Charge in `store` from now on.
    pub(super) fn hold(&mut self, store: &'a Store) {
        self.store = Some(store);
    }

    /// The store is unreachable (`why`) as the run starts, and every
    /// endpoint of the job is fail_open: the run goes on without charges.
    pub(super) fn go_unmetered(&mut self, why: &str) {
        warn!(
            job = self.job,
            "UNMETERED RUN: the store {} is unreachable ({why}); every endpoint of this job is fail_open, so it runs without charges, without its lock and from its first region",
            self.store_id
        );
        self.store = None;
        self.warned_unmetered.set(true);
    }

    /// Charge one attempt of `step` before it is sent.
    pub(super) async fn charge<'s>(&self, step: &'s Step) -> Result<Charged<'s>> {
        let Some(store) = self.store else {
            self.unmetered(step, "the store was unreachable when the run started");
            return Ok(Charged::Unmetered);
        };
        // No id of our own: every charge is new, and the Redis store gives
        // each one an id for its own resends (an id given here would only be
        // remembered, and in SQLite written, for nothing).
        let estimated: Vec<&str> = step.settle.iter().map(|s| s.pool.as_str()).collect();
        let learned = self.learned_cost(step).await?;
        let charge = Charge {
            credential: &self.cred.name,
            cost: learned.as_deref().unwrap_or(&step.cost),
            endpoint: &step.endpoint,
            job: self.job,
            id: None,
            seen_serial: self.seen_serial(),
            observe: self.cred.observe,
            estimated: &estimated,
            shares: Some(&self.cred.shares),
        };
        let decision = store.charge(&charge, At::StoreClock).await;
        if !matches!(decision, Ok(ChargeDecision::Allowed { .. })) {
            // (nothing sent: if it was to learn a limit, another will)
            self.learned_from(step, None);
        }
        if let Ok(d) = &decision {
            self.last_serial.set(Some((d.serial(), d.at())));
            if !self.history_checked.get() {
                self.check_history();
            }
        }
        match decision {
            Ok(decision) => Ok(self.decided(step, decision)),
            Err(e) => self.failed(step, e),
        }
    }

    /// What the ledger's decision on a charge of `step` means for the run.
    fn decided<'s>(&self, step: &'s Step, decision: ChargeDecision) -> Charged<'s> {
        match decision {
            ChargeDecision::Allowed {
                at,
                receipt,
                remaining,
                observed,
                ..
            } => {
                if let Some(w) = &observed {
                    self.observed(step, w);
                }
                Charged::Go {
                    charged: &step.cost,
                    at,
                    receipt,
                    remaining,
                    observed: observed.is_some(),
                }
            }
            ChargeDecision::Rejected {
                pool,
                per,
                retry_after,
                held,
                ..
            } => Charged::Stop(Stop::QuotaSaidNo {
                pool,
                per,
                retry_after,
                held,
            }),
            ChargeDecision::LogLost {
                pool, since, until, ..
            } => {
                let stop = Stop::LogLost {
                    credential: self.cred.name.clone(),
                    pool,
                    since,
                    until,
                };
                error!(job = self.job, "{stop}");
                Charged::Stop(stop)
            }
            ChargeDecision::Blocked { until, reason, .. } => {
                Charged::Stop(Stop::Blocked { until, reason })
            }
        }
    }

    /// A charge of `step` the store did not decide: unreachable (the
    /// endpoint's `on_store_error` says), or a cost no budget can hold.
    fn failed<'s>(&self, step: &'s Step, e: StoreError) -> Result<Charged<'s>> {
        match e {
            StoreError::Unavailable(e) => match step.on_store_error {
                StorePolicy::FailClosed => Err(Error::StoreUnavailable {
                    store: self.store_id.to_string(),
                    reason: e,
                    fail_closed: Some(FailClosed {
                        job: self.job.to_string(),
                        endpoint: step.endpoint.clone(),
                        at_start: false,
                    }),
                }),
                StorePolicy::FailOpen => {
                    self.unmetered(step, &e);
                    Ok(Charged::Unmetered)
                }
            },
            StoreError::CostExceedsBudget {
                pool,
                units,
                budget,
            } => Err(Error::Config {
                file: self.config_file.to_path_buf(),
                field: format!("endpoints.{}.cost.{pool}", step.endpoint),
                message: format!("{units} units can never fit a budget of {budget}"),
            }),
            e => Err(e.into()),
        }
    }

    /// The most charges this host has seen the credential reach: this run's
    /// latest decision, else the history.
    fn seen_serial(&self) -> u64 {
        match (self.last_serial.get(), self.store) {
            (Some((serial, _)), _) => serial,
            (None, Some(store)) => self
                .history
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .seen(&store.identity(self.store_id), &self.cred.name),
            (None, None) => 0,
        }
    }

    /// Compare the credential's charge serial, from the latest decision,
    /// with what this host saw before: a store that forgot the log is
    /// reported loudly at the run's first decision (before its request goes
    /// out); later calls (and the run's end) only keep the history up to date.
    pub(super) fn check_history(&self) {
        let Some((serial, now)) = self.last_serial.get() else {
            return;
        };
        let Some(store) = self.store else {
            return;
        };
        let keep = self.cred.longest_window().as_micros() as Micros;
        let mut history = self.history.lock().unwrap_or_else(|p| p.into_inner());
        let key = store.identity(self.store_id);
        let lost = history.check(&key, &self.cred.name, serial, now, keep);
        history.save();
        let first = !self.history_checked.replace(true);
        if let (Some(l), true) = (lost, first) {
            error!(
                job = self.job,
                "LOG LOST: the store has forgotten credential {}'s log: it had recorded {} charges, it reported {} on {}. \
                 The store now counts its pools as spent (LOG LOST per pool) until at most {}. {}.",
                self.cred.name,
                l.had,
                l.found,
                local_datetime(l.noticed_at),
                local_datetime(l.noticed_at + keep),
                store.lost_log_advice()
            );
        }
    }

    /// Observe mode: a call the ledger would have stopped, recorded and
    /// sent all the same.
    fn observed(&self, step: &Step, w: &WouldRefuse) {
        let why = match w.per {
            Some(per) => format!(
                "the {} window of pool {} is full",
                fmt_duration(per),
                w.pool
            ),
            None => format!("the store lost the log of pool {}", w.pool),
        };
        warn!(
            job = self.job,
            "observe mode: {} would have been stopped here ({why}; it would fit in {}); sent and recorded all the same",
            step.endpoint,
            fmt_duration(w.retry_after)
        );
    }

    fn unmetered(&self, step: &Step, why: &str) {
        if !self.warned_unmetered.replace(true) {
            warn!(
                job = self.job,
                "UNMETERED: {why}; endpoint {} is fail_open, so requests go out without a charge",
                step.endpoint
            );
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::config::{Config, Secrets};

    pub(in crate::runner) fn config(yaml_credential: &str) -> Config {
        let yaml = format!(
            r#"
credentials:
  main: {yaml_credential}
endpoints:
  e: {{ cost: 2 }}
  est: {{ cost: {{ units: {{ estimate: 5, actual: {{ header: X-Cost }} }} }} }}
jobs:
  j:
    credential: main
    steps:
      - endpoint: e
        request: {{ url: "http://127.0.0.1:9/a" }}
      - endpoint: est
        request: {{ url: "http://127.0.0.1:9/b" }}
    output: out
"#
        );
        Config::parse(Path::new("q.yaml"), &yaml, Secrets::Skip).unwrap()
    }

    /// A store of its own, in a temporary folder.
    pub(in crate::runner) fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let ledger = crate::ledger::EmbeddedLedger::open(&dir.path().join("q.db")).unwrap();
        (dir, Store::Embedded(ledger))
    }

    pub(in crate::runner) fn meter<'a>(
        config: &'a Config,
        store: Option<&'a Store>,
        history: &'a Mutex<History>,
    ) -> Meter<'a> {
        let job = &config.jobs[0];
        let mut m = Meter::new(
            config.credential(job),
            &job.name,
            "test-store",
            history,
            &config.file,
        );
        if let Some(store) = store {
            m.hold(store);
        }
        m
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    const FIVE_AN_HOUR: &str =
        "{ secret: { env: UNUSED }, pools: { units: [ { limit: 5, per: 1h } ] } }";

    #[test]
    fn a_charge_says_what_it_charged_until_the_window_is_full() {
        let config = config(FIVE_AN_HOUR);
        let (_dir, store) = store();
        let history = Mutex::new(History::in_memory());
        let m = meter(&config, Some(&store), &history);
        let step = &config.jobs[0].steps[0];
        runtime().block_on(async {
            for _ in 0..2 {
                match m.charge(step).await.unwrap() {
                    Charged::Go {
                        charged, observed, ..
                    } => {
                        let charged: Vec<_> = charged
                            .iter()
                            .map(|c| (c.pool.name.as_str(), c.units))
                            .collect();
                        assert_eq!((charged, observed), (vec![("units", 2)], false));
                    }
                    other => panic!("{other:?}"),
                }
            }
            // 4 of 5 spent: a third call of 2 does not fit.
            match m.charge(step).await.unwrap() {
                Charged::Stop(Stop::QuotaSaidNo { pool, .. }) => assert_eq!(pool, "units"),
                other => panic!("{other:?}"),
            }
        });
        // The first decision's serial went to the history; the latest
        // goes there at the run's end.
        let seen = |h: &Mutex<History>| {
            h.lock()
                .unwrap()
                .seen(&store.identity("test-store"), "main")
        };
        assert_eq!(seen(&history), 1);
        m.check_history();
        let seen = history
            .lock()
            .unwrap()
            .seen(&store.identity("test-store"), "main");
        assert_eq!(seen, 2);
    }

    #[test]
    fn observe_mode_charges_what_does_not_fit_and_says_so() {
        let config = config(
            "{ secret: { env: UNUSED }, mode: observe, pools: { units: [ { limit: 5, per: 1h } ] } }",
        );
        let (_dir, store) = store();
        let history = Mutex::new(History::in_memory());
        let m = meter(&config, Some(&store), &history);
        let step = &config.jobs[0].steps[0];
        let observed: Vec<bool> = runtime().block_on(async {
            let mut seen = Vec::new();
            for _ in 0..3 {
                match m.charge(step).await.unwrap() {
                    Charged::Go { observed, .. } => seen.push(observed),
                    other => panic!("{other:?}"),
                }
            }
            seen
        });
        assert_eq!(observed, [false, false, true]);
    }

    #[test]
    fn without_a_store_every_charge_goes_unmetered() {
        let config = config(FIVE_AN_HOUR);
        let history = Mutex::new(History::in_memory());
        let mut m = meter(&config, None, &history);
        m.go_unmetered("connection refused");
        let step = &config.jobs[0].steps[0];
        runtime().block_on(async {
            for _ in 0..10 {
                assert!(matches!(m.charge(step).await.unwrap(), Charged::Unmetered));
            }
        });
        assert!(m.store().is_none());
    }
}
