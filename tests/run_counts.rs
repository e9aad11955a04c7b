//! The upstream's own counts (`upstream_headers`) win downward, never
//! upward (issue 36, item 11): an upstream that repeats one count, as a
//! cache or a lagging replica does, is taken at the largest "spent
//! elsewhere" it implied within its period, so the ledger stops where the
//! upstream's count says, on both stores. (A later period freeing the
//! units: `run_examples::a_later_higher_count_clears_others_units`.)

use crate::common::deployment::{Deployment, embedded_store};
use crate::common::redis::RedisServer;
use crate::common::server::{raw, serving};
use crate::common::yaml::{Config, Credential, Job, Step, limit};

/// Every answer says 3 of 60 remain, with one reset: after the first, 56
/// are spent elsewhere (60 - 1 of ours - 3), and the later answers' lower
/// figures (55, 54, …: one more of ours each time) are the same stale
/// count. A job of 10 regions sends at most 4 requests and stops with 75.
#[test]
fn a_repeated_count_never_gives_back_units_spent_elsewhere() {
    let d = Deployment::new("");
    a_repeated_count_stops_the_job(&embedded_store(&d), &d);
    let server = RedisServer::start();
    a_repeated_count_stops_the_job(&server.url(), &Deployment::new(""));
}

fn a_repeated_count_stops_the_job(store: &str, d: &Deployment) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // (every answer 200 with these headers, as httpbin's
    // `/response-headers` gives them)
    let reset = format!("X-RateLimit-Reset: {}", now + 1800);
    let (base, heads) = serving(move |_| {
        let headers = [
            "Content-Type: application/json",
            "X-RateLimit-Limit: 60",
            "X-RateLimit-Remaining: 3",
            reset.as_str(),
        ];
        raw("200 OK", &headers, br#"{"items":[{"id":"a"}]}"#)
    });
    let regions: Vec<String> = (0..10).map(|i| format!("R{i}")).collect();
    let regions: Vec<&str> = regions.iter().map(String::as_str).collect();
    let ask = Step::new("api")
        .url(&format!("\"{base}/items\""))
        .query(r#"{ region: "{region}", key: "{secret}" }"#);
    let yaml = Config::new(store)
        .lock_ttl("2s")
        .http("{ timeout: 5s, connect_timeout: 2s, retries: 0, backoff: 20ms }")
        .credential(
            Credential::new("main")
                .set("upstream_headers", "github")
                .pool("requests", &[limit(60, "1h")]),
        )
        .endpoint("api", "1")
        .job(Job::new("j", "main").regions(&regions).step(ask))
        .render();
    d.write(&yaml);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{store}: {r:?}");
    let sent = heads.lock().unwrap().len();
    assert!(sent <= 4, "{store}: {sent} requests sent: {r:?}");
    let w = &d.status_json()["credentials"][0]["pools"][0]["windows"][0];
    assert_eq!(w["others"].as_u64(), Some(56), "{store}: {w}");
    assert_eq!(w["remaining"].as_u64(), Some(0), "{store}: {w}");
}
