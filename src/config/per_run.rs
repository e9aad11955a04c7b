//! What one run of a job spends at most: the worst case that `check`
//! prints and the planner (`run --dry-run`) plans with, computed once.

use super::Job;

impl Job {
    /// Units per run, per pool, in the order the steps first spend from
    /// each: the worst case, `max_pages` pages of every paginated step in
    /// every region, and for a fan-out step one call per batch of the most
    /// values the previous step's pages can hold
    /// ([`super::Step::max_requests`]). Saturating: a worst case past u64
    /// (fan-outs of fan-outs) is "more than any window holds", never a panic.
    pub fn units_per_run(&self) -> Vec<(String, u64)> {
        let regions = self.regions.len().max(1) as u64;
        let mut units: Vec<(String, u64)> = Vec::new();
        for s in &self.steps {
            for c in &s.cost {
                let step = c
                    .units
                    .saturating_mul(s.max_requests())
                    .saturating_mul(regions);
                match units.iter_mut().find(|(p, _)| *p == c.pool.name) {
                    Some((_, u)) => *u = u.saturating_add(step),
                    None => units.push((c.pool.name.clone(), step)),
                }
            }
        }
        units
    }

    /// Calls per run, the worst case as in [`Job::units_per_run`].
    pub fn calls_per_run(&self) -> u64 {
        let regions = self.regions.len().max(1) as u64;
        self.steps
            .iter()
            .fold(0u64, |n, s| n.saturating_add(s.max_requests()))
            .saturating_mul(regions)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::Path;

    use crate::config::{Config, Secrets};

    /// `fan`: 2 regions × (3 pages of 2 units, then a fan-out of batches
    /// of 4 out of 3 pages of up to 10 values: 8 calls of 1 search and
    /// 1 unit).
    pub(crate) const CONFIG: &str = r#"
credentials:
  main:
    secret: { env: PORTION_TEST_NEVER_SET }
    pools:
      units: [{ limit: 1000, per: 1h }]
      search: [{ limit: 1000, per: 1h }]
endpoints:
  ids.list: { cost: { units: 2 } }
  details.list: { cost: { units: 1, search: 1 } }
jobs:
  fan:
    credential: main
    regions: [US, GB]
    steps:
      - endpoint: ids.list
        request: { url: "http://127.0.0.1:9/ids" }
        paginate: { page: page, start: 1, until_empty: /items, max_pages: 3 }
      - endpoint: details.list
        for_each: { from: /items/*, batch: 4, per_page: 10 }
        request: { url: "http://127.0.0.1:9/details", query: { id: "{batch}" } }
    output: out/fan
"#;

    #[test]
    fn a_run_costs_its_worst_case_in_every_region_pools_in_the_order_spent() {
        let c = Config::parse(Path::new("portion.yaml"), CONFIG, Secrets::Skip).expect("valid");
        let fan = &c.jobs[0];
        assert_eq!(fan.calls_per_run(), 2 * (3 + 8));
        // units before search, as the steps spend them (not by name).
        assert_eq!(
            fan.units_per_run(),
            [
                ("units".to_string(), 2 * (3 * 2 + 8)),
                ("search".into(), 2 * 8)
            ]
        );
    }
}
