//! `portion run` end to end: the real binary, a real store (redis-server on a
//! free loopback port, and the embedded file), and the YouTube stand-in as
//! the upstream.

use std::collections::BTreeSet;

use std::os::unix::fs::PermissionsExt;

use crate::common::deployment::{
    Deployment, WIDE, bound_by_permissions, deployment_yaml, embedded_store, run, run_measured,
    trending, trending_with, videos_job,
};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;
use crate::common::tls::{TestCa, TlsRedis};

fn stores() -> Vec<(&'static str, Option<RedisServer>)> {
    vec![("embedded", None), ("redis", Some(RedisServer::start()))]
}

fn store_for(d: &Deployment, redis: &Option<RedisServer>) -> String {
    match redis {
        Some(r) => r.url(),
        None => embedded_store(d),
    }
}

#[test]
fn a_job_is_served_to_completion_on_both_stores() {
    for (kind, redis) in stores() {
        let up = Standin::start(&["--pages", "3"]);
        let d = Deployment::new("");
        let job = videos_job("trending", "main", &["US", "GB", "DE"], 4, &up.base());
        d.write(&deployment_yaml(
            &store_for(&d, &redis),
            WIDE,
            "fail_closed",
            &[job],
        ));

        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{kind}: {r:?}");
        assert!(
            r.stderr
                .contains("job trending: finished; 9 calls, spent units 9; regions done 3/3"),
            "{kind}: {r:?}"
        );

        // Every region, every page (the stand-in has 3), in order, once.
        let seen: Vec<(String, u32)> = up
            .seen()
            .iter()
            .map(|s| (s.region.clone(), s.page))
            .collect();
        let expected: Vec<(String, u32)> = ["US", "GB", "DE"]
            .iter()
            .flat_map(|r| (0..3).map(move |p| (r.to_string(), p)))
            .collect();
        assert_eq!(seen, expected, "{kind}");
        assert!(up.seen().iter().all(|s| s.status == 200));

        let files = d.outputs("trending");
        assert_eq!(files.len(), 9, "{kind}: {files:?}");
        assert!(
            files.contains(&"trending.r000001.GB.s0.p000002.json".to_string()),
            "{files:?}"
        );
        for f in &files {
            let text = std::fs::read_to_string(d.path().join("out/trending").join(f)).unwrap();
            let v: serde_json::Value =
                serde_json::from_str(&text).expect("each page is valid JSON");
            assert_eq!(v["kind"], "youtube#videoListResponse");
        }

        // The next run is run 2, and starts again at the first region.
        let r = d.portion(&["run", "trending"]);
        assert_eq!(r.code, 0, "{kind}: {r:?}");
        assert!(
            r.stderr.contains("run 2 starts at region US step 0 page 0"),
            "{kind}: {r:?}"
        );
        assert_eq!(d.outputs("trending").len(), 18);
    }
}

#[test]
fn max_pages_caps_pagination() {
    let up = Standin::start(&["--pages", "5"]);
    let d = trending(&up, "embedded", &["US"], 2, "fail_closed");
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let pages: Vec<u32> = up.seen().iter().map(|s| s.page).collect();
    assert_eq!(pages, [0, 1]);
}

/// With a budget too small for a round, each tick spends what the window
/// allows and stops (75); the next tick resumes exactly there, so regions
/// are served in turn and none is served twice before all were served.
#[test]
fn a_small_budget_is_spread_over_ticks_round_robin() {
    for (kind, redis) in stores() {
        let up = Standin::start(&["--pages", "3"]);
        let d = Deployment::new("");
        let job = videos_job("trending", "main", &["US", "GB", "DE"], 3, &up.base());
        let small = &["{ limit: 4, per: 1s }"];
        d.write(&deployment_yaml(
            &store_for(&d, &redis),
            small,
            "fail_closed",
            std::slice::from_ref(&job),
        ));

        for tick in 1..=3 {
            let r = d.portion(&["run"]);
            assert_eq!(r.code, 75, "{kind} tick {tick}: {r:?}");
            assert!(
                r.stderr
                    .contains("the quota said no: the 1s window of pool 'units' is full"),
                "{r:?}"
            );
            assert_eq!(
                up.seen().len(),
                4 * tick,
                "{kind} tick {tick}: four units a tick"
            );
            // Let the 1 s window empty, with a margin.
            std::thread::sleep(std::time::Duration::from_millis(1300));
        }
        // Then a bigger budget: one tick serves every region, starting where the last stopped.
        let wide = &["{ limit: 100, per: 1s }"];
        d.write(&deployment_yaml(
            &store_for(&d, &redis),
            wide,
            "fail_closed",
            &[job],
        ));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{kind}: {r:?}");

        let seen: Vec<(String, u32)> = up
            .seen()
            .iter()
            .map(|s| (s.region.clone(), s.page))
            .collect();
        let cycle: Vec<(String, u32)> = ["US", "GB", "DE"]
            .iter()
            .flat_map(|r| (0..3).map(move |p| (r.to_string(), p)))
            .collect();
        // 12 calls in the small ticks (US GB DE US+), then 9 more: the exact cycle, never a page twice in a row.
        let expected: Vec<(String, u32)> = cycle.iter().cycle().take(21).cloned().collect();
        assert_eq!(seen, expected, "{kind}");
        assert!(up.seen().iter().all(|s| s.status == 200));
    }
}

#[test]
fn server_errors_are_retried_and_each_attempt_is_charged() {
    let up = Standin::start(&["--pages", "1", "--fail-first", "2"]);
    let d = trending(&up, "embedded", &["US", "GB"], 1, "fail_closed");
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let statuses: Vec<u16> = up.seen().iter().map(|s| s.status).collect();
    assert_eq!(statuses, [503, 503, 200, 200]);
    assert!(r.stderr.contains("retry 1 of 3"), "{r:?}");
    // The real wait: up to the 20ms backoff, then 40ms (full jitter), in
    // milliseconds, never "in 1s".
    for (attempt, cap) in [(1, 20), (2, 40)] {
        let wait = r
            .stderr
            .split(&format!("retry {attempt} of 3 in "))
            .nth(1)
            .and_then(|rest| rest.split_once("ms"))
            .and_then(|(n, _)| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no wait in milliseconds for retry {attempt}: {r:?}"));
        assert!(wait <= cap, "retry {attempt} waits {wait}ms: {r:?}");
    }
    // Four requests, four charges.
    assert!(r.stderr.contains("4 calls, spent units 4"), "{r:?}");
}

#[test]
fn server_errors_that_outlast_the_retries_fail_the_run() {
    let up = Standin::start(&["--fail-first", "100"]);
    let d = trending(&up, "embedded", &["US", "GB"], 1, "fail_closed");
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("HTTP 503 Service Unavailable, after 4 attempts"),
        "{r:?}"
    );
    assert_eq!(up.seen().len(), 4, "1 try + 3 retries, then stop");
}

/// A key the upstream refuses (400) for every region: the first page of
/// a request that names its region ends that region only, but two such in
/// a row stop the job, the cursor past both, so a tick spends two refused
/// calls and the next run starts at the region after them.
#[test]
fn other_client_errors_stop_the_job_with_an_excerpt() {
    let up = Standin::start(&["--key", "another-key"]);
    let d = trending(&up, "embedded", &["US", "GB", "DE"], 1, "fail_closed");
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("refused the request with HTTP 400"),
        "{r:?}"
    );
    assert!(r.stderr.contains("API key not valid"), "{r:?}");
    assert!(
        r.stderr
            .contains("the first page of 2 regions in a row was refused, so the job stops"),
        "{r:?}"
    );
    let regions = |seen: Vec<crate::common::standin::Seen>| -> Vec<String> {
        seen.into_iter().map(|s| s.region).collect()
    };
    assert_eq!(regions(up.seen()), ["US", "GB"], "a 4xx is not retried");
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        regions(up.seen()),
        ["US", "GB", "DE", "US"],
        "DE does not starve"
    );
}

#[test]
fn check_prints_what_it_resolved_without_touching_store_or_network() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let job = videos_job("trending", "main", &["US", "GB", "DE"], 4, &up.base());
    let windows = &[
        "{ limit: 10000, per: 24h, headroom: 5% }",
        "{ limit: 1200, per: 1h }",
    ];
    // A Redis that does not exist: check must not care.
    d.write(&deployment_yaml(
        "redis://:hunter2@127.0.0.1:1/0",
        windows,
        "fail_closed",
        &[job],
    ));
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 0, "{r:?}");
    for want in [
        "store: redis://:***@127.0.0.1:1/0 (not contacted)",
        "credential main: secret from file key (present, not shown)",
        "pool units      per 24h      limit   10000  headroom    500  budget    9500",
        "pool units      per 1h       limit    1200  headroom      0  budget    1200",
        "regions (3): US, GB, DE",
        "key={secret}",
        "per run, at most: 12 calls, spending units 12",
    ] {
        assert!(r.stdout.contains(want), "missing {want:?} in\n{}", r.stdout);
    }
    assert!(!r.all().contains("demo-key") && !r.all().contains("hunter2"));
    assert!(up.seen().is_empty());
    assert!(!d.path().join("state").exists(), "no store was created");
}

#[test]
fn a_job_without_regions_runs_its_steps_once() {
    let up = Standin::start(&["--pages", "2"]);
    let d = Deployment::new("");
    let job = format!(
        r#"  popular:
    credential: main
    steps:
      - endpoint: videos.list
        request:
          url: {}/youtube/v3/videos
          query: {{ chart: mostPopular, key: "{{secret}}", tag: "{{job}}-{{step}}" }}
        paginate: {{ token: /nextPageToken, param: pageToken, max_pages: 9 }}
    output: out/popular
"#,
        up.base()
    );
    d.write(&deployment_yaml(
        &embedded_store(&d),
        WIDE,
        "fail_closed",
        &[job],
    ));
    let r = d.portion(&["run", "popular"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        d.outputs("popular"),
        [
            "popular.r000001.s0.p000000.json",
            "popular.r000001.s0.p000001.json"
        ]
    );
    let r = d.portion(&["run", "nope"]);
    assert_eq!(r.code, 2, "an unknown job is a usage error: {r:?}");
    let pages: BTreeSet<u32> = up.seen().iter().map(|s| s.page).collect();
    assert_eq!(pages.len(), 2);
}

/// `http.max_body` bounds what a response may cost: a page declared larger
/// is refused before it is read, an endless body is cut off at the cap,
/// neither is retried (one charge each), and the process's peak memory
/// stays within a small multiple of the cap above what a run of small pages
/// takes; a page under the cap is written whole, the same way.
#[test]
fn max_body_bounds_a_response_and_the_memory_it_takes() {
    const MIB: u64 = 1 << 20;
    // About 5.5 MiB a page: 45,000 items.
    let up = Standin::start(&["--pages", "1", "--items", "45000"]);
    let small = Standin::start(&["--pages", "1"]);
    let d = Deployment::new("");
    let jobs = [
        videos_job("small", "main", &["US"], 1, &small.base()),
        videos_job("big", "main", &["US"], 1, &up.base()),
        videos_job(
            "endless",
            "main",
            &["US"],
            1,
            &format!("{}/endless", up.base()),
        ),
    ];
    let yaml = |max_body: &str| {
        deployment_yaml(&embedded_store(&d), WIDE, "fail_closed", &jobs).replace(
            "backoff: 20ms }",
            &format!("backoff: 20ms, max_body: {max_body} }}"),
        )
    };
    d.write(&yaml("4MiB"));

    let (r, base) = run_measured(&mut d.cmd(&["run", "small"]));
    assert_eq!(r.code, 0, "{r:?}");

    let (r, big) = run_measured(&mut d.cmd(&["run", "big"]));
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("HTTP 200 OK with a body of 5.")
            && r.stderr
                .contains("past http.max_body, 4 MiB (4194304 bytes): not read further"),
        "{r:?}"
    );
    assert!(d.outputs("big").is_empty());

    let (r, endless) = run_measured(&mut d.cmd(&["run", "endless"]));
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("with a body that goes on past http.max_body, 4 MiB"),
        "{r:?}"
    );
    // One request each, one charge each: a body past the cap is not retried.
    let paths: Vec<String> = up.seen().iter().map(|s| s.path.clone()).collect();
    assert_eq!(paths, ["/youtube/v3/videos", "/endless/youtube/v3/videos"]);
    assert!(
        d.status_json()
            .to_string()
            .contains(r#""by_job":{"big":1,"endless":1,"small":1}"#),
        "{}",
        d.status_json()
    );

    // Raised above the page, the same page is written whole.
    d.write(&yaml("8MiB"));
    let (r, fits) = run_measured(&mut d.cmd(&["run", "big"]));
    assert_eq!(r.code, 0, "{r:?}");
    let files = d.outputs("big");
    let page = std::fs::metadata(d.path().join("out/big").join(&files[0]))
        .unwrap()
        .len();
    assert!(page > 5 * MIB && page < 6 * MIB, "{page}");

    eprintln!(
        "peak memory: small pages {} MiB; a 4 MiB cap against a declared {:.1} MiB page {} MiB, against an endless body {} MiB; the page under an 8 MiB cap {} MiB",
        base / MIB,
        page as f64 / MIB as f64,
        big / MIB,
        endless / MIB,
        fits / MIB
    );
    assert!(
        big < base + 4 * MIB,
        "the declared size is refused unread: {big} vs {base}"
    );
    assert!(endless < base + 3 * 4 * MIB, "endless: {endless} vs {base}");
    assert!(
        fits < base + 3 * page,
        "a page under the cap: {fits} vs {base}"
    );
}

/// An upstream whose page tokens go in circles does not burn the budget:
/// a region's walk ends when the next token repeats one it already
/// followed, with a warning, and the cursor moves on to the next region,
/// so a tight budget stopped there resumes with the next region, not
/// with the circle.
#[test]
fn a_page_token_that_repeats_ends_the_walk_and_the_cursor_moves_on() {
    // Always the same token: page 0, then CAUQ1 again and again.
    let up = Standin::start(&["--pages", "30", "--token-cycle", "1"]);
    let d = trending(&up, "embedded", &["US", "GB"], 30, "fail_closed");
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let seen: Vec<(String, Option<String>)> = up
        .seen()
        .iter()
        .map(|s| (s.region.clone(), s.token.clone()))
        .collect();
    let want: Vec<(String, Option<String>)> = ["US", "GB"]
        .iter()
        .flat_map(|r| [(r.to_string(), None), (r.to_string(), Some("CAUQ1".into()))])
        .collect();
    assert_eq!(seen, want);
    assert!(
        r.stderr.contains(
            "region US step 0 page 1: the next page token (\"CAUQ1\") repeats one this walk already followed"
        ),
        "{r:?}"
    );
    assert!(r.stderr.contains("4 calls, spent units 4"), "{r:?}");

    // A circle of two (CAUQ1, CAUQ2, CAUQ1, …), and a budget of 3: US is
    // walked to the end of its circle, and the cursor points at GB.
    let up = Standin::start(&["--pages", "30", "--token-cycle", "2"]);
    let d = trending_with(
        &up,
        "embedded",
        &["{ limit: 3, per: 1h }"],
        &["US", "GB"],
        30,
        "fail_closed",
    );
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    let tokens: Vec<Option<String>> = up.seen().iter().map(|s| s.token.clone()).collect();
    assert_eq!(tokens, [None, Some("CAUQ1".into()), Some("CAUQ2".into())]);
    assert!(
        r.stderr.contains("next run starts at GB step 0 page 0"),
        "{r:?}"
    );
    let cursor = &d.status_json()["credentials"][0]["jobs"][0]["cursor"];
    assert_eq!(
        (&cursor["region"], &cursor["page"], cursor.get("token")),
        (&serde_json::json!("GB"), &serde_json::json!(0), None),
        "{cursor}"
    );
}

/// A failure that a retry cannot mend (a certificate that does not verify,
/// a host name that does not exist) stops the job at once: one attempt,
/// one charge, where a network failure gets its retries.
#[test]
fn a_failure_no_retry_can_mend_is_charged_once() {
    let ca = TestCa::new();
    let tls = TlsRedis::single(&ca, "pw");
    let d = Deployment::new("");
    let jobs = [
        // A TLS server whose certificate comes from a CA that portion does not trust.
        videos_job(
            "tls",
            "main",
            &["US"],
            1,
            &format!("https://127.0.0.1:{}", tls.ports[0]),
        ),
        // RFC 6761: .invalid never resolves.
        videos_job("dns", "main", &["US"], 1, "http://no-such-host.invalid"),
    ];
    d.write(&deployment_yaml(
        &embedded_store(&d),
        WIDE,
        "fail_closed",
        &jobs,
    ));
    for (job, want) in [
        (
            "tls",
            "the upstream's TLS certificate does not verify: not retried",
        ),
        ("dns", "the host name does not exist: not retried"),
    ] {
        let r = d.portion(&["run", job]);
        assert_eq!(r.code, 1, "{job}: {r:?}");
        assert!(r.stderr.contains(want), "{job}: {r:?}");
        assert!(!r.stderr.contains("retry 1 of 3"), "{job}: {r:?}");
    }
    assert!(
        d.status_json()
            .to_string()
            .contains(r#""by_job":{"dns":1,"tls":1}"#),
        "{}",
        d.status_json()
    );
}

/// An output folder that takes no file: `check` says so (78, naming the
/// job's output), and a run stops (1) before its first charge, where it
/// used to charge and fetch every page, then fail to write it.
#[test]
fn a_read_only_output_folder_is_caught_before_anything_is_charged() {
    let up = Standin::start(&[]);
    let d = trending(&up, "embedded", &["US", "GB"], 1, "fail_closed");
    let out = d.path().join("out/trending");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o555)).unwrap();
    let wrapper = bound_by_permissions(&out);

    let r = run(&mut d.cmd_via(&wrapper, &["check"]));
    assert_eq!(r.code, 78, "{r:?}");
    assert!(
        r.stderr.contains(&format!(
            "jobs.trending.output: {}: cannot write in {}: Permission denied",
            out.display(),
            out.display()
        )),
        "{r:?}"
    );

    let r = run(&mut d.cmd_via(&wrapper, &["run"]));
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains(&format!(
            "cannot write pages in {}: Permission denied",
            out.display()
        )),
        "{r:?}"
    );
    assert!(up.seen().is_empty(), "nothing sent: {:?}", up.seen());
    let status = d.status_json();
    assert_eq!(status["credentials"][0]["charges_recorded"], 0, "{status}");

    // Writable again: the same run goes through.
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = run(&mut d.cmd_via(&wrapper, &["run"]));
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(d.outputs("trending").len(), 2);
}

/// An output folder that is a symbolic link to nothing: `check` says so
/// (78), rather than pass and leave every run to fail making the folder.
#[test]
fn a_dangling_symlink_as_output_is_caught_by_check() {
    let up = Standin::start(&[]);
    let d = trending(&up, "embedded", &["US"], 1, "fail_closed");
    std::fs::create_dir_all(d.path().join("out")).unwrap();
    let out = d.path().join("out/trending");
    std::os::unix::fs::symlink(d.path().join("gone/nowhere"), &out).unwrap();
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 78, "{r:?}");
    assert!(
        r.stderr.contains("jobs.trending.output")
            && r.stderr
                .contains("a symbolic link to something that does not exist"),
        "{r:?}"
    );
}
