//! One answer for one key ends that key, never the job (the table of
//! answers, README's "What each answer does"): on a once-job of inputs, a
//! 403 that is not about the credential ("The video is private"), a 409,
//! a 413, a 451, a 5xx past its retries and a host that does not exist
//! each fail their input, recorded, and the inputs after them are fetched;
//! the next tick charges none of them again, and `portion reset --failed`
//! does them again. A 304 to a request that sent no validator ends its
//! region, not the job. In both stores where the store keeps the failures.

use std::collections::BTreeMap;

use crate::common::deployment::{Deployment, WIDE, embedded_store, main_units};
use crate::common::redis::RedisServer;
use crate::common::server::{path, raw, serving};
use crate::common::yaml::{Config, Credential, Job, Step};

const PAGE: &[u8] = br#"{"items":[{"id":"a"}]}"#;

/// Each input's answer, by its path: `/items/KEY`.
fn answer(head: &str) -> Vec<u8> {
    let private = br#"{"error":{"code":403,"message":"The video is private","errors":[{"reason":"forbidden"}]}}"#;
    match path(head) {
        "/items/private" => raw("403 Forbidden", &[], private),
        "/items/empty" => raw(
            "409 Conflict",
            &[],
            br#"{"message":"Git Repository is empty."}"#,
        ),
        "/items/large" => raw("413 Payload Too Large", &[], b"too large"),
        "/items/legal" => raw("451 Unavailable For Legal Reasons", &[], b"blocked"),
        "/items/broken" => raw("500 Internal Server Error", &[], b"oops"),
        "/items/stale" => raw("304 Not Modified", &[], b""),
        // (its first page answered, its second a 500 past its retries)
        "/items/paged" if head.contains("pageToken=") => {
            raw("500 Internal Server Error", &[], b"oops")
        }
        "/items/paged" => raw(
            "200 OK",
            &["Content-Type: application/json"],
            br#"{"items":[],"next":"T2"}"#,
        ),
        _ => raw("200 OK", &["Content-Type: application/json"], PAGE),
    }
}

/// Inputs in order: good ones around every kind of refusal of one key.
const INPUTS: &[&str] = &[
    "first", "private", "empty", "large", "legal", "broken", "stale", "paged", "last",
];

/// A once-job over `ids.txt` whose step asks `url`, `retries: 2`.
fn yaml(store: &str, url: &str, hosts_from_inputs: bool) -> String {
    let mut job = Job::new("list", "main")
        .set("inputs", "{ file: ids.txt }")
        .set("once", "true");
    if hosts_from_inputs {
        job = job.set("hosts_from_inputs", "true");
    }
    Config::new(store)
        .lock_ttl("2s")
        .http("{ timeout: 5s, connect_timeout: 2s, retries: 2, backoff: 5ms }")
        .credential(Credential::new("main").pool("units", WIDE))
        .endpoint("api", "{ units: 1 }")
        .job(
            job.step(
                Step::new("api")
                    .url(&format!("\"{url}\""))
                    .query(r#"{ key: "{secret}" }"#)
                    .paginate("{ token: /next, param: pageToken, max_pages: 5 }"),
            ),
        )
        .render()
}

fn inputs(d: &Deployment, keys: &[&str]) {
    let text: String = keys.iter().map(|k| format!("{k}\n")).collect();
    std::fs::write(d.path().join("ids.txt"), text).unwrap();
}

/// Requests per input, as [`per_input`] counts them.
fn requests(of: &[(&str, usize)]) -> BTreeMap<String, usize> {
    of.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

/// How many requests each input's path got.
fn per_input(heads: &[String]) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for h in heads {
        let key = path(h).trim_start_matches("/items/").to_string();
        *seen.entry(key).or_default() += 1;
    }
    seen
}

#[test]
fn each_refusal_of_one_input_fails_that_input_and_the_list_goes_on() {
    for redis in [None, Some(RedisServer::start())] {
        let (base, heads) = serving(answer);
        let d = Deployment::new("");
        let store = redis
            .as_ref()
            .map_or_else(|| embedded_store(&d), RedisServer::url);
        inputs(&d, INPUTS);
        d.write(&yaml(&store, &format!("{base}/items/{{key}}"), false));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 1, "{r:?}");
        let once = requests(&[
            ("first", 1),
            ("private", 1),
            ("empty", 1),
            ("large", 1),
            ("legal", 1),
            ("broken", 3),
            ("stale", 1),
            ("paged", 4),
            ("last", 1),
        ]);
        assert_eq!(per_input(&heads.lock().unwrap()), once, "{r:?}");
        assert_eq!(
            d.outputs("list").len(),
            3,
            "first, last, paged's first: {r:?}"
        );
        for key in [
            "private", "empty", "large", "legal", "broken", "stale", "paged",
        ] {
            assert!(
                r.stderr.contains(&format!("input {key} (line ")),
                "{key}: {r:?}"
            );
        }
        assert!(r.stderr.contains("The video is private"), "{r:?}");
        assert!(r.stderr.contains("7 of them failed this run"), "{r:?}");
        // (recorded, as status shows: a later page's failure and a page
        // that can never be one are failures too, never done in silence)
        let status = d.portion(&["status"]);
        assert!(status.stdout.contains("7 failed"), "{status:?}");

        // The next tick charges none of them again.
        let before = heads.lock().unwrap().len();
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(heads.lock().unwrap().len(), before, "{r:?}");

        // `reset --failed` does the seven again, and only them.
        let r = d.portion(&["reset", "list", "--failed", "--yes"]);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(r.stdout.contains("7 failed input(s) to do again"), "{r:?}");
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 1, "{r:?}");
        let again = per_input(&heads.lock().unwrap()[before..]);
        let expected = requests(&[
            ("private", 1),
            ("empty", 1),
            ("large", 1),
            ("legal", 1),
            ("broken", 3),
            ("stale", 1),
            ("paged", 4),
        ]);
        assert_eq!(again, expected, "{r:?}");
    }
}

/// An input whose host does not exist (`{key}` in the host, as the job
/// allows) fails, and the input after it is fetched.
#[test]
fn an_input_whose_host_does_not_exist_fails_and_the_list_goes_on() {
    let (base, heads) = serving(answer);
    let port = base.rsplit(':').next().unwrap();
    let d = Deployment::new("");
    inputs(&d, &["no-such-host.invalid", "127.0.0.1"]);
    let url = format!("http://{{key}}:{port}/items/first");
    d.write(&yaml(&embedded_store(&d), &url, true));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("input no-such-host.invalid (line 1) failed"),
        "{r:?}"
    );
    assert!(r.stderr.contains("1 of them failed this run"), "{r:?}");
    assert_eq!(heads.lock().unwrap().len(), 1, "{r:?}");
    assert_eq!(d.outputs("list").len(), 1, "{r:?}");
}

/// An upstream that is down fails 3 inputs in a row past their retries
/// (none answered between) and the job stops there, exit 1, the 3
/// recorded as failed: not every input of the list failed one by one.
/// A 5xx between answers fails only its input (the test above), and a
/// run of inputs refused for themselves (4xx) does not stop the job.
#[test]
fn an_upstream_that_is_down_stops_the_job_after_three_inputs_in_a_row() {
    // `first` answered, then 20 inputs each answered `status`.
    let run_with = |status: &'static str| {
        let (base, heads) = serving(move |head: &str| match path(head) {
            "/items/first" => answer(head),
            _ => raw(status, &[], b"no"),
        });
        let d = Deployment::new("");
        let mut list = vec!["first".to_string()];
        list.extend((0..20).map(|i| format!("k{i:02}")));
        inputs(&d, &list.iter().map(String::as_str).collect::<Vec<_>>());
        let url = format!("{base}/items/{{key}}");
        d.write(&yaml(&embedded_store(&d), &url, false));
        let r = d.portion(&["run"]);
        let seen = per_input(&heads.lock().unwrap());
        (d, r, seen)
    };
    let (d, r, seen) = run_with("503 Service Unavailable");
    assert_eq!(r.code, 1, "{r:?}");
    // first, then k00..k02 three attempts each (`retries: 2`), no more.
    let expected = requests(&[("first", 1), ("k00", 3), ("k01", 3), ("k02", 3)]);
    assert_eq!(seen, expected, "{r:?}");
    assert!(r.stderr.contains("3 inputs in a row failed so"), "{r:?}");
    let status = d.portion(&["status"]);
    assert!(status.stdout.contains("3 failed"), "{status:?}");

    // Refusals for themselves, however many in a row, fail only their
    // inputs once one was answered.
    let (_, r, seen) = run_with("404 Not Found");
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(seen.values().sum::<usize>(), 21, "{r:?}");
    assert!(r.stderr.contains("20 of them failed this run"), "{r:?}");
}

/// A 304 to a request that sent no validator (a broken cache in front of
/// the API) ends its region, once, and the next region is served; the
/// next run does not send it again.
#[test]
fn a_304_without_a_validator_ends_its_region_not_the_job() {
    let (base, heads) = serving(answer);
    let d = Deployment::new("");
    let yaml = main_units(&embedded_store(&d), WIDE)
        .endpoint("api", "{ units: 1 }")
        .job(
            Job::new("j", "main").regions(&["stale", "next"]).step(
                Step::new("api")
                    .url(&format!("\"{base}/items/{{region}}\""))
                    .query(r#"{ key: "{secret}" }"#),
            ),
        )
        .render();
    d.write(&yaml);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("sent no validator"), "{r:?}");
    assert!(
        r.stderr.contains("the region ends here, the others go on"),
        "{r:?}"
    );
    let seen = per_input(&heads.lock().unwrap());
    assert_eq!((seen["stale"], seen["next"]), (1, 1), "{r:?}");
    assert_eq!(d.outputs("j").len(), 1, "{r:?}");
}
