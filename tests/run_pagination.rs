//! Every kind of pagination end to end: GitHub's `Link` header (relative
//! next links, resumed after kill -9), a next URL in the body, page and
//! offset numbers that stop on an empty page, and a next link to another
//! origin, refused. The real binary, the embedded store, the stand-in's
//! other API shapes (`standin/src/apis.rs`).

use crate::common::deployment::{Deployment, api_deployment, embedded_store, spawn};
use crate::common::standin::{Seen, Standin};

/// A GitHub-style issues job over `regions` (repositories).
fn issues_job(base: &str, regions: &str) -> String {
    format!(
        r#"  issues:
    credential: main
    regions: [{regions}]
    steps:
      - endpoint: api
        request:
          url: "{base}/repos/{{region}}/issues"
          query: {{ state: open, per_page: 2 }}
          headers: {{ Authorization: "Bearer {{secret}}", Accept: application/json }}
        paginate: {{ link: next, max_pages: 10 }}
    output: out/issues
"#
    )
}

fn walked(seen: &[Seen]) -> Vec<(String, u64)> {
    seen.iter()
        .map(|s| (s.region.clone(), u64::from(s.page)))
        .collect()
}

#[test]
fn link_pagination_walks_every_region_through_relative_next_links() {
    let up = Standin::start(&["--pages", "3", "--items", "2"]);
    let d = api_deployment(&issues_job(&up.base(), "octo/hello, rust-lang/rust"));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");

    let seen = up.seen();
    let expected: Vec<(String, u64)> = ["octo/hello", "rust-lang/rust"]
        .iter()
        .flat_map(|r| (1..=3).map(move |p| (r.to_string(), p)))
        .collect();
    assert_eq!(walked(&seen), expected);
    // Every page with the step's headers (the bearer token: else 401) and
    // the link's own query.
    assert!(seen.iter().all(|s| s.status == 200), "{seen:?}");
    let second = seen[1].query.as_deref().unwrap_or_default();
    assert!(
        second.contains("state=open") && second.contains("page=2"),
        "{second}"
    );

    // A region with a '/' is one file name, percent-encoded.
    let files = d.outputs("issues");
    assert_eq!(files.len(), 6, "{files:?}");
    assert!(
        files.contains(&"issues.r000001.octo%2Fhello.s0.p000002.json".to_string()),
        "{files:?}"
    );
    assert!(
        files.contains(&"issues.r000001.rust-lang%2Frust.s0.p000000.json".to_string()),
        "{files:?}"
    );
    let page: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            d.path()
                .join("out/issues/issues.r000001.rust-lang%2Frust.s0.p000001.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(page[0]["id"], "rust-lang/rust#2");
}

#[test]
fn a_link_walk_killed_mid_run_resumes_at_the_page_in_flight() {
    let up = Standin::start(&["--pages", "4", "--items", "1", "--delay", "100ms"]);
    let d = api_deployment(&issues_job(&up.base(), "o/a, o/b"));
    let mut victim = spawn(&mut d.cmd(&["run"]));
    up.wait_for(3);
    victim.kill().unwrap(); // SIGKILL: no cleanup at all
    victim.wait().unwrap();
    let before = up.seen().len();

    let cycle: Vec<(String, u64)> = ["o/a", "o/b"]
        .iter()
        .flat_map(|r| (1..=4).map(move |p| (r.to_string(), p)))
        .collect();
    let written = d.outputs("issues").len();
    assert!(before - written <= 1, "{before} fetched, {written} written");

    // The killed run's lock (lock_ttl 2s) expires by itself.
    let rerun = d.run_after_killed_lock();
    assert_eq!(rerun.code, 0, "{rerun:?}");
    // The rerun starts at the first page not written, from the saved next
    // link, and serves every region once from there.
    let n = 8 - written % 4;
    let expected: Vec<(String, u64)> = cycle
        .iter()
        .cycle()
        .skip(written)
        .take(n)
        .cloned()
        .collect();
    assert_eq!(walked(&up.seen()[before..]), expected, "{rerun:?}");
    assert!(up.seen().iter().all(|s| s.status == 200));
}

#[test]
fn next_url_page_and_offset_walks_stop_where_the_data_ends() {
    let up = Standin::start(&["--pages", "3", "--items", "2"]);
    let base = up.base();
    let job = |name: &str, path: &str, query: &str, paginate: &str| {
        format!(
            r#"  {name}:
    credential: main
    regions: [X, Y]
    steps:
      - endpoint: api
        request:
          url: "{base}{path}"
          query: {{ region: "{{region}}", key: "{{secret}}"{query} }}
        paginate: {paginate}
    output: out/{name}
"#
        )
    };
    let jobs = [
        job(
            "feed",
            "/feed",
            "",
            "{ next_url: /paging/next, max_pages: 10 }",
        ),
        job(
            "paged",
            "/rows",
            ", limit: 2",
            "{ page: page, start: 1, until_empty: /data, max_pages: 10 }",
        ),
        job(
            "offsets",
            "/rows",
            ", limit: 2",
            "{ offset: offset, size: 2, until_empty: /data, max_pages: 10 }",
        ),
    ];
    let d = api_deployment(&jobs.concat());
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let seen = up.seen();
    // The key, given as a query parameter, goes with every page, the next
    // URL's too (which does not carry it): else 401.
    assert!(seen.iter().all(|s| s.status == 200), "{seen:?}");
    let queries = |path: &str| -> Vec<String> {
        seen.iter()
            .filter(|s| s.path == path)
            .map(|s| s.query.clone().unwrap_or_default())
            .collect()
    };
    let feed = queries("/feed");
    assert_eq!(feed.len(), 6, "{feed:?}");
    assert!(
        feed[1].contains("cursor=1") && feed[2].contains("cursor=2"),
        "{feed:?}"
    );
    assert_eq!(d.outputs("feed").len(), 6);
    // Three pages of two items, then the empty one that ends the walk.
    let rows = queries("/rows");
    let numbers = |param: &str| -> Vec<String> {
        rows.iter()
            .filter_map(|q| {
                q.split('&')
                    .find_map(|kv| kv.strip_prefix(&format!("{param}=")))
                    .map(String::from)
            })
            .collect()
    };
    assert_eq!(numbers("page"), ["1", "2", "3", "4", "1", "2", "3", "4"]);
    assert_eq!(numbers("offset"), ["0", "2", "4", "6", "0", "2", "4", "6"]);
    assert_eq!(d.outputs("paged").len(), 8);
    assert_eq!(d.outputs("offsets").len(), 8);
}

#[test]
fn a_next_link_to_another_origin_is_refused_and_the_other_regions_go_on() {
    let up = Standin::start(&["--pages", "3", "--items", "1"]);
    let d = api_deployment(&issues_job(&up.base(), "away/x, octo/y").replace(
        "query: { state: open",
        "query: { key: \"{secret}\", state: open",
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    let target = format!("http://localhost:{}/repos/away/x/issues?", up.port);
    assert!(
        r.stderr
            .contains(&format!("points to another origin, {target}")),
        "{r:?}"
    );
    assert!(r.stderr.contains("key=***"), "{r:?}");
    assert!(!r.all().contains("demo-key"), "{r:?}");
    assert!(r.stderr.contains("1 FAILED: away/x"), "{r:?}");
    // away/x's first page, then every page of octo/y; never the other origin.
    let seen = up.seen();
    let expected: Vec<(String, u64)> = [("away/x", 1), ("octo/y", 1), ("octo/y", 2), ("octo/y", 3)]
        .iter()
        .map(|(r, p)| (r.to_string(), *p))
        .collect();
    assert_eq!(walked(&seen), expected);
    assert!(
        seen.iter()
            .all(|s| s.host.as_deref() == Some(&format!("127.0.0.1:{}", up.port)[..])),
        "{seen:?}"
    );
    // The next run starts after the refused region, not in it.
    let again = d.portion(&["run"]);
    assert_eq!(again.code, 1, "{again:?}");
    assert!(
        again
            .stderr
            .contains("starts at region away/x step 0 page 0"),
        "{again:?}"
    );
}

/// A page or offset parameter the step's `query` or its `url` already has
/// is set, not sent a second time (a server reading the first copy saw
/// page 1 on every page, each one charged); `check` shows the URL's own
/// query followed by `&`, not a second `?`.
#[test]
fn a_page_parameter_already_in_the_query_or_url_is_set_not_repeated() {
    let up = Standin::start(&["--pages", "2", "--items", "2"]);
    let base = up.base();
    let job = |name: &str, url: &str, query: &str, paginate: &str| {
        format!(
            r#"  {name}:
    credential: main
    regions: [X]
    steps:
      - endpoint: api
        request:
          url: "{base}{url}"
          query: {{ region: "{{region}}", key: "{{secret}}", limit: 2{query} }}
        paginate: {paginate}
    output: out/{name}
"#
        )
    };
    let d = api_deployment(
        &[
            job(
                "paged",
                "/rows",
                ", page: 1",
                "{ page: page, start: 1, until_empty: /data, max_pages: 10 }",
            ),
            job(
                "in_url",
                "/rows?page=9&offset=7",
                "",
                "{ offset: offset, size: 2, until_empty: /data, max_pages: 10 }",
            ),
        ]
        .concat(),
    );
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("/rows?page=9&offset=7&region={region}&key={secret}&limit=2\n"),
        "{r:?}"
    );
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let queries: Vec<String> = up
        .seen()
        .into_iter()
        .map(|s| s.query.unwrap_or_default().replace("demo-key", "K"))
        .collect();
    assert_eq!(
        queries,
        [
            "region=X&key=K&limit=2&page=1",
            "region=X&key=K&limit=2&page=2",
            "region=X&key=K&limit=2&page=3",
            "page=9&offset=0&region=X&key=K&limit=2",
            "page=9&offset=2&region=X&key=K&limit=2",
            "page=9&offset=4&region=X&key=K&limit=2",
        ]
    );
}

/// A cursor past a step's `max_pages`, lowered since it was saved: the
/// step ends there, nothing past the new maximum is fetched, and the run
/// spends what `--dry-run` planned.
#[test]
fn max_pages_lowered_below_the_cursor_ends_the_step_there() {
    let up = Standin::start(&["--pages", "9", "--key", "some-key-1"]);
    let d = Deployment::new("");
    std::fs::write(d.path().join("key"), "some-key-1\n").unwrap();
    let config = |windows: &[&str], max_pages: u32| {
        crate::common::deployment::deployment_yaml(
            &embedded_store(&d),
            windows,
            "fail_closed",
            &[crate::common::deployment::videos_job(
                "trending",
                "main",
                &["US", "GB"],
                max_pages,
                &up.base(),
            )],
        )
    };
    d.write(&config(&["{ limit: 5, per: 1h }"], 8));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert_eq!(up.seen().len(), 5, "US pages 0 to 4");

    d.write(&config(crate::common::deployment::WIDE, 2));
    let plan = d.portion(&["run", "--dry-run", "--json"]);
    let plan: serde_json::Value = serde_json::from_str(&plan.stdout).unwrap();
    let next = &plan["credentials"][0]["jobs"][0]["next_run"];
    assert_eq!(
        (next["outcome"].as_str(), next["calls"].as_u64()),
        (Some("fits"), Some(2)),
        "{next}"
    );
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("past this step's max_pages"), "{r:?}");
    let after: Vec<(String, u32)> = up.seen()[5..]
        .iter()
        .map(|s| (s.region.clone(), s.page))
        .collect();
    assert_eq!(after, [("GB".to_string(), 0), ("GB".to_string(), 1)]);
}

/// A YouTube-shaped job over GB, US and FR: page tokens in the body.
fn trending_job(base: &str) -> String {
    format!(
        r#"  trending:
    credential: main
    regions: [GB, US, FR]
    steps:
      - endpoint: api
        request:
          url: "{base}/youtube/v3/videos"
          query: {{ chart: mostPopular, regionCode: "{{region}}", key: "{{secret}}" }}
        paginate: {{ token: /nextPageToken, param: pageToken, max_pages: 10 }}
    output: out/trending
"#
    )
}

/// Each request as "REGION PAGE STATUS".
fn answered(seen: &[Seen]) -> Vec<String> {
    seen.iter()
        .map(|s| format!("{} {} {}", s.region, s.page, s.status))
        .collect()
}

/// A page token the upstream no longer takes (400, as an expired one):
/// charged once, its region ends with an error naming it, the regions
/// after it are served (exit 1), and the next run starts that region
/// afresh at its first page rather than resend the refused request.
#[test]
fn a_page_the_upstream_refuses_ends_its_region_and_the_others_are_served() {
    let up = Standin::start(&[
        "--pages",
        "3",
        "--items",
        "1",
        "--refuse",
        "regionCode=US&pageToken=CAUQ1",
    ]);
    let d = api_deployment(&trending_job(&up.base()));
    // A budget of 4 stops the first run in US with page 1's token saved.
    let limited = std::fs::read_to_string(d.config()).unwrap();
    d.write(&limited.replace("limit: 1000", "limit: 4"));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");

    // The next run starts there: the token is refused, once; FR is served.
    d.write(&limited);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("region US step 0 page 1"), "{r:?}");
    assert!(r.stderr.contains("HTTP 400"), "{r:?}");
    assert!(r.stderr.contains("the region ends here"), "{r:?}");
    assert!(r.stderr.contains("1 FAILED: US"), "{r:?}");
    assert!(!r.all().contains("demo-key"), "{r:?}");
    let seen = up.seen();
    assert_eq!(
        answered(&seen[..4]),
        ["GB 0 200", "GB 1 200", "GB 2 200", "US 0 200"]
    );
    assert_eq!(
        answered(&seen[4..]),
        [
            "US 1 400", "FR 0 200", "FR 1 200", "FR 2 200", "GB 0 200", "GB 1 200", "GB 2 200"
        ]
    );
    assert!(r.stderr.contains("; 7 calls"), "charged once: {r:?}");

    // And the run after that walks US afresh from its first page.
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("starts at region US step 0 page 0"),
        "{r:?}"
    );
    let seen = up.seen();
    assert_eq!(seen[11].token, None, "{seen:?}");
    assert_eq!(
        answered(&seen[11..]),
        [
            "US 0 200", "US 1 400", "FR 0 200", "FR 1 200", "FR 2 200", "GB 0 200", "GB 1 200",
            "GB 2 200"
        ]
    );
}

/// A first page the upstream refuses, of a request that names its region
/// (`regionCode={region}`): only that region ends, the others are served,
/// every run (the region after it no longer starves), exit 1.
#[test]
fn a_first_page_refused_for_its_region_ends_only_that_region() {
    let up = Standin::start(&["--pages", "1", "--items", "1", "--refuse", "regionCode=XX"]);
    let job = trending_job(&up.base()).replace("[GB, US, FR]", "[GB, XX, US]");
    let d = api_deployment(&job);
    for run in 0..2 {
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(r.stderr.contains("region XX step 0 page 0"), "{r:?}");
        assert!(r.stderr.contains("1 FAILED: XX"), "{r:?}");
        let seen = up.seen();
        assert_eq!(
            answered(&seen[run * 3..]),
            ["GB 0 200", "XX 0 400", "US 0 200"],
            "run {run}"
        );
    }
}

/// A fan-out batch the upstream rejects is skipped, named, and charged
/// once; the batches after it are sent, and the run exits 1.
#[test]
fn a_fan_out_batch_the_upstream_refuses_is_skipped_and_the_rest_goes_on() {
    let up = Standin::start(&["--pages", "3", "--items", "4", "--refuse", "id=4,v5,6,v7"]);
    let base = up.base();
    let d = api_deployment(&format!(
        r#"  details:
    credential: main
    regions: [US]
    steps:
      - endpoint: api
        request: {{ url: "{base}/ids", query: {{ region: "{{region}}", key: "{{secret}}" }} }}
        paginate: {{ page: page, start: 1, until_empty: /items, max_pages: 5 }}
      - endpoint: api
        for_each: {{ from: /items/*/id/n, batch: 4, join: ",", per_page: 4 }}
        request:
          url: "{base}/youtube/v3/videos"
          query: {{ part: statistics, id: "{{batch}}", key: "{{secret}}" }}
    output: out/details
"#
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("US step 1 batch 1"), "{r:?}");
    assert!(r.stderr.contains("this batch is skipped"), "{r:?}");
    assert!(r.stderr.contains("1 FAILED: US step 1 batch 1"), "{r:?}");
    let batches: Vec<(String, u16)> = up
        .seen()
        .into_iter()
        .filter(|s| s.path == "/youtube/v3/videos")
        .map(|s| {
            let q = s.query.unwrap_or_default();
            let id = url_pair(&q, "id");
            (id, s.status)
        })
        .collect();
    let want = [("0,v1,2,v3", 200), ("4,v5,6,v7", 400), ("8,v9", 200)];
    let want: Vec<(String, u16)> = want.iter().map(|(b, s)| (b.to_string(), *s)).collect();
    assert_eq!(batches, want);
    // Pages 1 to 4 of /ids and the three batches, each charged once.
    assert!(r.stderr.contains("; 7 calls"), "{r:?}");
    assert_eq!(d.outputs("details").len(), 6);
}

/// A fan-out whose every batch the upstream refuses: after 2 in a row,
/// none taken, the rest of that region's fan-out is skipped (one error
/// names it), the other regions are served, the summary names 5 failures
/// and counts the rest, the metric counts regions; the next run starts
/// the region afresh, and pays 2 refused batches again, not every batch.
#[test]
fn a_fan_out_whose_batches_are_all_refused_is_given_up_after_two() {
    let up = Standin::start(&[
        "--pages",
        "3",
        "--items",
        "4",
        "--refuse",
        "part=statistics",
    ]);
    let base = up.base();
    let d = api_deployment(&format!(
        r#"  details:
    credential: main
    regions: [US, GB]
    steps:
      - endpoint: api
        request: {{ url: "{base}/ids", query: {{ region: "{{region}}", key: "{{secret}}" }} }}
        paginate: {{ page: page, start: 1, until_empty: /items, max_pages: 5 }}
      - endpoint: api
        for_each: {{ from: /items/*/id/n, batch: 2, join: ",", per_page: 4 }}
        request:
          url: "{base}/youtube/v3/videos"
          query: {{ part: statistics, id: "{{batch}}", key: "{{secret}}" }}
    output: out/details
"#
    ));
    let metrics = d.path().join("run.prom");
    let r = d.portion(&["run", "--metrics-file", metrics.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{r:?}");
    for region in ["US", "GB"] {
        assert!(
            r.stderr.contains(&format!("{region} step 1 batch 1: http")),
            "{r:?}"
        );
        assert!(
            r.stderr.contains(&format!(
                "2 batches in a row refused and none taken in this run: the rest of region {region} step 1's fan-out is skipped"
            )),
            "{r:?}"
        );
    }
    assert!(
        r.stderr
            .contains("6 FAILED: US step 1 batch 0, US step 1 batch 1, US, GB step 1 batch 0, GB step 1 batch 1 and 1 more"),
        "{r:?}"
    );
    let batches = |seen: &[Seen]| {
        seen.iter()
            .filter(|s| s.path == "/youtube/v3/videos")
            .count()
    };
    let seen = up.seen();
    assert_eq!(batches(&seen), 4, "2 a region: {seen:?}");
    let text = std::fs::read_to_string(&metrics).unwrap();
    assert!(
        text.contains("portion_run_job_failed_regions{job=\"details\"} 2"),
        "{text}"
    );
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    let again = &up.seen()[seen.len()..];
    assert_eq!(
        (again[0].path.as_str(), again[0].page),
        ("/ids", 1),
        "{again:?}"
    );
    assert_eq!(batches(again), 4, "{again:?}");

    // Side by side (concurrency 2), a batch in flight when the fan-out is
    // given up finishes: at most 3 a region, the rest never sent.
    let yaml = std::fs::read_to_string(d.config()).unwrap();
    d.write(&yaml.replace("regions: [US, GB]", "regions: [US, GB]\n    concurrency: 2"));
    let before = up.seen().len();
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.stderr.matches("fan-out is skipped").count(), 2, "{r:?}");
    let sent = batches(&up.seen()[before..]);
    assert!((4..=6).contains(&sent), "{sent}: {r:?}");
}

fn url_pair(query: &str, key: &str) -> String {
    reqwest::Url::parse(&format!("http://x/?{query}"))
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// A `Link` header with raw UTF-8 in its URL is followed, the bytes
/// percent-encoded as a browser does; one whose `<` is left open before
/// the real link, or with a quoted parameter left open, ends the walk
/// with a warning the summary counts, and nothing is sent to a URL read
/// through a broken link.
#[test]
fn link_headers_past_ascii_or_malformed_are_read_or_refused_aloud() {
    let up = Standin::start(&["--pages", "3", "--items", "1", "--link-form", "utf8"]);
    let d = api_deployment(&issues_job(&up.base(), "o/a"));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let seen = up.seen();
    assert_eq!(
        walked(&seen),
        [("o/a".into(), 1), ("o/a".into(), 2), ("o/a".into(), 3)]
    );
    let second = seen[1].query.as_deref().unwrap_or_default();
    assert!(second.contains("q=caf%C3%A9&page=2"), "{second}");

    for form in ["unclosed", "unterminated"] {
        let up = Standin::start(&["--pages", "3", "--items", "1", "--link-form", form]);
        let d = api_deployment(&issues_job(&up.base(), "o/a, o/b"));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{form}: {r:?}");
        assert!(
            r.stderr.contains("the Link header cannot be read"),
            "{form}: {r:?}"
        );
        assert!(
            r.stderr
                .contains("(2 ended at a next link or token that cannot be read)"),
            "{form}: {r:?}"
        );
        let seen = up.seen();
        assert_eq!(
            walked(&seen),
            [("o/a".into(), 1), ("o/b".into(), 1)],
            "{form}"
        );
        assert!(seen.iter().all(|s| s.status == 200), "{form}: {seen:?}");
        // The header shown as it came, escaped once (no \" for its quotes).
        if form == "unterminated" {
            assert!(r.stderr.contains(r#"</first>; title="left open"#), "{r:?}");
        }
    }
}
