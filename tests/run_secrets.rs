//! A distinctive API key never appears in any output, log line, error,
//! output file or the store, even with `RUST_LOG=trace`, through success,
//! retries, a refused key and a network error.

use crate::common::deployment::{
    Deployment, deployment_yaml, embedded_store, portion, run, videos_job,
};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;
use crate::common::yaml::{Config, Credential, Job, Step, limit};

const KEY: &str = "AIzaSyD-distinctive-7f3c9e21";
const WRONG: &str = "AIzaSyD-wrong-key-55b0a1";

fn assert_clean(what: &str, text: &str) {
    for k in [KEY, WRONG, "AIzaSyD"] {
        assert!(!text.contains(k), "{what} shows a key:\n{text}");
    }
}

#[test]
fn the_api_key_never_appears_anywhere() {
    let redis = RedisServer::start_with(&["--rdbcompression", "no"]);
    let up = Standin::start(&["--key", KEY, "--fail-first", "2", "--pages", "2"]);
    let d = Deployment::new("");
    std::fs::write(d.path().join("key"), format!("{KEY}\n")).unwrap();
    std::fs::write(d.path().join("wrong"), format!("{WRONG}\n")).unwrap();
    let mut jobs = vec![videos_job("good", "main", &["US", "GB"], 2, &up.base())];
    // A job whose upstream is a closed port: network errors, retried.
    jobs.push(videos_job(
        "unreachable",
        "main",
        &["US"],
        1,
        "http://127.0.0.1:1",
    ));
    let mut yaml = deployment_yaml(
        &redis.url(),
        &["{ limit: 1000, per: 1h }"],
        "fail_closed",
        &jobs,
    );
    // A second credential with a key the upstream refuses (400).
    yaml = yaml.replace(
        "endpoints:\n",
        "  other:\n    secret: { file: wrong }\n    pools: { units: [ { limit: 1000, per: 1h } ] }\nendpoints:\n",
    );
    yaml.push_str(&videos_job("refused", "other", &["US"], 1, &up.base()));
    d.write(&yaml);

    let mut seen_codes = Vec::new();
    for args in [
        &["check"][..],
        &["-vv", "run", "good"],
        &["run", "refused"],
        &["run", "unreachable"],
    ] {
        let r = run(d.cmd(args).env("RUST_LOG", "trace"));
        assert_clean(&format!("portion {args:?}"), &r.all());
        seen_codes.push(r.code);
        if args.contains(&"refused") {
            assert!(r.stderr.contains("API key not valid"), "{r:?}");
        }
        if args.contains(&"unreachable") {
            assert!(r.stderr.contains("could not connect"), "{r:?}");
            assert!(
                r.stderr.contains("key=***"),
                "the URL is shown with the key masked: {r:?}"
            );
        }
        if args.contains(&"good") {
            // Trace logging was on, and did reach the HTTP layer's neighbours.
            assert!(
                r.stderr.contains("TRACE") || r.stderr.contains("DEBUG"),
                "{r:?}"
            );
        }
    }
    assert_eq!(seen_codes, [0, 0, 1, 1]);
    assert!(
        up.seen().len() >= 6,
        "the good job really ran: {:?}",
        up.seen()
    );

    for f in d.outputs("good") {
        assert_clean(
            &f,
            &std::fs::read_to_string(d.path().join("out/good").join(&f)).unwrap(),
        );
    }

    // The store: every key and value, straight from an uncompressed dump.
    assert_eq!(redis.cli(&["SAVE"]), "OK");
    let dump = std::fs::read(redis.dir.path().join("dump.rdb")).expect("dump.rdb");
    assert!(
        dump.windows(11).any(|w| w == b"portion:job"),
        "the dump holds the store's keys"
    );
    assert_clean("the Redis store", &String::from_utf8_lossy(&dump));
}

/// A store password given through `$PORTION_STORE` never shows in help, the
/// man page or an error.
#[test]
fn a_store_password_in_the_environment_never_shows() {
    let home = tempfile::tempdir().unwrap();
    let url = format!("redis://:{KEY}@127.0.0.1:1/0");
    for args in [&["--help"][..], &["run", "--help"], &["man"], &["status"]] {
        let mut cmd = portion(home.path());
        cmd.args(args).env("PORTION_STORE", &url);
        if args == ["status"] {
            std::fs::write(home.path().join("portion.yaml"), "credentials: {}\n").unwrap();
            cmd.current_dir(home.path());
        }
        let r = run(&mut cmd);
        assert_clean(&format!("portion {args:?}"), &r.all());
        if args == ["status"] {
            assert_eq!(r.code, 69, "{r:?}");
            assert!(r.stderr.contains("redis://:***@127.0.0.1:1/0"), "{r:?}");
        }
    }
}

/// Units charged to `job` in the deployment's store so far.
fn charged(d: &Deployment, job: &str) -> u64 {
    let s = d.status_json();
    s["credentials"][0]["pools"][0]["windows"][0]["by_job"][job]
        .as_u64()
        .unwrap_or(0)
}

/// Redirects: one to the same origin is followed, at most 3 hops, each hop
/// charged, never with a Referer; one to another origin (host, port or
/// scheme), whatever the status and method, is not followed: the job stops
/// (1) naming the target with the key masked, and the other origin sees
/// nothing, neither the key in the query nor an `X-Api-Key` header.
#[test]
fn a_redirect_never_carries_the_key_to_another_origin() {
    let up = Standin::start(&["--key", KEY, "--pages", "1"]);
    let other = Standin::start(&["--key", KEY, "--pages", "1"]);
    let d = Deployment::new("");
    std::fs::write(d.path().join("key"), format!("{KEY}\n")).unwrap();
    let localhost = format!("http://localhost:{}", up.port);
    let https = format!("https://127.0.0.1:{}", up.port);
    let jobs = vec![
        videos_job("hops", "main", &["US"], 1, &up.hops(3)),
        videos_job("loop", "main", &["US"], 1, &up.hops(9)),
        videos_job("port", "main", &["US"], 1, &up.away(302, &other.base())),
        videos_job("host", "main", &["US"], 1, &up.away(302, &localhost)),
        videos_job("scheme", "main", &["US"], 1, &up.away(301, &https)),
        // The key in a header, a POST, and a 307 (which keeps both).
        format!(
            r#"  header:
    credential: main
    steps:
      - endpoint: videos.list
        request:
          method: POST
          url: {}/youtube/v3/videos
          query: {{ part: snippet, regionCode: US }}
          headers: {{ X-Api-Key: "{{secret}}" }}
    output: out/header
"#,
            up.away(307, &other.base())
        ),
    ];
    d.write(&deployment_yaml(
        &embedded_store(&d),
        &["{ limit: 1000, per: 1h }"],
        "fail_closed",
        &jobs,
    ));

    // Same origin, 3 hops: followed, 4 requests, 4 charges, no Referer.
    let r = run(d.cmd(&["run", "hops"]).env("RUST_LOG", "trace"));
    assert_clean("run hops", &r.all());
    assert_eq!(r.code, 0, "{r:?}");
    let seen = up.seen();
    let paths: Vec<&str> = seen.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/hop/3/youtube/v3/videos",
            "/hop/2/youtube/v3/videos",
            "/hop/1/youtube/v3/videos",
            "/youtube/v3/videos"
        ]
    );
    assert!(seen.iter().all(|s| s.referer.is_none()), "{seen:?}");
    assert_eq!(seen.last().unwrap().status, 200, "the key came along");
    assert!(r.stderr.contains("4 calls, spent units 4"), "{r:?}");
    assert_eq!(d.outputs("hops").len(), 1);

    // More than 3 hops: the job stops after the 4th request, each charged.
    let r = run(d.cmd(&["run", "loop"]).env("RUST_LOG", "trace"));
    assert_clean("run loop", &r.all());
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("more than 3 redirects"), "{r:?}");
    assert_eq!(up.seen().len(), 4 + 4);
    assert_eq!(charged(&d, "loop"), 4);

    // Another origin: never followed, whatever carries the key.
    let other_port = format!(
        "redirects to another origin, {}/youtube/v3/videos?part=snippet&chart=mostPopular&regionCode=US&key=***",
        other.base()
    );
    let other_host =
        format!("redirects to another origin, {localhost}/youtube/v3/videos?part=snippet");
    let other_scheme = format!("redirects to another origin, {https}/youtube/v3/videos?part");
    let header = format!(
        "HTTP 307 Temporary Redirect redirects to another origin, {}/youtube/v3/videos?part=snippet&regionCode=US",
        other.base()
    );
    for (job, want) in [
        ("port", other_port),
        ("host", other_host),
        ("scheme", other_scheme),
        ("header", header),
    ] {
        let before = up.seen().len();
        let r = run(d.cmd(&["run", job]).env("RUST_LOG", "trace"));
        assert_clean(&format!("run {job}"), &r.all());
        assert_eq!(r.code, 1, "{job}: {r:?}");
        assert!(r.stderr.contains(&want), "{job}: missing {want:?} in {r:?}");
        assert!(r.stderr.contains("not followed"), "{job}: {r:?}");
        assert_eq!(up.seen().len(), before + 1, "{job}: one request, no hop");
        assert_eq!(charged(&d, job), 1, "{job}");
        assert!(d.outputs(job).is_empty(), "{job}");
    }
    assert!(
        other.seen().is_empty(),
        "the other origin saw: {:?}",
        other.seen()
    );
    let header_request = up.seen().last().cloned().unwrap();
    assert_eq!(header_request.method, "POST");
    assert!(header_request.x_api_key.is_some(), "{header_request:?}");
}

/// A key with characters every encoding changes (`~`, a space, `+`) is
/// masked however a request carries it: form-encoded in the query (`-vv`
/// logs every URL), percent-encoded in the path (a refused request's error
/// names it), in the URL's userinfo and in the Basic `Authorization` it
/// becomes, echoed back by the upstream (base64); and a page token that
/// echoes the key is stored masked in the cursor, shown masked by `status`,
/// and put back by the next run, which resumes with the right token.
#[test]
fn the_key_is_masked_in_every_encoding_and_in_the_cursor() {
    const ODD: &str = "AIzaSyD-tilde~space Key+plus77";
    // The middle of base64("user:" + ODD), which no alignment of the mask may leave.
    const BASE64: &str = "SXphU3lELXRpbGRlfnNwYWNlIEtleStwbHVz";
    let clean = |what: &str, text: &str| {
        assert_clean(what, text);
        for leak in [ODD, BASE64, "tilde", "plus77"] {
            assert!(!text.contains(leak), "{what} shows {leak:?}:\n{text}");
        }
    };
    let up = Standin::start(&["--key", ODD, "--pages", "3", "--token-echoes-key"]);
    let d = Deployment::new("");
    std::fs::write(d.path().join("key"), format!("{ODD}\n")).unwrap();
    let request = |name: &str, url: &str| {
        format!(
            "  {name}:\n    credential: main\n    steps:\n      - endpoint: videos.list\n        request: {{ url: \"{url}\" }}\n    output: out/{name}\n"
        )
    };
    let jobs = |budget: &[&str]| {
        deployment_yaml(
            &embedded_store(&d),
            budget,
            "fail_closed",
            &[
                request(
                    "path",
                    &format!("{}/youtube/v3/{{secret}}/videos", up.base()),
                ),
                request(
                    "basic",
                    &format!("http://user:{{secret}}@127.0.0.1:{}/echo/", up.port),
                ),
                videos_job("query", "main", &["US", "GB"], 3, &up.base()),
            ],
        )
    };
    d.write(&jobs(&["{ limit: 4, per: 1h }"]));

    let r = run(d.cmd(&["run", "path"]).env("RUST_LOG", "trace"));
    clean("run path", &r.all());
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("/youtube/v3/***/videos: the upstream refused"),
        "{r:?}"
    );

    let r = run(d.cmd(&["run", "basic"]).env("RUST_LOG", "trace"));
    clean("run basic", &r.all());
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("http://user:***@127.0.0.1:"), "{r:?}");
    assert!(
        r.stderr.contains("Authorization: Basic dXNlcjp***"),
        "{r:?}"
    );

    // Two units left: US pages 0 and 1; the cursor then holds page 2's
    // token, which carries the key.
    let r = run(d.cmd(&["-vv", "run", "query"]).env("RUST_LOG", "trace"));
    clean("run query", &r.all());
    assert_eq!(r.code, 75, "{r:?}");
    assert!(r.stderr.contains("&key=***&pageToken=CAUQ1.***"), "{r:?}");
    let status = d.portion(&["status", "--json"]);
    clean("status --json", &status.all());
    let s: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    let cursor = &s["credentials"][0]["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job"] == "query")
        .unwrap()["cursor"];
    assert_eq!(cursor["page"], 2, "{cursor}");
    assert_eq!(cursor["token"], "CAUQ2.***", "{cursor}");
    clean("status", &d.portion(&["status"]).all());

    // With room, the next run resumes at US page 2 with the real token.
    d.write(&jobs(&["{ limit: 1000, per: 1h }"]));
    let r = run(d.cmd(&["-vv", "run", "query"]).env("RUST_LOG", "trace"));
    clean("run query again", &r.all());
    assert_eq!(r.code, 0, "{r:?}");
    let pages: Vec<(String, u32, u16)> = up
        .seen()
        .iter()
        .filter(|s| s.path == "/youtube/v3/videos")
        .map(|s| (s.region.clone(), s.page, s.status))
        .collect();
    let want: Vec<(String, u32, u16)> = [
        ("US", 0),
        ("US", 1),
        ("US", 2),
        ("GB", 0),
        ("GB", 1),
        ("GB", 2),
    ]
    .iter()
    .map(|(r, p)| (r.to_string(), *p, 200))
    .collect();
    assert_eq!(pages, want);
    let resumed = up.seen().into_iter().rfind(|s| s.region == "US").unwrap();
    assert_eq!(
        resumed.token,
        Some(format!("CAUQ2.{ODD}")),
        "the token put back"
    );
    // The pages hold the upstream's answers, the key it echoed masked.
    let files = d.outputs("query");
    assert_eq!(files.len(), 6, "{files:?}");
    for f in files {
        let text = std::fs::read_to_string(d.path().join("out/query").join(&f)).unwrap();
        clean(&f, &text);
        let page: serde_json::Value = serde_json::from_str(&text).unwrap();
        if !f.contains(".p000002.") {
            assert!(
                page["nextPageToken"].as_str().unwrap().ends_with(".***"),
                "{f}: {text}"
            );
        }
    }
}

/// A key holding a `%` is masked where a request carries it encoded:
/// `%` becomes `%25`, which starts with the `%` itself, so the masking must
/// try both readings of it. The upstream refuses the key (400): the error
/// and `-vv`'s log of the request both name the URL.
#[test]
fn a_key_with_a_percent_sign_is_masked_where_it_is_encoded() {
    const PCT: &str = "AIzaSyD-50%41off-pct77";
    let up = Standin::start(&["--key", "another"]);
    let d = Deployment::new("");
    std::fs::write(d.path().join("key"), format!("{PCT}\n")).unwrap();
    d.write(&deployment_yaml(
        &embedded_store(&d),
        &["{ limit: 100, per: 1h }"],
        "fail_closed",
        &[videos_job("query", "main", &["US"], 1, &up.base())],
    ));
    let r = run(d.cmd(&["-vv", "run", "query"]).env("RUST_LOG", "trace"));
    assert_eq!(r.code, 1, "{r:?}");
    for leak in [PCT, "50%2541off", "41off", "pct77"] {
        assert!(!r.all().contains(leak), "shows {leak:?}:\n{}", r.all());
    }
    assert!(
        r.stderr.matches("&key=***").count() >= 2,
        "the request's log line and the error show the URL, masked: {r:?}"
    );
}

/// A deployment of one job that walks the stand-in's `/ids` (2 pages, then
/// an empty one) with the all-digit key `12345678`, asking it to echo the
/// key among the ids (a string).
fn digit_key(up: &Standin) -> Deployment {
    let d = Deployment::new("");
    std::fs::write(d.path().join("key"), "12345678\n").unwrap();
    d.write(&digit_key_yaml(&embedded_store(&d), &up.base()));
    d
}

fn digit_key_yaml(store: &str, base: &str) -> String {
    let ids = Step::new("ids")
        .url(&format!("\"{base}/ids\""))
        .query(r#"{ key: "{secret}", echo: "1" }"#)
        .paginate("{ page: page, start: 1, until_empty: /items, max_pages: 5 }");
    Config::new(store)
        .http("{ timeout: 5s, connect_timeout: 2s, retries: 0 }")
        .credential(Credential::new("main").pool("units", &[limit(100, "1h")]))
        .endpoint("ids", "1")
        .job(Job::new("ids", "main").step(ids))
        .render()
}

/// Every page file of `d`'s job: parsed (each must be JSON), and whether
/// any holds the key.
fn pages_of(d: &Deployment) -> (usize, bool) {
    let files = d.outputs("ids");
    let mut shows = false;
    for f in &files {
        let text = std::fs::read_to_string(d.path().join("out/ids").join(f)).unwrap();
        serde_json::from_str::<serde_json::Value>(&text)
            .unwrap_or_else(|e| panic!("{f} is not JSON ({e}): {text}"));
        shows |= text.contains("12345678");
    }
    (files.len(), shows)
}

#[test]
fn an_all_digit_key_is_masked_in_strings_and_a_page_holding_it_in_a_number_is_refused() {
    // In a string: masked, the page JSON.
    let up = Standin::start(&["--key", "12345678", "--pages", "2"]);
    let d = digit_key(&up);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(pages_of(&d), (3, false), "{r:?}");
    let first = std::fs::read_to_string(d.path().join("out/ids").join(&d.outputs("ids")[0]));
    assert!(first.unwrap().contains(r#""n":"***""#), "{r:?}");

    // In a number (`"views": 91234567899`): *** would break the page, so
    // it is not written, and the run says why and exits 1.
    let up = Standin::start(&["--key", "12345678", "--pages", "2", "--key-in-number"]);
    let d = digit_key(&up);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("outside a JSON string"), "{r:?}");
    assert!(!r.all().contains("12345678"), "{r:?}");
    assert_eq!(pages_of(&d), (0, false), "{r:?}");

    // A number whose value is the key, written otherwise (`"views":
    // 1.2345678e7, "w": 123456.78E2`): refused alike.
    let up = Standin::start(&["--key", "12345678", "--pages", "2", "--key-in-exponent"]);
    let d = digit_key(&up);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("outside a JSON string"), "{r:?}");
    assert_eq!(pages_of(&d), (0, false), "{r:?}");
    assert_eq!(up.seen().len(), 1, "{r:?}");
}

/// A page holding the key outside a string is refused as a page the
/// upstream refuses for itself: its region ends with an error naming it
/// (charged once), the other regions are served, the run exits 1, and
/// the next run starts that region afresh at its first page rather than
/// ask for the refused page again (review 2, item 4).
#[test]
fn a_page_holding_the_key_in_a_number_ends_only_its_region() {
    let up = Standin::start(&[
        "--key",
        "12345678",
        "--pages",
        "2",
        "--key-in-number",
        "--key-in-number-where",
        "region=A&page=2",
    ]);
    let d = digit_key(&up);
    let yaml = std::fs::read_to_string(d.config()).unwrap();
    d.write(
        &yaml
            .replace("    steps:", "    regions: [A, B]\n    steps:")
            .replace(r#"echo: "1""#, r#"region: "{region}""#),
    );
    let asked = |from: usize| -> Vec<(String, u32)> {
        up.seen()[from..]
            .iter()
            .map(|s| (s.region.clone(), s.page))
            .collect()
    };
    // A's second page asked once, then B's three (the last one empty).
    let round: Vec<(String, u32)> = [("A", 1), ("A", 2), ("B", 1), ("B", 2), ("B", 3)]
        .iter()
        .map(|(r, n)| (r.to_string(), *n))
        .collect();
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(asked(0), round, "{r:?}");
    assert!(r.stderr.contains("region A step 0 page 1"), "{r:?}");
    assert!(r.stderr.contains("outside a JSON string"), "{r:?}");
    assert!(r.stderr.contains("the region ends here"), "{r:?}");
    assert!(r.stderr.contains("1 FAILED: A"), "{r:?}");
    assert!(!r.all().contains("12345678"), "{r:?}");
    // A's first page and B's three written; A's second not.
    assert_eq!(pages_of(&d), (4, false), "{r:?}");

    // The next run starts A afresh: its first page first, not the refused one.
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("starts at region A step 0 page 0"),
        "{r:?}"
    );
    assert_eq!(asked(5), round, "{r:?}");
}
