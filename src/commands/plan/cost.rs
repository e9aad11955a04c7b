//! What one run of a job costs, and whether the next one fits what remains
//! now: the arithmetic of a single run, apart from the store and the text
//! so it can be checked on exact numbers. [`super::schedule`] builds a day
//! of runs on it. Nothing here reads a store or a clock.

use std::collections::BTreeMap;

use super::model::NextRun;
use crate::config::{Job, Step};
use crate::ledger::{Pool, PoolCost, Window};
use crate::runner::cursor::{Cursor, Start};

/// What remains now, per (pool, window index): the credential's jobs spend
/// it in turn, so each job's next run sees what the earlier ones left.
pub type Remaining = BTreeMap<(String, usize), u64>;

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
    remaining: &mut Remaining,
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
    let mut walk = Walk {
        remaining,
        observe,
        calls: 0,
        observed: None,
    };
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

/// The calls the next run makes of one step in one region: `first` up to
/// before `last`, less those an earlier run already wrote.
struct Pages {
    first: u64,
    last: u64,
    written: Vec<u64>,
}

impl Pages {
    /// The pages of `step`, from the cursor's place when it is in it.
    fn of(step: &Step, at_cursor: Option<&Start>) -> Self {
        let first_page = at_cursor.map_or(0, |f| f.place.page);
        // A fan-out the cursor is inside of knows its values left.
        let last = match (
            &step.for_each,
            at_cursor.and_then(|f| f.place.values_left()),
        ) {
            (Some(f), Some(left)) => {
                u64::from(first_page) + (left as u64).div_ceil(u64::from(f.batch))
            }
            _ => step.max_requests(),
        };
        // A batch an earlier run wrote out of order is not sent again.
        let written: Vec<u64> = match (&step.for_each, at_cursor) {
            (Some(f), Some(c)) if c.place.batch_size == Some(f.batch) => {
                c.place.written.iter().map(|&w| u64::from(w)).collect()
            }
            _ => Vec::new(),
        };
        Pages {
            first: u64::from(first_page),
            last,
            written,
        }
    }
}

/// The next run as it is walked: what it has spent and counted so far.
struct Walk<'r> {
    remaining: &'r mut Remaining,
    observe: bool,
    calls: u64,
    /// (observe mode: the first call that would not have fitted, and how many)
    observed: Option<NextRun>,
}

impl Walk<'_> {
    /// Spend the `pages` of step `s` in `region`; where the run stops
    /// (not in observe mode), if it stops there.
    fn step(&mut self, region: &str, s: usize, step: &Step, pages: &Pages) -> Option<NextRun> {
        // Pages in spans, as many at once as fit: a budget near 2^53 and a
        // fan-out of as many requests must not be counted one by one.
        // Spans end before each page already written.
        let mut page = pages.first;
        while page < pages.last {
            if pages.written.contains(&page) {
                page += 1;
                continue;
            }
            let end = pages
                .written
                .iter()
                .copied()
                .filter(|&w| w > page)
                .fold(pages.last, u64::min);
            let span = end - page;
            let fit = span.min(fitting(&step.cost, self.remaining));
            spend(&step.cost, self.remaining, fit);
            (self.calls, page) = (self.calls.saturating_add(fit), page + fit);
            if fit == span {
                continue;
            }
            let refused = span - fit;
            let at = u32::try_from(page).unwrap_or(u32::MAX);
            if let Some(stop) = self.refused(region, s, &step.cost, at, refused) {
                return Some(stop);
            }
            page += refused;
        }
        None
    }

    /// `refused` calls of `cost` at `page` do not fit: the run stops there,
    /// or in observe mode they go out all the same, each refused (the full
    /// window stays full), and are counted.
    fn refused(
        &mut self,
        region: &str,
        step: usize,
        cost: &[PoolCost],
        page: u32,
        refused: u64,
    ) -> Option<NextRun> {
        let (pool, window) =
            full_window(cost, self.remaining).expect("a call that does not fit has a full window");
        let (region, pool, per_seconds) =
            (region.to_string(), pool.name.clone(), window.per.as_secs());
        if !self.observe {
            return Some(NextRun::Stops {
                region,
                step,
                page,
                calls: self.calls,
                pool,
                per_seconds,
            });
        }
        match &mut self.observed {
            Some(NextRun::Observes { refused: r, .. }) => *r = r.saturating_add(refused),
            _ => {
                self.observed = Some(NextRun::Observes {
                    calls: 0,
                    refused,
                    region,
                    step,
                    page,
                    pool,
                    per_seconds,
                })
            }
        }
        spend(cost, self.remaining, refused);
        self.calls = self.calls.saturating_add(refused);
        None
    }

    /// The run walked to its end: it fits, or (observe mode) what it
    /// sent that did not.
    fn end(self) -> NextRun {
        match self.observed {
            Some(mut o) => {
                if let NextRun::Observes { calls: all, .. } = &mut o {
                    *all = self.calls;
                }
                o
            }
            None => NextRun::Fits { calls: self.calls },
        }
    }
}

/// The first window, in the order of `cost`, that has less left than one
/// call of `cost` spends from it.
fn full_window<'c>(cost: &'c [PoolCost], remaining: &Remaining) -> Option<(&'c Pool, &'c Window)> {
    for c in cost {
        for (w, window) in c.pool.windows.iter().enumerate() {
            let left = remaining
                .get(&(c.pool.name.clone(), w))
                .copied()
                .unwrap_or(0);
            if left < c.units {
                return Some((&c.pool, window));
            }
        }
    }
    None
}

/// How many calls of `cost` fit in `remaining` (any number when it costs
/// nothing).
fn fitting(cost: &[PoolCost], remaining: &Remaining) -> u64 {
    let mut fit = u64::MAX;
    for c in cost.iter().filter(|c| c.units > 0) {
        for w in 0..c.pool.windows.len() {
            let left = remaining
                .get(&(c.pool.name.clone(), w))
                .copied()
                .unwrap_or(0);
            fit = fit.min(left / c.units);
        }
    }
    fit
}

/// Take `n` calls of `cost` from `remaining` (they were checked to fit, or
/// an observe-mode credential records them all the same: none left then).
fn spend(cost: &[PoolCost], remaining: &mut Remaining, n: u64) {
    for c in cost {
        for w in 0..c.pool.windows.len() {
            if let Some(left) = remaining.get_mut(&(c.pool.name.clone(), w)) {
                *left = left.saturating_sub(c.units.saturating_mul(n));
            }
        }
    }
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
    fn remaining(of: &[(&str, &[u64])]) -> Remaining {
        let mut r = Remaining::new();
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
