//! Jobs of inputs in the binary tests: a job `list` over a file of keys
//! against the stand-in, and what the tests count of it.

use std::collections::BTreeMap;

use super::deployment::{Deployment, WIDE, embedded_store, main_units};
use super::redis::RedisServer;
use super::standin::Standin;
use super::yaml::{Job, Step};

/// A job `list` over `file` (`inputs: { file, key }`), `once` or not,
/// `concurrency` at once: one videos.list call per input, its key as the
/// region code, and for a .jsonl or .csv file `{input.p}` in the query.
pub fn yaml(store: &str, base: &str, inputs: &str, once: bool, concurrency: usize) -> String {
    let query = if inputs.contains(".jsonl") || inputs.contains(".csv") {
        r#"{ part: snippet, regionCode: "{key}", q: "{input.p}", key: "{secret}" }"#
    } else {
        r#"{ part: snippet, regionCode: "{key}", key: "{secret}" }"#
    };
    main_units(store, WIDE)
        .endpoint("videos.list", "{ units: 1 }")
        .job(
            Job::new("list", "main")
                .set("inputs", inputs)
                .set("once", &once.to_string())
                .set("concurrency", &concurrency.to_string())
                .step(
                    Step::new("videos.list")
                        .url(&format!("{base}/youtube/v3/videos"))
                        .query(query),
                ),
        )
        .render()
}

/// Write `text` to file `name` of the deployment's folder.
pub fn write(d: &Deployment, name: &str, text: &str) {
    std::fs::write(d.path().join(name), text).unwrap();
}

/// How many requests the stand-in saw per key.
pub fn per_key(up: &Standin) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for s in up.seen() {
        *n.entry(s.region).or_default() += 1;
    }
    n
}

/// `K0`, `K1`, … for the numbers of `range`.
pub fn keys(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("K{i}")).collect()
}

/// Each of `keys` once.
pub fn once_each(keys: &[String]) -> BTreeMap<String, usize> {
    keys.iter().map(|k| (k.clone(), 1)).collect()
}

/// The store of a test that runs once on each: Redis when given, else
/// the deployment's embedded store.
pub fn stores(d: &Deployment, redis: &Option<RedisServer>) -> String {
    redis
        .as_ref()
        .map_or_else(|| embedded_store(d), RedisServer::url)
}
