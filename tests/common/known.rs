//! A deployment in a known state for the operator's reports (`status`,
//! `run --dry-run`, their OpenMetrics): its configuration, what its ledger
//! holds, and `portion` run with the wall clock frozen at [`REPORT_TIME`],
//! so every report is the same text each time.

use portion::ledger::JobStore;
use std::process::Command;

use portion::ledger::{At, Charge, EmbeddedLedger, Ledger, Pool};

use super::deployment::{Deployment, Ran, run};
use super::ledger::{charge, cost, pool, window};

/// The instant the reports are made at: [`at_report_time`] freezes the
/// wall clock there. (Not the ledger tests' `T0`: a date the snapshots
/// show, in RFC 3339.)
pub const REPORT_TIME: &str = "2026-11-20T12:00:00Z";

/// [`REPORT_TIME`] in µs since the epoch, as the ledger counts.
pub fn report_time_us() -> i64 {
    chrono::DateTime::parse_from_rfc3339(REPORT_TIME)
        .unwrap()
        .timestamp_micros()
}

/// The known configuration: credential `main` with pools `units` (100 a
/// day less 10% headroom, 30 an hour) and `search` (10 a day); jobs
/// `trending` (videos.list, 3 regions) and `music` (search.list) against
/// `upstream`.
pub fn known_config(upstream: &str) -> String {
    format!(
        r#"store: embedded:ledger.sqlite3
credentials:
  main:
    secret: {{ env: PORTION_TEST_NEVER_SET }}   # status and planning never read it
    pools:
      units:
        - {{ limit: 100, per: 24h, headroom: 10% }}
        - {{ limit: 30, per: 1h }}
      search:
        - {{ limit: 10, per: 24h }}
endpoints:
  videos.list: {{ cost: {{ units: 1 }} }}
  search.list: {{ cost: {{ search: 1 }} }}
jobs:
  trending:
    credential: main
    regions: [US, GB, DE]
    steps:
      - endpoint: videos.list
        request:
          url: {upstream}/youtube/v3/videos
          query: {{ regionCode: "{{region}}", key: "{{secret}}" }}
        paginate: {{ token: /nextPageToken, param: pageToken, max_pages: 3 }}
    output: out/trending
    schedule: every 30m
  music:
    credential: main
    regions: [US]
    steps:
      - endpoint: search.list
        request:
          url: {upstream}/youtube/v3/search
          query: {{ q: music, regionCode: "{{region}}", key: "{{secret}}" }}
    output: out/music
    schedule: every 6h
"#
    )
}

fn pools() -> (Pool, Pool) {
    (
        pool("units", vec![window(86_400, 100, 10), window(3600, 30, 0)]),
        pool("search", vec![window(86_400, 10, 0)]),
    )
}

/// The known state: 20 units of trending over the last day (5 at 20 h ago,
/// 10 at 3 h ago, 5 at 30 min ago), 3 searches 2 h ago, and trending's
/// cursor at GB page 1 after run 4.
pub fn known_ledger(d: &Deployment) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ledger = EmbeddedLedger::open(&d.path().join("ledger.sqlite3")).unwrap();
        let (units, search) = pools();
        let h = 3_600_000_000i64;
        let spend = |pool: &Pool, endpoint: &'static str, job: &'static str, at: i64, n: usize| {
            let ledger = ledger.clone();
            let cost = vec![cost(pool, 1)];
            async move {
                for i in 0..n {
                    let c = Charge {
                        endpoint,
                        job,
                        ..charge("main", &cost)
                    };
                    let d = ledger
                        .charge(&c, At::Fixed(at + i as i64 * 1_000_000))
                        .await
                        .unwrap();
                    assert!(d.is_allowed(), "{d:?}");
                }
            }
        };
        spend(
            &units,
            "videos.list",
            "trending",
            report_time_us() - 20 * h,
            5,
        )
        .await;
        spend(
            &units,
            "videos.list",
            "trending",
            report_time_us() - 3 * h,
            10,
        )
        .await;
        spend(&search, "search.list", "music", report_time_us() - 2 * h, 3).await;
        spend(
            &units,
            "videos.list",
            "trending",
            report_time_us() - h / 2,
            5,
        )
        .await;
        let cursor = r#"{"run":4,"region":"GB","step":0,"page":1,"token":"CAUQ1"}"#;
        ledger.save_cursor("trending", cursor).await.unwrap();
    });
}

/// `portion ARGS…` as of [`REPORT_TIME`], in UTC, without colour: see
/// [`frozen_clock_cmd`].
pub fn at_report_time(d: &Deployment, args: &[&str]) -> Ran {
    run(frozen_clock_cmd(d, args).env("NO_COLOR", "1"))
}

/// `portion ARGS…` in `d`, not yet run, under `faketime` (libfaketime) with
/// the wall clock frozen at [`REPORT_TIME`] (an absolute time without '@'
/// does not run on), which is the clock the embedded store reads. The
/// monotonic clock is left alone, so tokio's timers still run.
pub fn frozen_clock_cmd(d: &Deployment, args: &[&str]) -> Command {
    // libfaketime reads an absolute time in the process's zone: TZ=UTC.
    let frozen = chrono::DateTime::parse_from_rfc3339(REPORT_TIME)
        .unwrap()
        .format("%Y-%m-%d %H:%M:%S")
        .to_string();
    let mut c = d.cmd_via(&["faketime", "-f", &frozen], args);
    c.env("FAKETIME_DONT_FAKE_MONOTONIC", "1").env("TZ", "UTC");
    c
}
