//! Incremental values that can always be sent back, and that never go
//! backwards: a value longer than 256 bytes, or of another kind than the
//! key's (an `"N/A"` among times), is ignored with a warning and never
//! kept; a walk resumed across runs keeps its largest value with its
//! cursor, so the value it completes with is the whole walk's. From a
//! small server in the test whose pages are not sorted by time.

use crate::common::deployment::{Deployment, embedded_store};
use crate::common::redis::RedisServer;
use crate::common::server::{raw, serving};
use crate::common::yaml::{Config, Credential, Job, Step, limit};

/// The `page` and `since` of a request head's query.
fn param<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    let target = head.split(' ').nth(1)?;
    target
        .split_once('?')?
        .1
        .split('&')
        .find_map(|p| p.strip_prefix(&format!("{name}=")[..]))
}

fn json(body: String) -> Vec<u8> {
    raw(
        "200 OK",
        &["Content-Type: application/json"],
        body.as_bytes(),
    )
}

/// Three pages, not sorted by time: the walk's largest is on page 1.
fn unsorted(head: &str) -> Vec<u8> {
    let body = match param(head, "page") {
        None => {
            r#"{"items":[{"updated_at":"2024-03-01T00:00:00Z"},{"updated_at":"2024-03-05T00:00:00Z"}],"next":"2"}"#
        }
        Some("2") => r#"{"items":[{"updated_at":"2024-03-04T00:00:00Z"}],"next":"3"}"#,
        _ => r#"{"items":[{"updated_at":"2024-03-02T12:00:00-05:00"}]}"#,
    };
    json(body.to_string())
}

/// One page whose values hold one too long to send and one of another kind.
fn odd(_head: &str) -> Vec<u8> {
    let long = "9".repeat(70_000);
    json(format!(
        r#"{{"items":[{{"updated_at":"2024-01-01T00:00:00Z"}},{{"updated_at":"2099-{long}"}},{{"updated_at":"N/A"}}]}}"#
    ))
}

fn yaml(store: &str, base: &str, units: u64) -> String {
    yaml_from(store, base, units, ", initial: \"2020-01-01T00:00:00Z\"")
}

/// [`yaml`] with `initial` as given (`""`: none).
fn yaml_from(store: &str, base: &str, units: u64, initial: &str) -> String {
    Config::new(store)
        .lock_ttl("2s")
        .http("{ timeout: 5s, connect_timeout: 2s, retries: 0, backoff: 5ms }")
        .credential(Credential::new("main").pool("units", &[limit(units, "1h")]))
        .endpoint("api", "{ units: 1 }")
        .job(
            Job::new("events", "main").regions(&["r"]).step(
                Step::new("api")
                    .url(&format!("\"{base}/events\""))
                    .query(r#"{ key: "{secret}" }"#)
                    .paginate("{ token: /next, param: page, max_pages: 10 }")
                    .set(
                        "incremental",
                        &format!("{{ from: /items/*/updated_at, param: since{initial} }}"),
                    ),
            ),
        )
        .render()
}

/// The `since` each request sent, decoded.
fn sent(heads: &[String]) -> Vec<String> {
    heads
        .iter()
        .map(|h| {
            param(h, "since")
                .unwrap_or("-")
                .replace("%3A", ":")
                .replace("%2B", "+")
        })
        .collect()
}

/// Run 1 stops mid-walk after pages 1–2 (values up to 2024-03-05), run 2
/// finishes it with page 3 (2024-03-02T12:00-05:00): run 3 asks from the
/// walk's largest, 2024-03-05, not its last run's.
#[test]
fn a_walk_resumed_across_runs_completes_with_its_largest_value() {
    for redis in [None, Some(RedisServer::start())] {
        let (base, heads) = serving(unsorted);
        let d = Deployment::new("");
        let store = redis
            .as_ref()
            .map_or_else(|| embedded_store(&d), RedisServer::url);
        d.write(&yaml(&store, &base, 2));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 75, "{r:?}");
        assert_eq!(heads.lock().unwrap().len(), 2, "{r:?}");
        d.write(&yaml(&store, &base, 100));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(heads.lock().unwrap().len(), 3, "{r:?}");
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        let sent = sent(&heads.lock().unwrap());
        assert_eq!(sent[3], "2024-03-05T00:00:00Z", "{sent:?}");
    }
}

/// A value too long to send and one of another kind are ignored, said,
/// and never kept: the next walk asks from the largest time.
#[test]
fn a_value_too_long_or_of_another_kind_is_ignored_and_never_kept() {
    let (base, heads) = serving(odd);
    let d = Deployment::new("");
    d.write(&yaml(&embedded_store(&d), &base, 100));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains(
            "1 value(s) at the incremental pointer /items/*/updated_at are longer than 256 bytes"
        ),
        "{r:?}"
    );
    assert!(
        r.stderr
            .contains("are not a time, the kind of the key's values (\"N/A\", say): ignored"),
        "{r:?}"
    );
    for _ in 0..2 {
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
    }
    let sent = sent(&heads.lock().unwrap());
    assert_eq!(
        sent,
        [
            "2020-01-01T00:00:00Z",
            "2024-01-01T00:00:00Z",
            "2024-01-01T00:00:00Z"
        ],
        "{sent:?}"
    );
}

/// One page whose first value is `"N/A"`, then times.
fn na_first(_head: &str) -> Vec<u8> {
    json(r#"{"items":[{"updated_at":"N/A"},{"updated_at":"2024-03-05T00:00:00Z"},{"updated_at":"2024-03-01T00:00:00Z"}]}"#.to_string())
}

/// A key with no value kept and no `initial`: the page's best kind (a
/// time) is the key's, not the kind of its first value; `"N/A"` is ignored.
#[test]
fn a_first_value_of_another_kind_does_not_set_the_keys_kind() {
    let (base, heads) = serving(na_first);
    let d = Deployment::new("");
    d.write(&yaml_from(&embedded_store(&d), &base, 100, ""));
    for _ in 0..2 {
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
    }
    let sent = sent(&heads.lock().unwrap());
    assert_eq!(sent, ["-", "2024-03-05T00:00:00Z"], "{sent:?}");
}

/// One page of one time.
fn one(_head: &str) -> Vec<u8> {
    json(r#"{"items":[{"updated_at":"2024-03-05T00:00:00Z"}]}"#.to_string())
}

/// A value longer than 256 bytes kept in the store by a build before
/// values were bounded is dropped when read, said, and never sent: the
/// walk asks from its initial value, then keeps its own largest.
#[test]
fn an_over_long_value_kept_by_an_older_build_is_dropped_when_read() {
    use portion::ledger::{EmbeddedLedger, JobStore};
    let (base, heads) = serving(one);
    let d = Deployment::new("");
    d.write(&yaml(&embedded_store(&d), &base, 100));
    assert_eq!(d.portion(&["run"]).code, 0);
    // As an older build kept it: the same entry, its value 70,000 bytes.
    let ledger = EmbeddedLedger::open(&d.path().join("ledger.sqlite3")).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let kept = ledger.map_read("events:conditional").await.unwrap();
        let (field, text) = kept
            .into_iter()
            .find(|(f, _)| f.starts_with("since "))
            .expect("the walk's value is kept");
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["value"] = serde_json::Value::String(format!("2099-{}", "9".repeat(70_000)));
        ledger
            .map_put("events:conditional", &[(field, v.to_string())])
            .await
            .unwrap();
    });
    drop(ledger);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("is longer than 256 bytes: dropped"),
        "{r:?}"
    );
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let sent = sent(&heads.lock().unwrap());
    assert_eq!(
        sent,
        [
            "2020-01-01T00:00:00Z",
            "2020-01-01T00:00:00Z",
            "2024-03-05T00:00:00Z"
        ],
        "{sent:?}"
    );
}
