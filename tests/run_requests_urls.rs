//! Placeholders in a request's `url`, end to end: each value is encoded for
//! the part of the URL it lands in, so a key, a region or a fan-out value
//! taken from an upstream's answer can never send the request (and the
//! key) to another host, path, query or fragment; a region that would make
//! a dot segment is refused with 78 before anything is sent.

use crate::common::deployment::{
    Deployment, api_deployment, api_yaml, deployment_yaml, embedded_store, run,
};
use crate::common::standin::Standin;

/// One request to `url` (a template), no regions.
fn one_request(d: &Deployment, url: &str) -> String {
    deployment_yaml(
        &embedded_store(d),
        &["{ limit: 100, per: 1h }"],
        "fail_closed",
        &[format!(
            "  one:\n    credential: main\n    steps:\n      - endpoint: videos.list\n        request: {{ url: \"{url}\" }}\n    output: out/one\n"
        )],
    )
}

#[test]
fn a_key_in_the_userinfo_cannot_name_another_host() {
    let up = Standin::start(&[]);
    let other = Standin::start(&[]);
    let d = Deployment::new("");
    d.write(&one_request(
        &d,
        &format!("http://api:{{secret}}@127.0.0.1:{}/echo/basic", up.port),
    ));
    for key in [
        format!("tok@127.0.0.1:{}/steal?", other.port),
        "AbC9x/Yz+Q=".to_string(),
    ] {
        std::fs::write(d.path().join("key"), format!("{key}\n")).unwrap();
        let r = run(d.cmd(&["run"]).env("RUST_LOG", "trace"));
        // The intended upstream answered (`/echo/` refuses with 401 and
        // echoes the Basic header), with the key masked everywhere.
        assert_eq!(r.code, 1, "{key}: {r:?}");
        assert!(
            r.stderr
                .contains(&format!("http://api:***@127.0.0.1:{}/echo/basic", up.port)),
            "{key}: {r:?}"
        );
        assert!(r.stderr.contains("Authorization: Basic YXBp"), "{r:?}");
        for leak in ["tok@", "steal", "AbC9x", "abc9x", "Yz+Q", "Yz%2B"] {
            assert!(!r.all().contains(leak), "{key}: shows {leak:?}: {r:?}");
        }
    }
    assert!(other.seen().is_empty(), "{:?}", other.seen());
}

#[test]
fn a_key_in_the_path_or_the_query_of_the_url_stays_there_whole() {
    const KEY: &str = "Ab#C9x/Yz+Q= &x";
    let up = Standin::start(&["--key", KEY]);
    let d = Deployment::new("");
    std::fs::write(d.path().join("key"), format!("{KEY}\n")).unwrap();
    // The stand-in checks the key it decodes from the query: it must be
    // the whole key (a `+` read as a space, a `#` cutting it, fail).
    let base = up.base();
    d.write(&one_request(
        &d,
        &format!("{base}/youtube/v3/videos?part=id&chart=mostPopular&regionCode=US&key={{secret}}#{{secret}}"),
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    d.write(&one_request(&d, &format!("{base}/k/{{secret}}/videos")));
    let r = run(d.cmd(&["run"]).env("RUST_LOG", "trace"));
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("/k/***/videos"), "{r:?}");
    assert!(!r.all().contains("Yz"), "{r:?}");
    let seen = up.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].status, 200, "{seen:?}");
    assert_eq!(seen[1].path, "/k/Ab%23C9x%2FYz%2BQ%3D%20%26x/videos");
    assert_eq!(seen[1].query, None);
}

fn issues(base: &str, regions: &str) -> String {
    format!(
        r#"  issues:
    credential: main
    regions: [{regions}]
    steps:
      - endpoint: api
        request:
          url: "{base}/repos/{{region}}/issues"
          headers: {{ Authorization: "Bearer {{secret}}" }}
    output: out/issues
"#
    )
}

#[test]
fn a_region_in_the_path_keeps_its_slashes_and_cannot_add_a_query_or_leave_the_path() {
    let up = Standin::start(&["--pages", "1"]);
    let d = api_deployment(&issues(&up.base(), r#"rust-lang/rust, "a?admin=1", "b#c""#));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let seen: Vec<(String, Option<String>, u16)> = up
        .seen()
        .into_iter()
        .map(|s| (s.path, s.query, s.status))
        .collect();
    let want = |p: &str| (p.to_string(), None, 200);
    assert_eq!(
        seen,
        [
            want("/repos/rust-lang/rust/issues"),
            want("/repos/a%3Fadmin%3D1/issues"),
            want("/repos/b%23c/issues"),
        ]
    );

    // A region that would climb out of the path: refused by `check` and
    // `run` (78, the field named, the value not), nothing sent.
    for region in ["\"../../admin\"", "\"x/./y\"", "\"..\""] {
        d.write(&api_yaml(&embedded_store(&d), &issues(&up.base(), region)));
        for cmd in ["check", "run"] {
            let r = d.portion(&[cmd]);
            assert_eq!(r.code, 78, "{region} {cmd}: {r:?}");
            assert!(
                r.stderr.contains("jobs.issues.steps[0].request.url")
                    && r.stderr.contains("path segment '.' or '..'"),
                "{region} {cmd}: {r:?}"
            );
        }
    }
    assert_eq!(up.seen().len(), 3);
}

#[test]
fn fan_out_values_from_an_answer_stay_one_path_segment_and_one_query_value() {
    // `/ids` answers each region's page with 0 and the region itself (its
    // `extra`), the values the fan-out step puts in its URL: one of them
    // from a region that is only ever sent in `query`.
    let up = Standin::start(&["--pages", "1", "--items", "1"]);
    let base = up.base();
    let d = api_deployment(&format!(
        r#"  fan:
    credential: main
    regions: ['../../ok#', 'c\d', 'p&q=1#frag', '..', z]
    steps:
      - endpoint: api
        request: {{ url: "{base}/ids", query: {{ region: "{{region}}", key: "{{secret}}", extra: "{{region}}" }} }}
        paginate: {{ page: page, start: 1, until_empty: /items, max_pages: 3 }}
      - endpoint: api
        for_each: {{ from: /items/*/id/n, batch: 1, per_page: 10 }}
        request:
          url: "{base}/repos/{{batch}}/issues?id={{batch}}"
          headers: {{ Authorization: "Bearer {{secret}}" }}
    output: out/fan
"#
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    // `..` would climb out of the path: left out, with a warning.
    assert!(
        r.stderr.contains("1 value(s) at /items/*/id/n left out"),
        "{r:?}"
    );
    let fanned: Vec<(String, String)> = up
        .seen()
        .into_iter()
        .filter(|s| s.path != "/ids")
        .map(|s| (s.path, s.query.unwrap_or_default()))
        .collect();
    let want = |v: &str| (format!("/repos/{v}/issues"), format!("id={v}"));
    assert_eq!(
        fanned,
        [
            want("0"),
            want("..%2F..%2Fok%23"),
            want("0"),
            want("c%5Cd"),
            want("0"),
            want("p%26q%3D1%23frag"),
            want("0"),
            want("0"),
            want("z"),
        ]
    );
}

/// A fan-out value too long for any request line (an upstream gone wrong)
/// is left out with a warning, as an empty one is: its batch would stop
/// the job, uncharged, on every run.
#[test]
fn a_fan_out_value_too_long_to_send_is_left_out() {
    let up = Standin::start(&["--pages", "1", "--items", "1"]);
    let base = up.base();
    // (the region's 150 bytes, 61 times over: a value of 9,150 bytes)
    let long = "{region}".repeat(61);
    let region = "r".repeat(150);
    let d = api_deployment(&format!(
        r#"  fan:
    credential: main
    regions: [{region}]
    steps:
      - endpoint: api
        request: {{ url: "{base}/ids", query: {{ region: "{{region}}", key: "{{secret}}", extra: "{long}" }} }}
        paginate: {{ page: page, start: 1, until_empty: /items, max_pages: 2 }}
      - endpoint: api
        for_each: {{ from: /items/*/id/n, batch: 1, per_page: 10 }}
        request: {{ url: "{base}/repos/{{batch}}/issues", headers: {{ Authorization: "Bearer {{secret}}" }} }}
    output: out/fan
"#
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("1 value(s) at /items/*/id/n left out"),
        "{r:?}"
    );
    let fanned: Vec<String> = up
        .seen()
        .into_iter()
        .filter(|s| s.path != "/ids")
        .map(|s| s.path)
        .collect();
    assert_eq!(fanned, ["/repos/0/issues"]);
}
