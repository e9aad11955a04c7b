//! A job of inputs planned: its progress (done, failed, left, when the rest
//! will be done: [`crate::commands::common::inputs`]) and its next run,
//! the inputs left that fit what remains now, each at its cost per input.

use super::cost::RemainingUnits;
use super::model::NextRun;
use crate::config::Job;

/// How many of `left` inputs the next run of `job` does with what remains
/// now (all of them in observe mode: the ledger stops nothing), spending
/// their units from `remaining` so the credential's later jobs see less.
pub fn next_run(job: &Job, left: u64, remaining: &mut RemainingUnits, observe: bool) -> NextRun {
    // (a request carries `batch` inputs: what remains is counted in
    // requests, each the job's units per run)
    let batch = job.inputs.as_ref().map_or(1, |i| i.per_request());
    let per_input = job.units_per_run();
    let fits = per_input
        .iter()
        .filter(|(_, u)| *u > 0)
        .flat_map(|(pool, u)| {
            remaining
                .iter()
                .filter(move |((p, _), _)| p == pool)
                .map(move |(_, r)| r / u)
        })
        .min()
        .unwrap_or(u64::MAX);
    let inputs = if observe {
        left
    } else {
        left.min(fits.saturating_mul(batch))
    };
    let requests = inputs.div_ceil(batch);
    for (pool, u) in &per_input {
        for ((p, _), r) in remaining.iter_mut() {
            if p == pool {
                *r = r.saturating_sub(requests.saturating_mul(*u));
            }
        }
    }
    NextRun::Inputs {
        inputs,
        calls: requests.saturating_mul(job.calls_per_run()),
        left_after: left - inputs,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{Config, Secrets};

    /// One call an input, spending 1 unit and 1 search.
    const CONFIG: &str = r#"
credentials:
  main:
    secret: { env: PORTION_TEST_NEVER_SET }
    pools:
      units: [{ limit: 1000, per: 1d }, { limit: 100, per: 1h }]
      search: [{ limit: 1000, per: 1h }]
endpoints:
  details.list: { cost: { units: 1, search: 1 } }
jobs:
  one:
    credential: main
    steps:
      - endpoint: details.list
        request: { url: "http://127.0.0.1:9/details" }
    output: out/one
"#;

    fn remaining(of: &[((&str, usize), u64)]) -> RemainingUnits {
        of.iter()
            .map(|((p, i), r)| ((p.to_string(), *i), *r))
            .collect()
    }

    #[test]
    fn the_next_run_does_what_the_tightest_window_of_any_pool_holds() {
        let c = Config::parse(Path::new("portion.yaml"), CONFIG, Secrets::Skip).expect("valid");
        let mut left = remaining(&[(("units", 0), 10), (("units", 1), 3), (("search", 0), 5)]);
        let next = next_run(&c.jobs[0], 7, &mut left, false);
        let want = NextRun::Inputs {
            inputs: 3,
            calls: 3,
            left_after: 4,
        };
        assert_eq!(next, want);
        // spent: the credential's later jobs see what is left
        let after = remaining(&[(("units", 0), 7), (("units", 1), 0), (("search", 0), 2)]);
        assert_eq!(left, after);
        // fewer left than fit: all of them
        let mut plenty = remaining(&[(("units", 0), 10), (("units", 1), 10), (("search", 0), 10)]);
        assert_eq!(
            next_run(&c.jobs[0], 2, &mut plenty, false),
            NextRun::Inputs {
                inputs: 2,
                calls: 2,
                left_after: 0
            }
        );
        // observe mode: the ledger stops nothing
        let mut none = remaining(&[(("units", 0), 0), (("units", 1), 0), (("search", 0), 0)]);
        assert_eq!(
            next_run(&c.jobs[0], 7, &mut none, true),
            NextRun::Inputs {
                inputs: 7,
                calls: 7,
                left_after: 0
            }
        );
    }
}
