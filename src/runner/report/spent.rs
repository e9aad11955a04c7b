//! What the meter did, counted in the run's report: units charged per
//! pool, calls sent unmetered, refusals only observed, estimates kept,
//! units a 304 gave back. The [`Meter`](super::super::meter) says what it
//! charged and settled; these are the report's sums of it, so that the
//! run's loop only hands one to the other.

use super::JobReport;
use crate::runner::meter::{Charged, Settlement};

impl JobReport {
    /// A charge before a request.
    pub(in crate::runner) fn count_charge(&mut self, charged: &Charged<'_>) {
        match charged {
            Charged::Go {
                charged, observed, ..
            } => {
                for c in *charged {
                    *self.units.entry(c.pool.name.clone()).or_default() += c.units;
                }
                self.observed_rejections += u64::from(*observed);
            }
            Charged::Unmetered => self.unmetered += 1,
            Charged::Stop(_) => {}
        }
    }

    /// A call's estimates settled to what its response said was spent:
    /// each pool's units now count that in place of the estimate.
    pub(in crate::runner) fn count_settle(&mut self, settled: &Settlement<'_>) {
        self.estimates_kept += settled.kept;
        for (pool, estimate, spent) in &settled.spent {
            let units = self.units.entry(pool.to_string()).or_default();
            *units = (*units + spent).saturating_sub(*estimate);
        }
    }

    /// A call answered 304, its charge settled to the endpoint's
    /// `not_modified` units: what it gave back is counted as saved.
    pub(in crate::runner) fn count_not_modified(&mut self, settled: &Settlement<'_>) {
        for (pool, cost, spent) in &settled.spent {
            let given_back = cost.saturating_sub(*spent);
            let charged = self.units.entry(pool.to_string()).or_default();
            *charged = charged.saturating_sub(given_back);
            *self.units_saved.entry(pool.to_string()).or_default() += given_back;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> JobReport {
        JobReport {
            job: "j".into(),
            ..JobReport::default()
        }
    }

    #[test]
    fn a_settle_counts_what_was_spent_in_place_of_the_estimate() {
        let mut r = report();
        r.units.insert("tokens".into(), 100);
        let s = Settlement {
            spent: vec![("tokens", 80, 30)],
            kept: 1,
        };
        r.count_settle(&s);
        assert_eq!((r.units["tokens"], r.estimates_kept), (50, 1));
    }

    #[test]
    fn a_304_gives_back_what_it_did_not_cost_and_counts_it_saved() {
        let mut r = report();
        r.units.insert("requests".into(), 5);
        let s = Settlement {
            spent: vec![("requests", 2, 0)],
            kept: 0,
        };
        r.count_not_modified(&s);
        assert_eq!((r.units["requests"], r.units_saved["requests"]), (3, 2));
    }
}
