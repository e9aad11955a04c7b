//! The [`Meter`] for a pool whose limit is the upstream's (`{ from:
//! upstream, per: 1m }`): each charge of it is made against the limit the
//! upstream last announced for that window (read from the store at the
//! run's first charge, so every host uses the same; then from this run's
//! answers as they come), capped by a `limit` beside it. Until one is
//! known the run sends one request to learn it: the others wait for its
//! answer, and one that announced nothing for the window ends the run
//! with an error naming the field.

use std::collections::BTreeMap;

use reqwest::header::HeaderMap;

use super::Meter;
use crate::config::Step;
use crate::ledger::{Pool, PoolCost};
use crate::runner::upstream_limits::{self, Announced, learned_limit, with_learned};
use crate::{Error, Result};

impl Meter<'_> {
    /// The credential's pools, each learned window at what the upstream
    /// last announced (the YAML's pools when none is learned).
    pub(super) fn pools(&self) -> Vec<Pool> {
        match &*self.learned.borrow() {
            Some(announced) if !self.cred.learned.is_empty() => with_learned(self.cred, announced),
            _ => self.cred.pools.clone(),
        }
    }

    /// `step`'s cost with its learned windows' limits (`None`: it charges
    /// no learned window, or the run has no store); an error when the
    /// upstream answered without announcing one.
    pub(super) async fn learned_cost(&self, step: &Step) -> Result<Option<Vec<PoolCost>>> {
        let cred = self.cred;
        let learns = |c: &PoolCost| cred.learned.iter().any(|l| l.pool == c.pool.name);
        let Some(store) = self.store.filter(|_| step.cost.iter().any(learns)) else {
            return Ok(None);
        };
        if self.learned.borrow().is_none() {
            // (a store that does not answer: learned again, and the charge
            // itself says what the store said)
            let read = upstream_limits::read(store, &cred.name).await;
            *self.learned.borrow_mut() = Some(read.unwrap_or_default());
        }
        if self.unknown(step).is_some() {
            // One request learns it; the others wait for its answer.
            let guard = self.learning.clone().lock_owned().await;
            if let Some(lw) = self.unknown(step) {
                if self.learn_answered.get() {
                    let field = format!("credentials.{}.pools.{}[{}].from", cred.name, lw.0, lw.1);
                    return Err(Error::Config {
                        file: self.config_file.to_path_buf(),
                        field,
                        message: format!(
                            "the upstream's answer announced no limit of a {} window for pool {} (upstream_headers names the headers it is read from): name a limit instead",
                            crate::timefmt::fmt_window(lw.2),
                            lw.0
                        ),
                    });
                }
                *self.learning_guard.borrow_mut() = Some(guard);
            }
        }
        let pools = self.pools();
        Ok(Some(
            (step.cost.iter())
                .map(|c| PoolCost {
                    pool: (pools.iter().find(|p| p.name == c.pool.name))
                        .cloned()
                        .unwrap_or_else(|| c.pool.clone()),
                    units: c.units,
                })
                .collect(),
        ))
    }

    /// The first learned window `step` charges whose limit is not known:
    /// its pool, place and length.
    fn unknown(&self, step: &Step) -> Option<(String, usize, std::time::Duration)> {
        let learned = self.learned.borrow();
        let announced = learned.as_ref()?;
        (self.cred.learned.iter())
            .filter(|l| step.cost.iter().any(|c| c.pool.name == l.pool))
            .find(|l| learned_limit(self.cred, l, announced).is_none())
            .map(|l| (l.pool.clone(), l.index, l.per))
    }

    /// What an answer announced of each pool, for the charges after it.
    pub(super) fn learn(&self, announced: BTreeMap<String, Announced>) {
        if let Some(known) = self.learned.borrow_mut().as_mut() {
            known.extend(announced);
        }
    }

    /// A request of `step` is over: when it was the one that learns a
    /// limit (while one is learned, no other request of a learned pool is
    /// charged, so a step that charges one is it), answered (`headers`:
    /// the next charge knows, or learns that nothing was announced), or
    /// not (no answer, abandoned, refused: the next request learns it).
    pub(super) fn learned_from(&self, step: &Step, headers: Option<&HeaderMap>) {
        let learns = |c: &PoolCost| self.cred.learned.iter().any(|l| l.pool == c.pool.name);
        if !step.cost.iter().any(learns) {
            return;
        }
        if let Some(guard) = self.learning_guard.borrow_mut().take() {
            if headers.is_some() {
                self.learn_answered.set(true);
            }
            drop(guard);
        }
    }
}
