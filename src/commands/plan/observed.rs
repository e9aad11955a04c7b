//! What a conditional job's runs really cost: the share of its conditional
//! steps' calls that the upstream answered 304, as the store's log holds
//! them, and a run's units with that share of those calls at the
//! endpoint's `not_modified` cost instead of full pages.
//!
//! The log is where the share is: each call is an entry tagged with its
//! endpoint and job, and a call answered 304 was settled to the
//! endpoint's `not_modified` (what `status` counts as answered 304 and
//! units saved, over every run, is in the same store but has no count of
//! the calls beside it). A call is told apart by its cost, so only a
//! step whose `not_modified` is below its fixed cost in some pool counts;
//! a Redis log's older calls read as blocks of 128, which say no call's
//! cost, and are left out (its latest calls are always read one by one).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::{Job, Step};
use crate::ledger::{CredentialLog, LogSegment, Pool};

/// A conditional job's calls in the log and how a run is planned from them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ObservedShare {
    /// Calls of its conditional steps in the store's log.
    pub calls: u64,
    /// Those answered 304 (settled to the endpoint's `not_modified`).
    pub answered_304: u64,
    /// Units a run (a request, for a job of inputs) is expected to spend,
    /// per pool, rounded up: the worst case with `answered_304 / calls` of
    /// its conditional calls at the `not_modified` cost. `None`: no call
    /// yet, full pages assumed.
    pub expected_units_per_run: Option<BTreeMap<String, u64>>,
    /// The same, unrounded (what an estimate of many runs multiplies).
    #[serde(skip)]
    pub expected: BTreeMap<String, f64>,
}

/// A step whose 304 costs less than its call in some pool: the pool a
/// 304 is told apart in (its index in `pools`), and what a 304 costs.
fn saving(step: &Step, pools: &[Pool]) -> Option<(usize, u64)> {
    step.conditional.as_ref()?;
    let m = step.not_modified?;
    let cost = step
        .cost
        .iter()
        .find(|c| c.units > m && step.settle.iter().all(|s| s.pool != c.pool.name))?;
    let index = pools.iter().position(|p| p.name == cost.pool.name)?;
    Some((index, m))
}

/// `job`'s share of 304s in `log` (the credential's, its pools `pools` in
/// order) and a run's expected units; `None` for a job none of whose
/// steps spends less on a 304.
pub fn share(job: &Job, pools: &[Pool], log: &CredentialLog) -> Option<ObservedShare> {
    if !job.steps.iter().any(|s| saving(s, pools).is_some()) {
        return None;
    }
    // (each endpoint once per pool: two steps of one endpoint share a tag)
    let mut counted: Vec<(usize, u64, u32)> = Vec::new();
    for step in &job.steps {
        let Some((pool, m)) = saving(step, pools) else {
            continue;
        };
        let tags = (log.tags.iter().enumerate())
            .filter(|(_, (endpoint, j))| *endpoint == step.endpoint && *j == job.name);
        for (tag, _) in tags {
            let entry = (pool, m, tag as u32);
            if !counted.contains(&entry) {
                counted.push(entry);
            }
        }
    }
    let (mut calls, mut answered_304) = (0u64, 0u64);
    for &(pool, m, tag) in &counted {
        for segment in log.pools.get(pool).map_or(&[][..], Vec::as_slice) {
            if let LogSegment::Entry(e) = segment
                && e.tag == tag
            {
                calls += 1;
                answered_304 += u64::from(e.cost == m);
            }
        }
    }
    let share = (calls > 0).then(|| answered_304 as f64 / calls as f64);
    let expected = expected_units(job, pools, share.unwrap_or(0.0));
    Some(ObservedShare {
        calls,
        answered_304,
        expected_units_per_run: share.map(|_| {
            // (less a hair: 7.000000001 of float error is 7)
            let up = |u: f64| (u - 1e-9).ceil().max(0.0) as u64;
            expected.iter().map(|(p, u)| (p.clone(), up(*u))).collect()
        }),
        expected,
    })
}

/// Units per run of `job`, per pool, with `share` of the calls of each
/// step that spends less on a 304 at its `not_modified` cost (in every
/// pool of its fixed cost) and the rest at full cost: the worst case of
/// [`Job::units_per_run`] otherwise.
fn expected_units(job: &Job, pools: &[Pool], share: f64) -> BTreeMap<String, f64> {
    let regions = job.regions.len().max(1) as f64;
    let mut units = BTreeMap::new();
    for step in &job.steps {
        let calls = step.max_requests() as f64 * regions;
        let saves = saving(step, pools).is_some();
        for c in &step.cost {
            let settled = step.settle.iter().any(|s| s.pool == c.pool.name);
            let full = c.units as f64;
            let per_call = match step.not_modified {
                Some(m) if saves && !settled && (m as f64) < full => {
                    full - share * (full - m as f64)
                }
                _ => full,
            };
            *units.entry(c.pool.name.clone()).or_insert(0.0) += per_call * calls;
        }
    }
    units
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{Config, Secrets};
    use crate::ledger::LogEntry;

    /// `issues`: 2 repositories × 5 pages of a conditional step whose 304
    /// costs nothing; `search`: one call, not conditional.
    const CONFIG: &str = r#"
credentials:
  main:
    secret: { env: PORTION_TEST_NEVER_SET }
    pools:
      requests: [{ limit: 100, per: 1h }]
endpoints:
  issues.list: { cost: { requests: 1, not_modified: 0 } }
  search: { cost: { requests: 2 } }
jobs:
  issues:
    credential: main
    regions: [a/one, a/two]
    steps:
      - endpoint: issues.list
        request: { url: "http://127.0.0.1:9/{region}" }
        paginate: { link: next, max_pages: 5 }
        conditional: true
      - endpoint: search
        request: { url: "http://127.0.0.1:9/s" }
    output: out/issues
"#;

    fn log(entries: &[(u32, u64)]) -> CredentialLog {
        CredentialLog {
            at: 0,
            serial: 0,
            blocked_until: 0,
            blocked_reason: String::new(),
            retain: 0,
            tags: vec![
                ("issues.list".into(), "issues".into()),
                ("search".into(), "issues".into()),
                ("issues.list".into(), "other".into()),
            ],
            pools: vec![
                entries
                    .iter()
                    .enumerate()
                    .map(|(i, &(tag, cost))| {
                        LogSegment::Entry(LogEntry {
                            at: i as i64,
                            cost,
                            tag,
                        })
                    })
                    .collect(),
            ],
            lost: vec![0],
            others: vec![Default::default()],
            observed: vec![(0, 0)],
            reserved: vec![Vec::new()],
        }
    }

    #[test]
    fn the_share_of_304s_is_the_logs_and_a_run_spends_it() {
        let c = Config::parse(Path::new("portion.yaml"), CONFIG, Secrets::Skip).unwrap();
        let (job, pools) = (&c.jobs[0], &c.credentials[0].pools);
        // Nothing in the log yet: no share, the worst case (10 + 2 × 2).
        let none = share(job, pools, &log(&[])).unwrap();
        assert_eq!((none.calls, none.answered_304), (0, 0));
        assert_eq!(none.expected_units_per_run, None);
        assert_eq!(none.expected, [("requests".to_string(), 14.0)].into());
        // 4 pages in full, then 2 answered 304; the search and the other
        // job's calls are not its conditional calls.
        let ran = log(&[
            (0, 1),
            (0, 1),
            (1, 2),
            (0, 1),
            (0, 1),
            (2, 0),
            (0, 0),
            (0, 0),
        ]);
        let s = share(job, pools, &ran).unwrap();
        assert_eq!((s.calls, s.answered_304), (6, 2));
        // 10 pages at 2/3 of a unit, and the searches: 10.67 → 11.
        let want = [("requests".to_string(), 11)].into();
        assert_eq!(s.expected_units_per_run, Some(want));
        // Every call answered 304: the searches alone.
        let s = share(job, pools, &log(&[(0, 0), (0, 0)])).unwrap();
        assert_eq!(
            s.expected_units_per_run,
            Some([("requests".into(), 4)].into())
        );
    }

    #[test]
    fn a_job_whose_304s_cost_the_same_has_no_share() {
        let full = CONFIG.replace("requests: 1, not_modified: 0", "requests: 1");
        let c = Config::parse(Path::new("portion.yaml"), &full, Secrets::Skip).unwrap();
        let ran = log(&[(0, 1), (0, 1)]);
        assert_eq!(share(&c.jobs[0], &c.credentials[0].pools, &ran), None);
        // not conditional: the same
        let plain = CONFIG.replace("        conditional: true\n", "");
        let c = Config::parse(Path::new("portion.yaml"), &plain, Secrets::Skip).unwrap();
        assert_eq!(share(&c.jobs[0], &c.credentials[0].pools, &ran), None);
    }
}
