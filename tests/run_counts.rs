//! The upstream's own counts (`upstream_headers`) win downward, never
//! upward (issue 36, item 11): an upstream that repeats one count, as a
//! cache or a lagging replica does, is taken at the largest "spent
//! elsewhere" it implied within its period, so the ledger stops where the
//! upstream's count says, on both stores. (A later period freeing the
//! units: `run_examples::a_later_higher_count_clears_others_units`.)

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use crate::common::deployment::{Deployment, embedded_store};
use crate::common::redis::RedisServer;
use crate::common::yaml::{Config, Credential, Job, Step, limit};

/// A server that answers every request 200 with `headers`, as httpbin's
/// `/response-headers` does: how many requests it got.
fn echoing(headers: Vec<String>) -> (String, Arc<Mutex<usize>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let count = Arc::new(Mutex::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut head = Vec::new();
            let mut chunk = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&chunk[..n]),
                }
            }
            *seen.lock().unwrap() += 1;
            let body = br#"{"items":[{"id":"a"}]}"#;
            let mut out = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
                body.len()
            );
            for h in &headers {
                out.push_str(h);
                out.push_str("\r\n");
            }
            out.push_str("\r\n");
            let _ = conn.write_all(out.as_bytes());
            let _ = conn.write_all(body);
        }
    });
    (base, count)
}

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
    let (base, count) = echoing(vec![
        "X-RateLimit-Limit: 60".into(),
        "X-RateLimit-Remaining: 3".into(),
        format!("X-RateLimit-Reset: {}", now + 1800),
    ]);
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
    let r = d.quota(&["run"]);
    assert_eq!(r.code, 75, "{store}: {r:?}");
    let sent = *count.lock().unwrap();
    assert!(sent <= 4, "{store}: {sent} requests sent: {r:?}");
    let w = &d.status_json()["credentials"][0]["pools"][0]["windows"][0];
    assert_eq!(w["others"].as_u64(), Some(56), "{store}: {w}");
    assert_eq!(w["remaining"].as_u64(), Some(0), "{store}: {w}");
}
