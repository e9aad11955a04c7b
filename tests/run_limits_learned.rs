//! A pool whose limit is the upstream's (`{ from: upstream, per: 1h }`,
//! issue 38): the budget is the last limit the upstream announced, kept in
//! the store so another host (another file, the same Redis) uses it
//! without being told; a `limit` beside it caps it; an upstream that never
//! announces one ends the run naming the field. The real binary, a small
//! server in the test answering 200 page after page.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::deployment::{Deployment, embedded_store, one_region_job};
use crate::common::redis::RedisServer;
use crate::common::server::{raw, serving};
use crate::common::yaml::{Config, Credential, Job, Step};

/// Pages without end (each token a new one), each answer with `headers`.
fn pages(headers: &'static [&'static str]) -> (String, Arc<Mutex<Vec<String>>>) {
    let served = AtomicUsize::new(0);
    serving(move |_| {
        let n = served.fetch_add(1, Ordering::SeqCst);
        let body = format!(r#"{{"items":[{{"id":"a"}}],"nextPageToken":"p{n}"}}"#);
        raw("200 OK", headers, body.as_bytes())
    })
}

const SAYS_3: &[&str] = &[
    "X-RateLimit-Limit: 3",
    "X-RateLimit-Remaining: 100",
    "X-RateLimit-Reset: 4000000000",
];

/// A deployment of job `job` (up to `max_pages` pages of `base`) on
/// `store`, its pool's 1h window `window`.
fn learned(store: Option<&str>, window: &str, job: &str, base: &str, max_pages: u32) -> Deployment {
    let d = Deployment::new("");
    let store = store.map_or_else(|| embedded_store(&d), String::from);
    let job = one_region_job(job, &format!("{base}/items"))
        .replace("max_pages: 10", &format!("max_pages: {max_pages}"));
    let yaml = Config::new(&store)
        .lock_ttl("2s")
        .http("{ timeout: 5s, connect_timeout: 2s, retries: 1, backoff: 20ms }")
        .credential(
            Credential::new("main")
                .set("upstream_headers", "github")
                .pool("requests", &[window]),
        )
        .endpoint("api", "1")
        .jobs_text(&job)
        .render();
    d.write(&yaml);
    d
}

#[test]
fn a_learned_budget_is_the_same_on_two_hosts() {
    let redis = RedisServer::start();
    // Host A: its first answer says 3 an hour; it sends 2.
    let (base_a, heads_a) = pages(SAYS_3);
    let a = learned(
        Some(&redis.url()),
        "{ from: upstream, per: 1h }",
        "a",
        &base_a,
        2,
    );
    let r = a.portion(&["check"]);
    assert!(
        r.stdout
            .contains("limit from the upstream (the last it announced, kept in the store)"),
        "{r:?}"
    );
    let r = a.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(heads_a.lock().unwrap().len(), 2);
    // Host B: another file on the same Redis, an upstream that says
    // nothing: the budget learned by A holds, 1 call left of 3.
    let (base_b, heads_b) = pages(&[]);
    let b = learned(
        Some(&redis.url()),
        "{ from: upstream, per: 1h }",
        "b",
        &base_b,
        10,
    );
    let r = b.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(
        r.stderr
            .contains("the 1h window of pool 'requests' is full"),
        "{r:?}"
    );
    assert_eq!(heads_b.lock().unwrap().len(), 1, "{r:?}");
    // Both say where the budget came from, and when.
    for d in [&a, &b] {
        let r = d.portion(&["status"]);
        assert!(
            r.stdout
                .contains("pool requests, 1h window: its limit is the upstream's: 3 (announced "),
            "{r:?}"
        );
        let json = d.status_json();
        let pool = &json["credentials"][0]["pools"][0];
        let from = &pool["budgets_from_upstream"][0];
        assert_eq!(
            (from["per_seconds"].as_u64(), from["limit"].as_u64()),
            (Some(3600), Some(3)),
            "{pool}"
        );
        assert!(from["seen"].is_string(), "{pool}");
        let w = &pool["windows"][0];
        assert_eq!(
            (w["budget"].as_u64(), w["used"].as_u64()),
            (Some(3), Some(3))
        );
    }
}

#[test]
fn a_cap_lower_than_the_learned_limit_is_the_budget() {
    let (base, heads) = pages(SAYS_3);
    let d = learned(
        None,
        "{ from: upstream, per: 1h, limit: 2 }",
        "j",
        &base,
        10,
    );
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert_eq!(heads.lock().unwrap().len(), 2, "{r:?}");
    let r = d.portion(&["status"]);
    assert!(
        r.stdout
            .contains("its limit is the upstream's: 3, capped at 2 (announced "),
        "{r:?}"
    );
    let json = d.status_json();
    let w = &json["credentials"][0]["pools"][0]["windows"][0];
    assert_eq!(w["budget"].as_u64(), Some(2), "{w}");
    // A cap above it: the upstream's 3.
    let (base, heads) = pages(SAYS_3);
    let d = learned(
        None,
        "{ from: upstream, per: 1h, limit: 50 }",
        "j",
        &base,
        10,
    );
    assert_eq!(d.portion(&["run"]).code, 75);
    assert_eq!(heads.lock().unwrap().len(), 3);
}

#[test]
fn an_upstream_that_never_announces_the_limit_ends_the_run_naming_the_field() {
    let (base, heads) = pages(&["X-RateLimit-Remaining: 100"]);
    let d = learned(None, "{ from: upstream, per: 1h }", "j", &base, 10);
    let r = d.portion(&["status"]);
    assert!(
        r.stdout.contains("its limit is the upstream's, not announced yet: the next run sends one request to learn it"),
        "{r:?}"
    );
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 78, "{r:?}");
    assert!(
        r.stderr.contains("credentials.main.pools.requests[0].from")
            && r.stderr.contains("announced no limit of a 1h window"),
        "{r:?}"
    );
    assert_eq!(heads.lock().unwrap().len(), 1, "one request learns it");
    // Without upstream_headers there is nothing to learn from: 78 before
    // anything is sent.
    let yaml = std::fs::read_to_string(d.config()).unwrap();
    d.write(&yaml.replace("    upstream_headers: github\n", ""));
    for cmd in ["check", "run"] {
        let r = d.portion(&[cmd]);
        assert_eq!(r.code, 78, "{r:?}");
        assert!(
            r.stderr.contains("credentials.main.pools.requests[0].from")
                && r.stderr.contains("set upstream_headers"),
            "{r:?}"
        );
    }
    assert_eq!(heads.lock().unwrap().len(), 1);
    // A window's limit from elsewhere, none at all, or a calendar one.
    let base = std::fs::read_to_string(d.config()).unwrap();
    let at = "credentials.main.pools.requests[0]";
    d.assert_each_edit_exits_78(
        &base,
        &[
            (
                "another source",
                "from: upstream",
                "from: elsewhere",
                &[
                    &format!("{at}.from"),
                    "the one source of a limit is upstream",
                ],
            ),
            (
                "no limit",
                "{ from: upstream, per: 1h }",
                "{ per: 1h }",
                &[&format!("{at}.limit"), "missing"],
            ),
            (
                "a calendar window",
                "{ from: upstream, per: 1h }",
                "{ from: upstream, per: 1h, aligned: UTC }",
                &[&format!("{at}.aligned"), "sliding"],
            ),
        ],
    );
    assert_eq!(heads.lock().unwrap().len(), 1);
}

/// Four regions side by side (`concurrency: 4`) before anything is
/// learned: one request learns the limit, the others wait for its answer
/// and then charge against it: 3 sent in all, not 4.
#[test]
fn one_request_learns_the_limit_while_the_others_wait() {
    let (base, heads) = pages(SAYS_3);
    let d = learned(None, "{ from: upstream, per: 1h }", "j", &base, 1);
    let ask = Step::new("api")
        .url(&format!("\"{base}/items\""))
        .query(r#"{ regionCode: "{region}", key: "{secret}" }"#);
    let job = Job::new("j", "main")
        .regions(&["US", "GB", "DE", "FR"])
        .set("concurrency", "4")
        .step(ask)
        .to_string();
    let yaml = std::fs::read_to_string(d.config()).unwrap();
    let start = yaml.find("jobs:").unwrap();
    d.write(&format!("{}jobs:\n{job}", &yaml[..start]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert_eq!(heads.lock().unwrap().len(), 3, "{r:?}");
}
