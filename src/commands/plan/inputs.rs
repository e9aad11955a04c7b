//! A job of inputs planned: its progress (done, failed, left:
//! [`crate::commands::common::inputs`]), when the rest will be done for
//! runs that wait inside themselves or stop until the next tick, and its
//! next run, the inputs left that fit what remains now, each at its cost
//! per input.

use std::collections::BTreeMap;

use super::cost::RemainingUnits;
use super::model::{FinishAssumes, NextRun, RunsAtRefusal};
use crate::commands::common::inputs::InputsProgress;
use crate::config::Job;
use crate::inputs::pace::{self, PoolNow, Runs, pools_now};
use crate::ledger::CredentialUsage;

/// Thousandths of a unit: a request's expected cost is a fraction.
const MILLI: u64 = 1000;

/// `progress`'s time to finish again, for runs that meet a refusal as
/// `runs` says ([`pace::finish`]: waiting for it, or stopping until the
/// next tick), each request of the inputs left at its `expected` units per
/// pool when known (a conditional job's, from its share of 304s) rather
/// than its worst case: counted in thousandths of a unit.
pub fn finish(
    job: &Job,
    progress: &mut InputsProgress,
    usage: &CredentialUsage,
    expected: Option<&BTreeMap<String, f64>>,
    runs: Runs,
) -> FinishAssumes {
    let mut pools = pools_now(job, usage);
    if let Some(expected) = expected {
        at_expected_cost(job, &mut pools, usage, expected);
    }
    let requests = progress.left.div_ceil(progress.inputs_per_request.max(1));
    let finish = pace::finish(requests, &pools, runs);
    let time = finish.map(|f| f.time);
    let by = time.map(|d| (usage.at).saturating_add(d.as_micros().min(i64::MAX as u128) as i64));
    progress.done_in_seconds = time.map(|d| d.as_secs_f64().ceil() as u64);
    progress.done_by = by.map(crate::timefmt::rfc3339);
    progress.done_by_micros = by;
    let (windows, waited) = finish.map_or((0, 0), |f| (f.windows, f.waited));
    let waits = !runs.max_wait.is_zero();
    FinishAssumes {
        runs: match (runs.every, waited) {
            // (nothing needs more than it holds now: what a refusal would meet)
            _ if windows == 0 && waits => RunsAtRefusal::Waits,
            _ if waited == windows && windows > 0 => RunsAtRefusal::Waits,
            (None, _) => RunsAtRefusal::Paced,
            (Some(_), 0) => RunsAtRefusal::Stops,
            (Some(_), _) => RunsAtRefusal::WaitsOrStops,
        },
        max_wait_seconds: runs.max_wait.as_secs(),
        every_seconds: runs.every.map(|d| d.as_secs()),
    }
}

/// `pools` with each request at its `expected` units (a fraction), its
/// windows counted in thousandths of a unit.
fn at_expected_cost(
    job: &Job,
    pools: &mut [PoolNow],
    usage: &CredentialUsage,
    expected: &BTreeMap<String, f64>,
) {
    // (the pools `pools_now` gives, in its order: those the usage has)
    let names = (job.units_per_run().into_iter())
        .map(|(name, _)| name)
        .filter(|name| usage.pools.iter().any(|p| p.pool == *name));
    for (pool, name) in pools.iter_mut().zip(names) {
        let units = expected
            .get(&name)
            .copied()
            .unwrap_or(pool.per_input as f64);
        pool.per_input = (units * MILLI as f64).ceil() as u64;
        for w in &mut pool.windows {
            w.budget = w.budget.saturating_mul(MILLI);
            w.remaining = w.remaining.saturating_mul(MILLI);
        }
    }
}

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
    fn the_time_to_finish_at_the_expected_cost_counts_fractions_of_a_unit() {
        use crate::ledger::{CredentialLog, summarize};
        let yaml = CONFIG
            .replace(
                "units: [{ limit: 1000, per: 1d }, { limit: 100, per: 1h }]",
                "units: [{ limit: 10, per: 1h }]",
            )
            .replace("    steps:", "    inputs: { file: ids.txt }\n    steps:");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ids.txt"), "K1\n").unwrap();
        let file = dir.path().join("portion.yaml");
        let c = Config::parse(&file, &yaml, Secrets::Skip).expect("valid");
        let cred = &c.credentials[0];
        let log = CredentialLog {
            at: 0,
            serial: 0,
            blocked_until: 0,
            blocked_reason: String::new(),
            retain: 0,
            tags: Vec::new(),
            pools: vec![Vec::new(); 2],
            lost: vec![0; 2],
            others: vec![Default::default(); 2],
            observed: vec![(0, 0); 2],
            reserved: vec![Vec::new(); 2],
        };
        let usage = summarize(&cred.name, &cred.pools, &log);
        let mut p = InputsProgress {
            left: 30,
            inputs_per_request: 1,
            ..Default::default()
        };
        // Half a unit an input (search at its full 1, roomy): 15 units,
        // 10 now and 5 freed at 10 an hour: 30 minutes.
        let expected = [("units".to_string(), 0.5), ("search".to_string(), 1.0)].into();
        finish(&c.jobs[0], &mut p, &usage, Some(&expected), Runs::default());
        assert_eq!(p.done_in_seconds, Some(1800));
        assert_eq!(p.done_by.as_deref(), Some("1970-01-01T00:30:00Z"));
        // At the full unit: 20 after the 10 now, 2 hours.
        let full = [("units".to_string(), 1.0), ("search".to_string(), 1.0)].into();
        finish(&c.jobs[0], &mut p, &usage, Some(&full), Runs::default());
        assert_eq!(p.done_in_seconds, Some(7200));
    }

    #[test]
    fn the_time_to_finish_counts_ticks_unless_the_run_waits() {
        use std::time::Duration;

        use crate::ledger::{CredentialLog, summarize};
        let yaml = CONFIG.replace(
            "units: [{ limit: 1000, per: 1d }, { limit: 100, per: 1h }]",
            "units: [{ limit: 10, per: 1h }]",
        );
        let c = Config::parse(Path::new("portion.yaml"), &yaml, Secrets::Skip).expect("valid");
        let cred = &c.credentials[0];
        let log = CredentialLog {
            at: 0,
            serial: 0,
            blocked_until: 0,
            blocked_reason: String::new(),
            retain: 0,
            tags: Vec::new(),
            pools: vec![Vec::new(); 2],
            lost: vec![0; 2],
            others: vec![Default::default(); 2],
            observed: vec![(0, 0); 2],
            reserved: vec![Vec::new(); 2],
        };
        let usage = summarize(&cred.name, &cred.pools, &log);
        let mut p = InputsProgress {
            left: 30,
            inputs_per_request: 1,
            ..Default::default()
        };
        let mut at = |max_wait: u64, every: Option<u64>| {
            let runs = Runs {
                max_wait: Duration::from_secs(max_wait),
                every: every.map(Duration::from_secs),
            };
            let assumes = finish(&c.jobs[0], &mut p, &usage, None, runs);
            (p.done_in_seconds, assumes.runs)
        };
        // 20 after the 10 now, at 10 an hour: 2 hours at the pace; a run
        // every 25 minutes that stops takes 4 more at the 5th tick.
        assert_eq!(at(0, None), (Some(7200), RunsAtRefusal::Paced));
        assert_eq!(at(0, Some(1500)), (Some(7500), RunsAtRefusal::Stops));
        // (the hour's units free up an hour after they were spent)
        assert_eq!(at(600, Some(1500)), (Some(7500), RunsAtRefusal::Stops));
        assert_eq!(at(3600, Some(1500)), (Some(7200), RunsAtRefusal::Waits));
        assert_eq!(at(3600, None), (Some(7200), RunsAtRefusal::Waits));
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
