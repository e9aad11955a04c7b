//! What one run of a job costs, and whether the next one fits what remains
//! now: the arithmetic of a single run, apart from the store and the text
//! so it can be checked on exact numbers. [`super::schedule`] builds a day
//! of runs on it; the walk of the next run page by page is `cost/walk.rs`.
//! Nothing here reads a store or a clock.

mod walk;

use std::collections::BTreeMap;

use self::walk::{Pages, PlannedWalk};
use super::model::NextRun;
use crate::config::Job;
use crate::runner::cursor::{Cursor, Start};

/// What remains now, per (pool, window index): the credential's jobs spend
/// it in turn, so each job's next run sees what the earlier ones left.
pub type RemainingUnits = BTreeMap<(String, usize), u64>;

/// Units per run of `job`, per pool, by pool name: the worst case
/// ([`Job::units_per_run`]).
pub fn units_per_run(job: &Job) -> BTreeMap<String, u64> {
    job.units_per_run().into_iter().collect()
}

/// The largest units per run any of `jobs` (scheduled or not) spends from
/// `pool`: one round of the pool.
pub fn round(pool: &str, jobs: &[&Job]) -> u64 {
    jobs.iter()
        .filter_map(|j| units_per_run(j).get(pool).copied())
        .max()
        .unwrap_or(0)
}

/// Walk the next run page by page from the job's cursor (and the regions
/// it has ahead of it, which a run with `concurrency` left started or
/// served), spending from `remaining`, until it ends or a page would not
/// fit; for an `observe` credential, to its end, counting what would not.
pub fn next_run(
    job: &Job,
    cursor: Option<&Cursor>,
    remaining: &mut RemainingUnits,
    observe: bool,
) -> NextRun {
    let regions: Vec<&str> = if job.regions.is_empty() {
        vec![""]
    } else {
        job.regions.iter().map(String::as_str).collect()
    };
    let cursor = cursor.cloned().unwrap_or_default();
    let start = cursor.start(&job.regions, job.steps.len());
    let ahead: BTreeMap<usize, Option<Start>> = cursor
        .ahead_starts(&job.regions, job.steps.len())
        .into_iter()
        .collect();
    let n = regions.len();
    let mut walk = PlannedWalk::new(remaining, observe);
    for i in 0..n {
        let index = (start.index + i) % n;
        // Where this region starts: the cursor's, one ahead, or its first page.
        let from = match (i, ahead.get(&index)) {
            (0, _) => Some(&start),
            (_, Some(None)) => continue,
            (_, Some(Some(s))) => Some(s),
            (_, None) => None,
        };
        let first_step = from.map_or(0, |f| f.place.step);
        for (s, step) in job.steps.iter().enumerate().skip(first_step) {
            let pages = Pages::of(step, from.filter(|f| f.place.step == s));
            if let Some(stop) = walk.step(regions[index], s, step, &pages) {
                return stop;
            }
        }
    }
    walk.end()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{Config, Secrets};
    use crate::runner::cursor::Place;

    /// trending: 3 regions × 3 pages × 1 unit; music: 1 search, no regions;
    /// mixed: 2 regions × (2 pages of 1 unit, then 1 call of 2 units and 1
    /// search). The pools are 90 units a day (100 less 10%), 30 an hour, and
    /// 10 searches a day.
    const CONFIG: &str = r#"
credentials:
  main:
    secret: { env: PORTION_TEST_NEVER_SET }
    pools:
      units:
        - { limit: 100, per: 24h, headroom: 10% }
        - { limit: 30, per: 1h }
      search:
        - { limit: 10, per: 24h }
endpoints:
  videos.list: { cost: { units: 1 } }
  search.list: { cost: { search: 1 } }
  both.list: { cost: { units: 2, search: 1 } }
jobs:
  trending:
    credential: main
    regions: [US, GB, DE]
    steps:
      - endpoint: videos.list
        request: { url: "http://127.0.0.1:9/videos" }
        paginate: { token: /nextPageToken, param: pageToken, max_pages: 3 }
    output: out/trending
  music:
    credential: main
    steps:
      - endpoint: search.list
        request: { url: "http://127.0.0.1:9/search" }
    output: out/music
  mixed:
    credential: main
    regions: [US, GB]
    steps:
      - endpoint: videos.list
        request: { url: "http://127.0.0.1:9/videos" }
        paginate: { token: /nextPageToken, param: pageToken, max_pages: 2 }
      - endpoint: both.list
        request: { url: "http://127.0.0.1:9/both" }
    output: out/mixed
"#;

    fn config() -> Config {
        Config::parse(Path::new("portion.yaml"), CONFIG, Secrets::Skip).expect("a valid config")
    }

    fn job<'c>(config: &'c Config, name: &str) -> &'c Job {
        config.jobs.iter().find(|j| j.name == name).unwrap()
    }

    fn units(of: &[(&str, u64)]) -> BTreeMap<String, u64> {
        of.iter().map(|(p, u)| (p.to_string(), *u)).collect()
    }

    /// Left per pool, per window in the pool's order.
    fn remaining(of: &[(&str, &[u64])]) -> RemainingUnits {
        let mut r = RemainingUnits::new();
        for (pool, left) in of {
            for (w, left) in left.iter().enumerate() {
                r.insert((pool.to_string(), w), *left);
            }
        }
        r
    }

    fn stops(region: &str, step: usize, page: u32, calls: u64, pool: &str, per: u64) -> NextRun {
        NextRun::Stops {
            region: region.into(),
            step,
            page,
            calls,
            pool: pool.into(),
            per_seconds: per,
        }
    }

    #[test]
    fn a_run_costs_its_worst_case_in_every_region() {
        let c = config();
        assert_eq!(units_per_run(job(&c, "trending")), units(&[("units", 9)]));
        assert_eq!(job(&c, "trending").calls_per_run(), 9);
        // No regions: the steps run once.
        assert_eq!(units_per_run(job(&c, "music")), units(&[("search", 1)]));
        assert_eq!(job(&c, "music").calls_per_run(), 1);
        // (2 pages × 1 + 1 call × 2) units and 1 search, in each of 2 regions.
        let mixed = job(&c, "mixed");
        assert_eq!(units_per_run(mixed), units(&[("units", 8), ("search", 2)]));
        assert_eq!(mixed.calls_per_run(), 6);
    }

    #[test]
    fn a_round_is_the_largest_run_of_any_job() {
        let c = config();
        let jobs: Vec<&Job> = c.jobs.iter().collect();
        assert_eq!(round("units", &jobs), 9);
        assert_eq!(round("search", &jobs), 2);
        assert_eq!(round("nothing", &jobs), 0);
    }

    #[test]
    fn the_next_run_spends_what_remains() {
        let c = config();
        let trending = job(&c, "trending");
        let mut left = remaining(&[("units", &[90, 30])]);
        assert_eq!(
            next_run(trending, None, &mut left, false),
            NextRun::Fits { calls: 9 }
        );
        assert_eq!(left, remaining(&[("units", &[81, 21])]));
        // A run that exactly fits leaves nothing.
        let mut left = remaining(&[("units", &[9, 9])]);
        assert_eq!(
            next_run(trending, None, &mut left, false),
            NextRun::Fits { calls: 9 }
        );
        assert_eq!(left, remaining(&[("units", &[0, 0])]));
    }

    #[test]
    fn the_next_run_stops_at_the_first_page_that_does_not_fit() {
        let c = config();
        let trending = job(&c, "trending");
        // One unit short in the hour: the last page of the last region.
        let mut left = remaining(&[("units", &[90, 8])]);
        let want = stops("DE", 0, 2, 8, "units", 3600);
        assert_eq!(next_run(trending, None, &mut left, false), want);
        assert_eq!(left, remaining(&[("units", &[82, 0])]));
        // Nothing left: the first page, in the first window that is empty.
        let mut left = remaining(&[("units", &[0, 30])]);
        let want = stops("US", 0, 0, 0, "units", 86_400);
        assert_eq!(next_run(trending, None, &mut left, false), want);
        // No regions: the stop names none.
        let mut left = remaining(&[("search", &[0])]);
        let want = stops("", 0, 0, 0, "search", 86_400);
        assert_eq!(next_run(job(&c, "music"), None, &mut left, false), want);
    }

    /// A fan-out of 10^10 requests a region against a budget near 2^53:
    /// counted in spans, at once (one by one, it took minutes).
    #[test]
    fn a_huge_run_is_counted_in_spans() {
        let yaml = CONFIG.replace(
            "  music:\n",
            "  huge:\n    credential: main\n    regions: [US, GB]\n    steps:\n      - endpoint: videos.list\n        request: { url: \"http://127.0.0.1:9/v\" }\n        paginate: { token: /next, param: t, max_pages: 10000 }\n      - endpoint: both.list\n        request: { url: \"http://127.0.0.1:9/b/{batch}\" }\n        for_each: { from: /ids, batch: 1, per_page: 1000000 }\n    output: out/huge\n  music:\n",
        );
        let c = Config::parse(Path::new("portion.yaml"), &yaml, Secrets::Skip).unwrap();
        let huge = job(&c, "huge");
        let big = (1u64 << 53) - 1;
        let mut left = remaining(&[("units", &[big, big]), ("search", &[big])]);
        let per_region = 10_000 + 10_000 * 1_000_000;
        assert_eq!(
            next_run(huge, None, &mut left, false),
            NextRun::Fits {
                calls: 2 * per_region
            }
        );
        // Where it stops is exact too: search has room for 15,000 of the
        // second step's calls.
        let mut left = remaining(&[("units", &[big, big]), ("search", &[15_000])]);
        assert_eq!(
            next_run(huge, None, &mut left, false),
            stops("US", 1, 15_000, 10_000 + 15_000, "search", 86_400)
        );
    }

    #[test]
    fn an_observed_run_sends_everything_and_counts_what_would_not_fit() {
        let c = config();
        let trending = job(&c, "trending");
        // Six units in the hour: pages 7, 8 and 9 would not have fitted.
        let mut left = remaining(&[("units", &[90, 6])]);
        let want = NextRun::Observes {
            calls: 9,
            refused: 3,
            region: "DE".into(),
            step: 0,
            page: 0,
            pool: "units".into(),
            per_seconds: 3600,
        };
        assert_eq!(next_run(trending, None, &mut left, true), want);
        assert_eq!(left, remaining(&[("units", &[81, 0])]));
        // Room for all: it fits, as in enforce mode.
        let mut left = remaining(&[("units", &[90, 30])]);
        let fits = NextRun::Fits { calls: 9 };
        assert_eq!(next_run(trending, None, &mut left, true), fits);
    }

    #[test]
    fn the_next_run_starts_at_the_cursor() {
        let c = config();
        let trending = job(&c, "trending");
        let cursor = Cursor {
            run: 4,
            key: "GB".into(),
            place: Place {
                step: 0,
                page: 1,
                token: Some("CAUQ1".into()),
                ..Place::default()
            },
            ..Cursor::default()
        };
        // GB pages 1 and 2, then DE, then US: 8 calls, not 9.
        let mut left = remaining(&[("units", &[90, 30])]);
        let fits = NextRun::Fits { calls: 8 };
        assert_eq!(next_run(trending, Some(&cursor), &mut left, false), fits);
        let mut left = remaining(&[("units", &[90, 6])]);
        let want = stops("US", 0, 1, 6, "units", 3600);
        assert_eq!(next_run(trending, Some(&cursor), &mut left, false), want);
        // At GB's second step: that one call, then all of US.
        let cursor = Cursor {
            key: "GB".into(),
            place: Place {
                step: 1,
                page: 0,
                ..Place::default()
            },
            ..cursor
        };
        let mut left = remaining(&[("units", &[90, 30]), ("search", &[10])]);
        let fits = NextRun::Fits { calls: 4 };
        assert_eq!(
            next_run(job(&c, "mixed"), Some(&cursor), &mut left, false),
            fits
        );
    }

    #[test]
    fn regions_ahead_of_the_cursor_are_not_counted_again() {
        use crate::runner::cursor::Ahead;
        let c = config();
        let trending = job(&c, "trending");
        let ahead = |done: bool, page: u32| Ahead {
            key: "DE".into(),
            done,
            place: Place {
                page,
                token: (page > 0).then(|| "CAUQ2".to_string()),
                ..Place::default()
            },
        };
        let cursor = |a: Ahead| Cursor {
            run: 4,
            key: "GB".into(),
            place: Place {
                page: 1,
                token: Some("CAUQ1".into()),
                ..Place::default()
            },
            ahead: vec![a],
            input: None,
        };
        // GB pages 1 and 2, DE served, then US: 5 calls, not 8.
        let mut left = remaining(&[("units", &[90, 30])]);
        let run = next_run(trending, Some(&cursor(ahead(true, 0))), &mut left, false);
        assert_eq!(run, NextRun::Fits { calls: 5 });
        // DE from its page 2: 6.
        let mut left = remaining(&[("units", &[90, 30])]);
        let run = next_run(trending, Some(&cursor(ahead(false, 2))), &mut left, false);
        assert_eq!(run, NextRun::Fits { calls: 6 });
    }

    #[test]
    fn every_pool_of_a_call_must_fit() {
        let c = config();
        // US spends the one search; GB's pages of units still go, then its
        // second step needs a search.
        let mut left = remaining(&[("units", &[90, 30]), ("search", &[1])]);
        let want = stops("GB", 1, 0, 5, "search", 86_400);
        assert_eq!(next_run(job(&c, "mixed"), None, &mut left, false), want);
        assert_eq!(left, remaining(&[("units", &[84, 24]), ("search", &[0])]));
    }
}
