//! Shares (issue 28) as `portion run` meets them: a run of job J spends as
//! J's share, and `run --dry-run` plans each job within what its share can
//! take. The real binary, both stores, the stand-in upstream.

use crate::common::deployment::{Deployment, embedded_store, videos_job};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;
use crate::common::yaml::{Config, Credential, limit};

/// Credential `main`: 10 units an hour, 6 kept for `trending`; `backfill`
/// (no share, first in the file, US) and `trending` (GB), each up to 12
/// pages of a unit.
fn deployment(up: &Standin, store: Option<&str>) -> Deployment {
    let d = Deployment::new("");
    let store = store.map_or_else(|| embedded_store(&d), str::to_string);
    let main = Credential::new("main")
        .pool("units", &[limit(10, "1h")])
        .set("shares", "{ trending: { reserve: 6 } }");
    let jobs = [
        videos_job("backfill", "main", &["US"], 12, &up.base()),
        videos_job("trending", "main", &["GB"], 12, &up.base()),
    ];
    let yaml = Config::new(&store)
        .lock_ttl("2s")
        .http("{ timeout: 5s, connect_timeout: 2s, retries: 1, backoff: 20ms }")
        .credential(main)
        .endpoint("videos.list", "{ units: 1 }")
        .jobs_text(&jobs.concat())
        .render();
    d.write(&yaml);
    d
}

#[test]
fn a_run_spends_as_its_jobs_share() {
    let redis = RedisServer::start();
    for store in [None, Some(redis.url())] {
        let up = Standin::start(&["--pages", "12"]);
        let d = deployment(&up, store.as_deref());
        let kind = store.as_deref().unwrap_or("embedded");
        // The greedy backfill stops at the budget less trending's reserve.
        let r = d.portion(&["run", "backfill"]);
        assert_eq!(r.code, 75, "{kind}: {r:?}");
        assert!(
            r.stderr.contains("kept for trending: 6 units"),
            "{kind}: {r:?}"
        );
        let regions =
            |up: &Standin| -> Vec<String> { up.seen().into_iter().map(|s| s.region).collect() };
        assert_eq!(regions(&up), ["US"; 4], "{kind}");
        // Trending's run gets its reserve, all of it.
        let r = d.portion(&["run", "trending"]);
        assert_eq!(r.code, 75, "{kind}: {r:?}");
        let seen = regions(&up);
        assert_eq!(seen[4..], ["GB"; 6], "{kind}: {r:?}");
    }
}

#[test]
fn a_dry_run_plans_each_job_within_its_share() {
    let up = Standin::start(&["--pages", "12"]);
    let d = deployment(&up, None);
    let r = d.portion(&["run", "--dry-run", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let plan: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let calls: Vec<(String, u64)> = (plan["credentials"][0]["jobs"].as_array().unwrap().iter())
        .map(|j| {
            let next = &j["next_run"];
            (
                next["outcome"].as_str().unwrap().to_string(),
                next["calls"].as_u64().unwrap(),
            )
        })
        .collect();
    // Backfill (planned first) within the 4 trending does not keep, then
    // trending within the 6 left; nothing was sent.
    assert_eq!(calls, [("stops".into(), 4), ("stops".into(), 6)], "{r:?}");
    assert!(up.seen().is_empty());
    // Trending alone may take all 10.
    let r = d.portion(&["run", "--dry-run", "--json", "trending"]);
    let plan: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        plan["credentials"][0]["jobs"][0]["next_run"]["calls"], 10,
        "{r:?}"
    );
}
