//! Numbers and names at the edges of what a configuration may hold: too
//! large is a 78 naming the file and the field, before anything is charged;
//! the largest accepted ones break nothing later (no panic in the planner,
//! no overflow in a charge, no page name the file system refuses).

use crate::common::deployment::{Deployment, embedded_store};
use crate::common::standin::Standin;

/// 2^53 - 1: the most units a limit or a cost may be.
const MAX_UNITS: &str = "9007199254740991";

fn base(store: &str, upstream: &str) -> String {
    format!(
        r#"store: {store}
credentials:
  main:
    secret: {{ file: key }}
    pools:
      units:
        - {{ limit: 100, per: 1h }}
endpoints:
  videos.list: {{ cost: {{ units: 1 }} }}
jobs:
  trending:
    credential: main
    schedule: every 1h
    regions: [US]
    steps:
      - endpoint: videos.list
        request:
          url: {upstream}/youtube/v3/videos
          query: {{ regionCode: "{{region}}", key: "{{secret}}" }}
    output: out/trending
"#
    )
}

#[test]
fn numbers_too_large_for_the_ledger_are_78_naming_the_field() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let good = base(&embedded_store(&d), &up.base());
    d.write(&good);
    assert_eq!(d.portion(&["check"]).code, 0);
    let limit = "credentials.main.pools.units[0].limit";
    let per = "credentials.main.pools.units[0].per";
    d.assert_each_edit_exits_78(
        &good,
        &[
            (
                "limit 2^53",
                "limit: 100",
                "limit: 9007199254740992",
                &[limit, "2^53 - 1"],
            ),
            (
                "limit i64::MAX",
                "limit: 100",
                "limit: 9223372036854775807",
                &[limit, "2^53 - 1"],
            ),
            (
                "per past i64 µs",
                "per: 1h",
                "per: 2600000000h",
                &[per, "longest window, 87600h"],
            ),
            (
                "per absurd",
                "per: 1h",
                "per: 1000000000000000h",
                &[per, "longest window"],
            ),
            (
                "per a day too long",
                "per: 1h",
                "per: 87601h",
                &[per, "longest window"],
            ),
            (
                "cost 2^53",
                "cost: { units: 1 }",
                "cost: { units: 9007199254740992 }",
                &["endpoints.videos.list.cost.units", "2^53 - 1"],
            ),
            (
                "estimate 2^53",
                "cost: { units: 1 }",
                "cost: { units: { estimate: 9007199254740992, actual: /n } }",
                &["endpoints.videos.list.cost.units.estimate", "2^53 - 1"],
            ),
            (
                "schedule too long",
                "every 1h",
                "every 87601h",
                &["jobs.trending.schedule", "longest window"],
            ),
        ],
    );
    assert!(up.seen().is_empty(), "nothing was sent: {:?}", up.seen());
    assert!(
        !d.path().join("ledger.sqlite3").exists(),
        "nothing was charged"
    );
}

/// Every number at its largest, and a fan-out of fan-outs whose worst case
/// is past u64: check, dry-run and status answer, and charges are exact.
#[test]
fn the_largest_numbers_accepted_panic_nothing() {
    let d = Deployment::new("");
    let yaml = format!(
        r#"store: {store}
credentials:
  main:
    secret: {{ file: key }}
    pools:
      units:
        - {{ limit: {MAX_UNITS}, per: 87600h, headroom: 1 }}
        - {{ limit: 1, per: 87599h }}
      tokens:
        - {{ limit: {MAX_UNITS}, per: 87600h }}
endpoints:
  list: {{ cost: {{ units: 1 }} }}
  big: {{ cost: {{ tokens: {MAX_UNITS} }} }}
jobs:
  wide:
    credential: main
    schedule: every 87600h
    regions: [a, b, c]
    steps:
      - endpoint: list
        request: {{ url: "http://127.0.0.1:1/list" }}
        paginate: {{ token: /next, param: t, max_pages: 10000 }}
      - endpoint: big
        request: {{ url: "http://127.0.0.1:1/big", query: {{ id: "{{batch}}" }} }}
        for_each: {{ from: /items/*, per_page: 1000000 }}
      - endpoint: big
        request: {{ url: "http://127.0.0.1:1/big", query: {{ id: "{{batch}}" }} }}
        for_each: {{ from: /items/*, per_page: 1000000 }}
    output: out/wide
"#,
        store = embedded_store(&d)
    );
    d.write(&yaml);
    for args in [
        &["check"][..],
        &["run", "--dry-run"],
        &["run", "--dry-run", "--json"],
        &["status"],
        &["status", "--json"],
    ] {
        let r = d.portion(args);
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
    }
    let charge = |cost: &str| d.portion(&["charge", "main", "--cost", cost]).code;
    // Above 2^53 - 1: refused as configuration, before any store is asked.
    assert_eq!(charge("tokens=4611686018427387904"), 78);
    assert_eq!(charge("tokens=9007199254740992"), 78);
    // The whole budget, then nothing more.
    assert_eq!(charge(&format!("tokens={MAX_UNITS}")), 0);
    assert_eq!(charge("tokens=1"), 75);
    assert_eq!(charge("units=1"), 0);
    assert_eq!(charge("units=1"), 75);
    let r = d.portion(&["run", "--dry-run"]);
    assert_eq!(r.code, 0, "{r:?}");
}

/// A job name of 64 characters and a region of 150 bytes encoded: each is
/// allowed alone, but together a page's temporary name would pass the 255
/// bytes of a file name, and every run would charge a call then fail.
#[test]
fn a_job_and_region_whose_page_names_cannot_fit_are_78() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let job = "j".repeat(64);
    let good = base(&embedded_store(&d), &up.base())
        .replace("  trending:", &format!("  {job}:"))
        .replace("[US]", "[US, \"REGION\"]");
    let slashes = "/".repeat(50);
    d.assert_each_edit_exits_78(
        &good,
        &[
            (
                "150 bytes encoded",
                "REGION",
                &slashes,
                &[
                    &format!("jobs.{job}.regions[1]"),
                    &format!("job '{job}' and region '{slashes}'"),
                    "255",
                ],
            ),
            (
                "62 bytes",
                "REGION",
                &"r".repeat(62),
                &[&format!("jobs.{job}.regions[1]"), "up to 256 bytes"],
            ),
        ],
    );
    assert!(up.seen().is_empty(), "nothing was sent: {:?}", up.seen());
    assert!(
        !d.path().join("ledger.sqlite3").exists(),
        "nothing was charged"
    );

    // 61 bytes is the most beside a 64-character name: it runs.
    d.write(&good.replace("REGION", &"r".repeat(61)));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let pages = std::fs::read_dir(d.path().join("out/trending"))
        .unwrap()
        .count();
    assert_eq!(pages, 2, "one page per region");
}
