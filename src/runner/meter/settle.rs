//! The [`Meter`] after an answer: the costs a step reserved as estimates
//! settled to what the response says was spent (issue 13, part 1), or
//! kept at their estimates, and why; and the upstream's own counts, where
//! they are lower than the ledger's, recorded as spent by others (part 2).

use tracing::{debug, info, warn};

use super::Meter;
use crate::config::Step;
use crate::ledger::{At, BlockEnd, Ledger, Receipt, Remaining, Settled};
use crate::timefmt::local_datetime;
use crate::upstream::Reported;
use crate::upstream::quota_headers::upstream_counts;
use crate::upstream::settle::Actual;

/// What a settle did to a call's estimates.
#[derive(Debug, Default, PartialEq, Eq)]
pub(in crate::runner) struct Settlement<'s> {
    /// Per pool settled: its estimate, and what now stands for it.
    pub spent: Vec<(&'s str, u64, u64)>,
    /// Estimates that stay charged (each warned, with why).
    pub kept: u64,
}

impl Meter<'_> {
    /// Settle the step's estimated costs of the call `receipt` names to the
    /// `actuals` its response gave (none: no response came).
    pub(in crate::runner) async fn settle<'s>(
        &self,
        step: &'s Step,
        receipt: &Receipt,
        actuals: &[Actual],
    ) -> Settlement<'s> {
        let mut done = Settlement::default();
        let Some(store) = self.store else {
            return done;
        };
        for (k, spec) in step.settle.iter().enumerate() {
            let actual = match actuals.get(k) {
                Some(Actual::Units(n)) => *n,
                unknown => {
                    let why = match unknown {
                        Some(Actual::Unreadable(why)) => why.as_str(),
                        _ => "no response came",
                    };
                    done.kept += self.keep_estimate(step, &spec.pool, spec.estimate, why);
                    // (settled at the estimate: no longer reserved, as
                    // `status` shows those whose settle never came)
                    let cost = (spec.pool.as_str(), spec.estimate, spec.estimate);
                    let _ = store
                        .settle(&self.cred.name, receipt, cost, At::StoreClock)
                        .await;
                    continue;
                }
            };
            let cost = (spec.pool.as_str(), spec.estimate, actual);
            let settled = store
                .settle(&self.cred.name, receipt, cost, At::StoreClock)
                .await;
            let spent = match settled {
                Ok(Settled::Exact) => {
                    debug!(
                        job = self.job,
                        "{}: {} settled from {} to {actual}",
                        step.endpoint,
                        spec.pool,
                        spec.estimate
                    );
                    actual
                }
                Ok(Settled::Late) => {
                    warn!(
                        job = self.job,
                        "{}: {} spent {actual} against an estimate of {}, settled late (thousands of calls charged since): {}",
                        step.endpoint,
                        spec.pool,
                        spec.estimate,
                        if actual > spec.estimate {
                            "the excess counts from the newest call"
                        } else {
                            "the estimate stays charged"
                        }
                    );
                    actual.max(spec.estimate)
                }
                Ok(Settled::Gone) => {
                    let why = "its charge is no longer in the log (lost, or past the retention)";
                    done.kept += self.keep_estimate(step, &spec.pool, spec.estimate, why);
                    continue;
                }
                Err(e) => {
                    let why = format!("the store did not take the settle: {e}");
                    done.kept += self.keep_estimate(step, &spec.pool, spec.estimate, &why);
                    continue;
                }
            };
            done.spent.push((spec.pool.as_str(), spec.estimate, spent));
        }
        done
    }

    /// Settle every pool of the call `receipt` names to `units` (a call
    /// answered 304, its endpoint's `not_modified`): what stands for each
    /// now. A settle the store did not take keeps the full cost, said.
    pub(in crate::runner) async fn settle_to<'s>(
        &self,
        step: &'s Step,
        receipt: &Receipt,
        units: u64,
    ) -> Settlement<'s> {
        let mut done = Settlement::default();
        let Some(store) = self.store else {
            return done;
        };
        for c in &step.cost {
            let pool = c.pool.name.as_str();
            let cost = (pool, c.units, units.min(c.units));
            match store
                .settle(&self.cred.name, receipt, cost, At::StoreClock)
                .await
            {
                Ok(Settled::Exact) => done.spent.push((pool, c.units, cost.2)),
                // (too far behind the newest: a refund is dropped)
                Ok(Settled::Late | Settled::Gone) => {}
                Err(e) => warn!(
                    job = self.job,
                    "{}: a 304's charge of {} {pool} stays (the store did not take its settle: {e})",
                    step.endpoint,
                    c.units
                ),
            }
        }
        done
    }

    /// Every settled cost of `step` keeps its estimate, for `why`: how many.
    pub(in crate::runner) fn keep_estimates(&self, step: &Step, why: &str) -> u64 {
        // (a request abandoned: if it was to learn a limit, another will)
        self.learned_from(step, None);
        step.settle
            .iter()
            .map(|spec| self.keep_estimate(step, &spec.pool, spec.estimate, why))
            .sum()
    }

    fn keep_estimate(&self, step: &Step, pool: &str, estimate: u64, why: &str) -> u64 {
        warn!(
            job = self.job,
            "{}: {why}: the estimate of {estimate} {pool} stays charged", step.endpoint
        );
        1
    }

    /// The upstream's own counts in a response (`upstream_headers`): where
    /// one says fewer units remain than the ledger's own count left after
    /// this call (`remaining`, with the window's headroom), the difference
    /// is recorded as spent by others, until the upstream's reset, so
    /// every host slows down. A count at or above the ledger's costs no
    /// store call, except in a pool whose cost `step` settles (the charge's
    /// `remaining` was counted at the estimate, the store counts the actual)
    /// or where the ledger counts others' units (the store clears them).
    pub(in crate::runner) async fn upstream_counts(
        &self,
        step: &Step,
        reported: &Reported,
        remaining: &[Remaining],
    ) {
        let (Some(store), Some(headers)) = (self.store, &reported.headers) else {
            self.learned_from(step, None);
            return;
        };
        self.announced(headers).await;
        self.learned_from(step, Some(headers));
        let pools = self.pools();
        for count in upstream_counts(&self.cred.upstream_headers, headers) {
            let Some(pool) = pools.iter().find(|p| p.name == count.pool) else {
                continue;
            };
            let Some(w) = pool.longest_window() else {
                continue;
            };
            let another_window = count.window.is_some_and(|per| per != w.per);
            if another_window || count.limit.is_some_and(|l| l != w.limit) {
                // (said once a run: announced.rs)
                debug!(
                    job = self.job,
                    "the upstream's count of {} is of another limit than the {} window's: not applied",
                    pool.name,
                    crate::timefmt::fmt_duration(w.per)
                );
                continue;
            }
            // (a count at or above the ledger's costs no store call, unless
            // the ledger counts others' units: then it may clear them)
            let ours = remaining
                .iter()
                .find(|r| r.pool == pool.name && r.per == w.per)
                .filter(|r| r.others == 0)
                .map(|r| r.remaining + w.headroom);
            let settled = step.settle.iter().any(|s| s.pool == pool.name);
            if !settled && ours.is_some_and(|ours| count.remaining >= ours) {
                continue;
            }
            // (the upstream's count resets within the window it counts: a
            // later reset, a century or an overflow, is capped there, so
            // that no answer holds the pool past its longest window)
            let reset = count.reset.map(|r| BlockEnd::After(r.min(w.per)));
            let recorded = store
                .upstream_remaining(
                    &self.cred.name,
                    pool,
                    count.remaining,
                    reset,
                    At::StoreClock,
                )
                .await;
            match recorded {
                Ok(o) if o.units > 0 => info!(
                    job = self.job,
                    "the upstream counts {} {} remaining of {}: {} spent elsewhere, counted until {}",
                    count.remaining,
                    pool.name,
                    w.limit,
                    o.units,
                    local_datetime(o.until)
                ),
                Ok(_) => {}
                Err(e) => warn!(
                    job = self.job,
                    "the upstream's count of {} was not recorded: {e}", pool.name
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::history::History;
    use crate::runner::meter::Charged;
    use crate::runner::meter::tests::{config, meter, store};

    #[test]
    fn a_settle_says_what_each_estimate_became_or_that_it_stays() {
        let config =
            config("{ secret: { env: UNUSED }, pools: { units: [ { limit: 100, per: 1h } ] } }");
        let (_dir, store) = store();
        let history = Mutex::new(History::in_memory());
        let m = meter(&config, Some(&store), &history);
        let step = &config.jobs[0].steps[1];
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let Charged::Go { receipt, .. } = m.charge(step).await.unwrap() else {
                panic!("not charged")
            };
            let settled = m.settle(step, &receipt, &[Actual::Units(3)]).await;
            assert_eq!(
                settled,
                Settlement {
                    spent: vec![("units", 5, 3)],
                    kept: 0
                }
            );
            let Charged::Go { receipt, .. } = m.charge(step).await.unwrap() else {
                panic!("not charged")
            };
            let unread = [Actual::Unreadable("no X-Cost header".into())];
            assert_eq!(m.settle(step, &receipt, &unread).await.kept, 1);
            assert_eq!(m.keep_estimates(step, "abandoned"), 1);
        });
    }

    #[test]
    fn an_upstream_count_below_the_ledgers_is_spent_by_others() {
        let config = config(
            "{ secret: { env: UNUSED }, upstream_headers: { units: { remaining: x-left } }, \
             pools: { units: [ { limit: 10, per: 1h } ] } }",
        );
        let (_dir, store) = store();
        let history = Mutex::new(History::in_memory());
        let m = meter(&config, Some(&store), &history);
        let step = &config.jobs[0].steps[0];
        let says = |left: &str| Reported {
            actuals: Vec::new(),
            headers: Some(reqwest::header::HeaderMap::from_iter([(
                reqwest::header::HeaderName::from_static("x-left"),
                left.parse().unwrap(),
            )])),
            status: Some(200),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // 2 of 10 charged here; the upstream counts 8 left: as the
            // ledger does, so nothing is recorded, and 2 more fit.
            let Charged::Go { remaining, .. } = m.charge(step).await.unwrap() else {
                panic!("not charged")
            };
            m.upstream_counts(step, &says("8"), &remaining).await;
            let Charged::Go { remaining, .. } = m.charge(step).await.unwrap() else {
                panic!("not charged")
            };
            // 4 charged here, the upstream counts 2 left: 4 spent by
            // others, so the next charge of 2 fits and the one after not.
            m.upstream_counts(step, &says("2"), &remaining).await;
            assert!(matches!(m.charge(step).await.unwrap(), Charged::Go { .. }));
            assert!(matches!(
                m.charge(step).await.unwrap(),
                Charged::Stop(crate::runner::Stop::QuotaSaidNo { .. })
            ));
        });
    }
}
