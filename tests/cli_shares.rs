//! Shares (issue 28) as scripts and jobs meet them: `quota charge --job`
//! from separate processes against both stores, the refusal naming the
//! share that holds the units, a share's limit, and the configuration's
//! rules (reserves within every budget, else 78).

use crate::common::deployment::{Deployment, Ran, embedded_store};
use crate::common::redis::RedisServer;
use crate::common::yaml::{Config, Credential, limit};

/// Credential `main`: 100 units an hour, 60% kept for trending, 10 units
/// for search, which may take at most 30%.
fn config(store: &str, shares: &str) -> String {
    let main = Credential::new("main")
        .pool("units", &[limit(100, "1h")])
        .set("shares", shares);
    Config::new(store).credential(main).render()
}

const SHARES: &str = r#"{ trending: { reserve: "60%" }, search: { reserve: 10, limit: "30%" } }"#;

fn on_each_store(test: impl Fn(&Deployment, &str)) {
    let redis = RedisServer::start();
    let d = Deployment::new("");
    let embedded = embedded_store(&d);
    d.write(&config(&embedded, SHARES));
    test(&d, &embedded);
    let d = Deployment::new(&config(&redis.url(), SHARES));
    test(&d, &redis.url());
}

fn charge(d: &Deployment, job: &str, units: u64) -> Ran {
    d.quota(&[
        "charge",
        "main",
        "--job",
        job,
        "--cost",
        &format!("units={units}"),
    ])
}

#[test]
fn a_reserve_is_held_against_a_greedy_neighbour_across_processes() {
    on_each_store(|d, kind| {
        let r = charge(d, "backfill", 30);
        assert_eq!(r.code, 0, "{kind}: {r:?}");
        // 70 left: trending's 60 and search's 10, kept for them.
        let r = charge(d, "backfill", 1);
        assert_eq!(r.code, 75, "{kind}: {r:?}");
        assert!(
            r.stderr.contains(
                "the 1h window of pool 'units' is not full, but kept for trending: 60 units"
            ),
            "{kind}: {r:?}"
        );
        assert_eq!(charge(d, "trending", 60).code, 0, "{kind}");
        // Search takes its own, up to its limit of 30.
        let r = charge(d, "search", 31);
        assert_eq!(r.code, 78, "{kind}: {r:?}");
        assert!(
            r.stderr.contains("share search's limit is 30 units"),
            "{kind}: {r:?}"
        );
        assert_eq!(charge(d, "search", 10).code, 0, "{kind}");
        let r = charge(d, "trending", 1);
        assert_eq!(r.code, 75, "{kind}: {r:?}");
        assert!(r.stderr.contains("is full"), "{kind}: {r:?}");
    });
}

#[test]
fn reserves_above_a_budget_are_a_configuration_error() {
    let d = Deployment::new("");
    let store = embedded_store(&d);
    for (shares, field, says) in [
        (
            r#"{ trending: { reserve: "60%" }, search: { reserve: 50 } }"#,
            "credentials.main.shares",
            "the reserves add up to 110 units of pool units: more than its budget of 100",
        ),
        (
            r#"{ search: { reserve: 20, limit: 10 } }"#,
            "credentials.main.shares.search.reserve",
            "above the share's limit of 10",
        ),
        (
            r#"{ search: { reserve: "150%" } }"#,
            "credentials.main.shares.search.reserve",
            "neither units nor a percentage",
        ),
    ] {
        d.write(&config(&store, shares));
        let r = d.quota(&["check"]);
        assert_eq!(r.code, 78, "{shares}: {r:?}");
        assert!(
            r.stderr.contains(field) && r.stderr.contains(says),
            "{shares}: {r:?}"
        );
    }
}
