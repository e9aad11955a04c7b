//! Spending less (issue 27): `conditional: true` (validators kept in the
//! store and sent back; a 304 settled to the endpoint's `not_modified`,
//! written nowhere) and `incremental` (the largest value seen per key,
//! advanced only after a complete walk), against the stand-in's GitHub.

use crate::common::deployment::{Deployment, embedded_store, spawn};
use crate::common::redis::RedisServer;
use crate::common::standin::{Seen, Standin};

const REPOS: [&str; 2] = ["a/one", "a/two"];

/// A job `issues` over `REPOS` on the stand-in at `base`: the key in the
/// query (so the URL holds the secret), sorted by update, by `Link` pages;
/// `extra` adds lines to its step.
pub(crate) fn yaml(store: &str, base: &str, limit: u64, extra: &str) -> String {
    format!(
        r#"store: {store}
lock_ttl: 2s
http: {{ timeout: 5s, connect_timeout: 2s, retries: 1, backoff: 20ms }}
credentials:
  main:
    secret: {{ file: key }}
    pools:
      requests: [ {{ limit: {limit}, per: 1h }} ]
endpoints:
  issues.list: {{ cost: {{ requests: 1, not_modified: 0 }} }}
jobs:
  issues:
    credential: main
    regions: [{repos}]
    steps:
      - endpoint: issues.list
        request:
          url: "{base}/repos/{{region}}/issues"
          query: {{ key: "{{secret}}", sort: updated }}
        paginate: {{ link: next, max_pages: 5 }}
{extra}    output: out/issues
"#,
        repos = REPOS.join(", ")
    )
}

/// (sorted by update: a 304 on page 1 ends the walk, the opt-in)
pub(crate) const CONDITIONAL: &str = "        conditional: true\n        on_not_modified: end\n";
const INCREMENTAL: &str = "        incremental: { from: /*/updated_at, param: since, initial: \"2020-01-01T00:00:00Z\" }\n";

/// Units used in the `requests` pool's hour, from `status --json`.
fn used(d: &Deployment) -> u64 {
    let s = d.status_json();
    s["credentials"][0]["pools"][0]["windows"][0]["used"]
        .as_u64()
        .expect("used")
}

/// The requests the stand-in saw, its updates (`touch`) left out.
pub(crate) fn calls(up: &Standin) -> Vec<Seen> {
    let mut seen = up.seen();
    seen.retain(|s| s.path != "/_standin/touch");
    seen
}

/// (repository, page, status) of each request from the `from`th on.
pub(crate) fn statuses(up: &Standin, from: usize) -> Vec<(String, u32, u16)> {
    calls(up)[from..]
        .iter()
        .map(|s| (s.region.clone(), s.page, s.status))
        .collect()
}

/// Update one issue of `repo` in the stand-in.
pub(crate) fn touch(up: &Standin, repo: &str) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", up.port)).unwrap();
    let req = format!(
        "POST /_standin/touch?repo={repo} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
}

/// Every issue id in the pages written of `job`.
fn ids_written(d: &Deployment, job: &str) -> std::collections::BTreeSet<String> {
    let dir = d.path().join("out").join(job);
    let mut ids = std::collections::BTreeSet::new();
    for f in d.outputs(job) {
        let page: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join(&f)).unwrap()).unwrap();
        for item in page.as_array().unwrap() {
            ids.insert(format!(
                "{} {}",
                item["id"].as_str().unwrap(),
                item["updated_at"].as_str().unwrap()
            ));
        }
    }
    ids
}

#[test]
fn a_304_is_charged_its_not_modified_cost_and_written_nowhere() {
    let up = Standin::start(&["--pages", "2", "--items", "3"]);
    let d = Deployment::new("");
    d.write(&yaml(&embedded_store(&d), &up.base(), 100, CONDITIONAL));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(d.outputs("issues").len(), 4);
    assert_eq!(used(&d), 4);

    // Nothing changed: page 1 of each answers 304, each walk ends there,
    // nothing is written and the two calls cost 0.
    let metrics = d.path().join("run.prom");
    let r = d.portion(&["run", "--metrics-file", metrics.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        statuses(&up, 4),
        [("a/one".into(), 1, 304), ("a/two".into(), 1, 304)]
    );
    assert_eq!(d.outputs("issues").len(), 4, "a 304 writes nothing");
    assert_eq!(used(&d), 4, "a 304 settles to not_modified: 0");
    assert!(
        r.stderr
            .contains("2 answered 304, not modified: units saved requests 2"),
        "{r:?}"
    );

    // The counts, in the run's metrics and in status (every format).
    let prom = std::fs::read_to_string(&metrics).unwrap();
    assert!(
        prom.contains("portion_run_job_not_modified{job=\"issues\"} 2"),
        "{prom}"
    );
    assert!(
        prom.contains("portion_run_job_saved_units{job=\"issues\",pool=\"requests\"} 2"),
        "{prom}"
    );
    let s = d.status_json();
    let job = &s["credentials"][0]["jobs"][0];
    assert_eq!(job["not_modified"]["calls"], 2, "{job}");
    assert_eq!(job["not_modified"]["units_saved"]["requests"], 2, "{job}");
    let om = d.portion(&["status", "--format", "openmetrics"]).stdout;
    assert!(
        om.contains("portion_not_modified_total{job=\"issues\"} 2"),
        "{om}"
    );
    let text = d.portion(&["status"]).stdout;
    assert!(
        text.contains("answered 304 (not modified): 2 calls"),
        "{text}"
    );

    // The validators never hold the secret (it was in the URL's query).
    let ledger = std::fs::read(d.path().join("ledger.sqlite3")).unwrap();
    let has = |needle: &[u8]| ledger.windows(needle.len()).any(|w| w == needle);
    assert!(has(b"page 0 0 a/one"), "the validators are in the store");
    assert!(!has(b"demo-key"), "the store holds the secret");

    // A third run adds to the counts status shows.
    assert_eq!(d.portion(&["run"]).code, 0);
    let s = d.status_json();
    assert_eq!(s["credentials"][0]["jobs"][0]["not_modified"]["calls"], 4);
}

#[test]
fn a_changed_resource_is_fetched_and_written_the_others_answer_304() {
    let up = Standin::start(&["--pages", "2", "--items", "3"]);
    let d = Deployment::new("");
    d.write(&yaml(&embedded_store(&d), &up.base(), 100, CONDITIONAL));
    assert_eq!(d.portion(&["run"]).code, 0);
    touch(&up, "a/one");
    let before = calls(&up).len();
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    // a/one's first issue, updated, is on page 1 (sorted by update): page
    // 1 changed, page 2 did not; a/two is as it was.
    assert_eq!(
        statuses(&up, before),
        [
            ("a/one".into(), 1, 200),
            ("a/one".into(), 2, 304),
            ("a/two".into(), 1, 304)
        ]
    );
    assert_eq!(d.outputs("issues").len(), 5);
    assert_eq!(used(&d), 5);
    let updated: Vec<String> = ids_written(&d, "issues")
        .into_iter()
        .filter(|i| i.starts_with("a/one#") && !i.ends_with("2024-01-01T00:00:00Z"))
        .collect();
    assert_eq!(updated.len(), 1, "the change is on disk: {updated:?}");
}

/// Two hosts (two deployments, their own folders) on one Redis: the
/// validators one wrote, the other sends.
#[test]
fn validators_are_shared_by_every_host_on_the_store() {
    let redis = RedisServer::start();
    let up = Standin::start(&["--pages", "2", "--items", "3"]);
    let (a, b) = (Deployment::new(""), Deployment::new(""));
    for d in [&a, &b] {
        d.write(&yaml(&redis.url(), &up.base(), 100, CONDITIONAL));
    }
    assert_eq!(a.portion(&["run"]).code, 0);
    assert_eq!(a.outputs("issues").len(), 4);
    let r = b.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        statuses(&up, 4),
        [("a/one".into(), 1, 304), ("a/two".into(), 1, 304)]
    );
    assert!(b.outputs("issues").is_empty(), "{:?}", b.outputs("issues"));
    assert_eq!(used(&b), 4);
}

/// `incremental`: the first request of each key carries the largest
/// value its last complete walk saw; a walk stopped midway (its budget
/// spent) advances nothing, so the next run asks again from the old value.
#[test]
fn incremental_values_advance_only_after_a_complete_walk() {
    let up = Standin::start(&["--pages", "3", "--items", "2"]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    // Two of a/one's three pages, then the budget is spent.
    d.write(&yaml(&store, &up.base(), 2, INCREMENTAL));
    assert_eq!(d.portion(&["run"]).code, 75);
    let since = |from: usize| -> Vec<(String, u32, String)> {
        calls(&up)[from..]
            .iter()
            .map(|s| {
                let q = s.query.clone().unwrap_or_default();
                let v = q
                    .split('&')
                    .find_map(|p| p.strip_prefix("since="))
                    .unwrap_or("-")
                    .replace("%3A", ":");
                (s.region.clone(), s.page, v)
            })
            .collect()
    };
    let old = "2020-01-01T00:00:00Z".to_string();
    assert_eq!(
        since(0),
        [
            ("a/one".into(), 1, old.clone()),
            ("a/one".into(), 2, old.clone())
        ]
    );
    // The rest of a/one's walk, still from the old value; a/two from its
    // initial one.
    d.write(&yaml(&store, &up.base(), 100, INCREMENTAL));
    assert_eq!(d.portion(&["run"]).code, 0);
    assert_eq!(
        since(2),
        [
            ("a/one".into(), 3, old.clone()),
            ("a/two".into(), 1, old.clone()),
            ("a/two".into(), 2, old.clone()),
            ("a/two".into(), 3, old.clone()),
        ]
    );
    // Both walks complete: each key asks from the newest it saw.
    touch(&up, "a/two");
    assert_eq!(d.portion(&["run"]).code, 0);
    let seen = since(6);
    assert_eq!(seen[0], ("a/one".into(), 1, "2024-01-01T00:00:00Z".into()));
    let two = seen.iter().find(|s| s.0 == "a/two").unwrap();
    assert_eq!(two.2, "2024-01-01T00:00:00Z", "{seen:?}");
    // The touched issue, newer, is what a/two asks from next.
    assert_eq!(d.portion(&["run"]).code, 0);
    let next = since(6 + seen.len());
    let two = next.iter().find(|s| s.0 == "a/two").unwrap();
    assert_eq!(two.2, "2024-01-01T00:00:01Z", "{next:?}");
}

/// A walk's validators go to the store when it ends, not page by page: a
/// walk cut short (here by its budget; a kill alike) keeps none of its
/// own, so a page written whose cursor was not saved is never answered
/// 304 (which would end the walk before the pages after it).
#[test]
fn a_walk_cut_short_keeps_no_validators_of_its_own() {
    use portion::ledger::{EmbeddedLedger, JobStore};
    let up = Standin::start(&["--pages", "3", "--items", "2"]);
    let d = Deployment::new("");
    d.write(&yaml(&embedded_store(&d), &up.base(), 2, CONDITIONAL));
    assert_eq!(d.portion(&["run"]).code, 75);
    assert_eq!(statuses(&up, 0).len(), 2, "two pages of a/one, then 75");
    let kept = || {
        let ledger = EmbeddedLedger::open(&d.path().join("ledger.sqlite3")).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let map = rt.block_on(ledger.map_read("issues:conditional")).unwrap();
        // (the validators only: the map also says which output each place had)
        map.into_iter()
            .filter(|(f, v)| f.starts_with("page ") && !v.is_empty())
            .map(|(f, _)| f)
            .collect::<Vec<String>>()
    };
    assert_eq!(kept(), Vec::<String>::new(), "the cut walk kept validators");
    // The walks ended: the validators of the pages each walk fetched (a/one
    // resumed at its third page; a/two walked all three).
    d.write(&yaml(&embedded_store(&d), &up.base(), 100, CONDITIONAL));
    assert_eq!(d.portion(&["run"]).code, 0);
    let mut fields = kept();
    fields.sort();
    assert_eq!(
        fields,
        [
            "page 0 0 a/two",
            "page 0 1 a/two",
            "page 0 2 a/one",
            "page 0 2 a/two"
        ]
    );
}

/// A walk cut short by `max_pages` has not seen all that changed: its
/// value does not advance (it would skip the pages past the cut for
/// good), so the next run asks from the value it started with.
#[test]
fn a_walk_cut_by_max_pages_does_not_advance_its_value() {
    let up = Standin::start(&["--pages", "3", "--items", "2"]);
    let d = Deployment::new("");
    let yaml = yaml(&embedded_store(&d), &up.base(), 100, INCREMENTAL)
        .replace("max_pages: 5", "max_pages: 2");
    assert!(yaml.contains("max_pages: 2"));
    d.write(&yaml);
    for run in 1..=2 {
        let from = calls(&up).len();
        assert_eq!(d.portion(&["run"]).code, 0, "run {run}");
        let asked: Vec<(String, u32)> = calls(&up)[from..]
            .iter()
            .map(|s| (s.region.clone(), s.page))
            .collect();
        assert_eq!(asked.len(), 4, "run {run}: two pages of each: {asked:?}");
        for s in &calls(&up)[from..] {
            let q = s.query.clone().unwrap_or_default();
            assert!(
                q.contains("since=2020-01-01T00%3A00%3A00Z"),
                "run {run}: {q}"
            );
        }
    }
}

/// A run killed mid-walk, then a rerun: every change is on disk, the
/// rerun asking from the value the killed walk started with.
#[test]
fn a_kill_mid_walk_then_a_rerun_skips_nothing() {
    let up = Standin::start(&["--pages", "3", "--items", "2", "--delay", "150ms"]);
    let d = Deployment::new("");
    let both = format!("{CONDITIONAL}{INCREMENTAL}");
    d.write(&yaml(&embedded_store(&d), &up.base(), 100, &both));
    assert_eq!(d.portion(&["run"]).code, 0);
    for _ in 0..3 {
        touch(&up, "a/one");
    }
    let first = calls(&up).len();
    let mut victim = spawn(&mut d.cmd(&["run"]));
    up.wait_for(up.seen().len() + 2);
    victim.kill().unwrap(); // SIGKILL: no cleanup at all
    victim.wait().unwrap();
    let r = d.run_after_killed_lock();
    assert_eq!(r.code, 0, "{r:?}");
    // Every issue touched is on disk, as updated.
    let written = ids_written(&d, "issues");
    let touched: Vec<&String> = written
        .iter()
        .filter(|i| i.starts_with("a/one#") && !i.ends_with("2024-01-01T00:00:00Z"))
        .collect();
    assert_eq!(touched.len(), 3, "{touched:?}");
    // The killed walk advanced nothing: every request after the first run
    // asked from the value the first run ended with.
    for s in &calls(&up)[first..] {
        let q = s.query.clone().unwrap_or_default();
        assert!(q.contains("since=2024-01-01T00%3A00%3A00Z"), "{q}");
    }
}

#[test]
fn conditional_and_incremental_mistakes_exit_78_naming_the_field() {
    let d = Deployment::new("");
    let good = yaml(
        &embedded_store(&d),
        "http://127.0.0.1:9",
        100,
        &format!("{CONDITIONAL}{INCREMENTAL}"),
    );
    d.assert_each_edit_exits_78(
        &good,
        &[
            (
                "not_modified above the cost",
                "not_modified: 0",
                "not_modified: 2",
                &[
                    "endpoints.issues.list.cost.not_modified",
                    "a 304 costs at most a call",
                ],
            ),
            (
                "on_not_modified without conditional",
                "        conditional: true\n",
                "",
                &["jobs.issues.steps[0].on_not_modified", "conditional: true"],
            ),
            (
                "on_not_modified unknown",
                "on_not_modified: end",
                "on_not_modified: skip",
                &["jobs.issues.steps[0].on_not_modified", "'skip'"],
            ),
            (
                "conditional on a POST",
                "url: ",
                "method: POST\n          url: ",
                &["jobs.issues.steps[0].conditional", "GET"],
            ),
            (
                "incremental from not a pointer",
                "from: /*/updated_at",
                "from: updated_at",
                &[
                    "jobs.issues.steps[0].incremental.from",
                    "not a JSON pointer",
                ],
            ),
        ],
    );
}
