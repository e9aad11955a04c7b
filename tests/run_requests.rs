//! Requests as real APIs need them, end to end: a POST with a JSON body
//! template (placeholders filled, JSON escaping kept) and a bearer header
//! that the stand-in checks; and every new key of the second wave's
//! requests and pagination, refused with 78 (file and field named) when
//! it is wrong, before anything is sent.

use crate::common::deployment::{api_deployment, api_yaml, one_region_job};
use crate::common::standin::Standin;

fn chat_job(base: &str, body: &str) -> String {
    format!(
        r#"  chat:
    credential: main
    regions: ["m/1", "say \"hi\""]
    steps:
      - endpoint: api
        request:
          method: POST
          url: "{base}/chat"
          headers: {{ Authorization: "Bearer {{secret}}" }}
{body}
    output: out/chat
"#
    )
}

const BODY: &str = r#"          body:
            model: "model-{region}"
            temperature: 0.5
            stream: false
            messages:
              - { role: user, content: "about {region}, step {step}, page {page}" }"#;

#[test]
fn a_post_job_sends_its_json_body_filled_and_escaped() {
    let up = Standin::start(&[]);
    let d = api_deployment(&chat_job(&up.base(), BODY));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let seen = up.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen.iter().all(|s| s.method == "POST" && s.status == 200),
        "{seen:?}"
    );
    assert_eq!(
        seen[1].body,
        Some(serde_json::json!({
            "model": "model-say \"hi\"",
            "temperature": 0.5,
            "stream": false,
            "messages": [{ "role": "user", "content": "about say \"hi\", step 0, page 0" }],
        }))
    );
    // The region's quote and space are percent-encoded in the file name.
    let files = d.outputs("chat");
    assert!(
        files.contains(&"chat.r000001.say%20%22hi%22.s0.p000000.json".to_string()),
        "{files:?}"
    );
    // Without the body, the stand-in refuses the request (400): exit 1.
    let d = api_deployment(&chat_job(&up.base(), ""));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("HTTP 400"), "{r:?}");
}

/// A valid file with one paginated POST step; each case changes one line.
fn base(upstream: &str) -> String {
    api_deployment_yaml(&format!(
        r#"  j:
    credential: main
    regions: [a/b]
    steps:
      - endpoint: api
        request:
          method: POST
          url: "{upstream}/chat"
          body: {{ model: m, messages: ["{{region}}"] }}
        paginate: {{ page: page, start: 1, until_empty: /data, max_pages: 3 }}
    output: out/j
"#
    ))
}

fn api_deployment_yaml(jobs: &str) -> String {
    api_yaml("embedded:ledger.sqlite3", jobs)
}

#[test]
fn every_bad_request_or_pagination_key_exits_78_naming_file_and_field() {
    let up = Standin::start(&[]);
    let good = base(&up.base());
    let d = api_deployment("");
    d.write(&good);
    let ok = d.portion(&["check"]);
    assert_eq!(ok.code, 0, "{ok:?}");
    let paginate = "{ page: page, start: 1, until_empty: /data, max_pages: 3 }";
    let cases: &[(&str, &str, &str, &[&str])] = &[
        (
            "method",
            "method: POST",
            "method: DELETE",
            &["steps[0].request.method", "GET, POST or PUT"],
        ),
        (
            "body on a GET",
            "method: POST",
            "method: GET",
            &["steps[0].request.body", "carries no body"],
        ),
        (
            "body placeholder",
            "[\"{region}\"]",
            "[\"{regoin}\"]",
            &["steps[0].request.body.messages[0]", "unknown placeholder"],
        ),
        (
            "empty region",
            "regions: [a/b]",
            "regions: [a/b, \"\"]",
            &["jobs.j.regions[1]", "must not be empty"],
        ),
        (
            "control in region",
            "regions: [a/b]",
            "regions: [\"a\\nb\"]",
            &["jobs.j.regions[0]", "control characters"],
        ),
        (
            "two kinds",
            paginate,
            "{ link: next, token: /t, param: p, max_pages: 3 }",
            &["steps[0].paginate", "exactly one kind", "token, link"],
        ),
        (
            "no kind",
            paginate,
            "{ max_pages: 3 }",
            &["steps[0].paginate", "exactly one kind"],
        ),
        (
            "link relation",
            paginate,
            "{ link: prev, max_pages: 3 }",
            &["steps[0].paginate.link", "only relation followed is next"],
        ),
        (
            "next_url pointer",
            paginate,
            "{ next_url: paging.next, max_pages: 3 }",
            &["steps[0].paginate.next_url", "not a JSON pointer"],
        ),
        (
            "page without until_empty",
            paginate,
            "{ page: page, max_pages: 3 }",
            &[
                "steps[0].paginate.until_empty",
                "page pagination needs until_empty",
            ],
        ),
        (
            "page's negative start",
            paginate,
            "{ page: page, start: -1, until_empty: /data, max_pages: 3 }",
            &["steps[0].paginate.start", "negative"],
        ),
        (
            "page with size",
            paginate,
            "{ page: page, size: 5, until_empty: /data, max_pages: 3 }",
            &["steps[0].paginate.size", "not a key of page pagination"],
        ),
        (
            "offset's size",
            paginate,
            "{ offset: offset, size: 0, until_empty: /data, max_pages: 3 }",
            &["steps[0].paginate.size", "not positive"],
        ),
        (
            "offset without size",
            paginate,
            "{ offset: offset, until_empty: /data, max_pages: 3 }",
            &["steps[0].paginate.size", "needs size"],
        ),
        (
            "offset's empty name",
            paginate,
            "{ offset: \"\", size: 2, until_empty: /data, max_pages: 3 }",
            &["steps[0].paginate.offset", "must not be empty"],
        ),
        (
            "until_empty pointer",
            paginate,
            "{ offset: offset, size: 2, until_empty: data, max_pages: 3 }",
            &["steps[0].paginate.until_empty", "not a JSON pointer"],
        ),
        (
            "link with param",
            paginate,
            "{ link: next, param: p, max_pages: 3 }",
            &["steps[0].paginate.param", "not a key of link pagination"],
        ),
        (
            "max_pages",
            paginate,
            "{ link: next, max_pages: 0 }",
            &["steps[0].paginate.max_pages", "out of range"],
        ),
    ];
    d.assert_each_edit_exits_78(&good, cases);
    assert!(up.seen().is_empty(), "nothing was sent: {:?}", up.seen());
}

/// A server of one answer: every request gets HTTP `status` with `body`.
fn answering(status: &'static str, body: &'static str) -> String {
    use crate::common::server::{raw, serving};
    let json = ["Content-Type: application/json"];
    serving(move |_| raw(status, &json, body.as_bytes())).0
}

/// An upstream's error text reaches the log with its control and
/// bidirectional characters escaped: a U+202E RIGHT-TO-LEFT OVERRIDE made
/// the rest of the line read backwards, an ESC recoloured the terminal.
#[test]
fn upstream_text_reaches_the_terminal_escaped() {
    use crate::common::deployment::{
        Deployment, WIDE, deployment_yaml, embedded_store, videos_job,
    };
    let base = answering(
        "400 Bad Request",
        "{\"error\": {\"message\": \"evil\u{202e}txt \u{1b}[31mred\u{2066}\"}}",
    );
    let d = Deployment::new("");
    let job = videos_job("trending", "main", &["US"], 1, &base);
    d.write(&deployment_yaml(
        &embedded_store(&d),
        WIDE,
        "fail_closed",
        &[job],
    ));
    let r = d.portion(&["run"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        r.stderr
            .contains("evil\\u{202e}txt \\u{1b}[31mred\\u{2066}"),
        "{r:?}"
    );
    for raw in ['\u{202e}', '\u{1b}', '\u{2066}'] {
        assert!(!r.all().contains(raw), "{raw:?} unescaped: {r:?}");
    }
}

/// An upstream that compresses its answers although `portion` did not ask
/// (RFC 9110 lets it): each coding is decoded and the pages are the JSON
/// it sent; a compression bomb is bounded by `max_body` decoded, refused
/// once, not retried.
#[test]
fn compressed_answers_are_decoded_and_max_body_bounds_the_decoded_size() {
    for coding in ["gzip", "deflate", "br", "zstd"] {
        let up = Standin::start(&["--pages", "2", "--items", "2", "--encode", coding]);
        let d = api_deployment(&one_region_job(
            "j",
            &format!("{}/youtube/v3/videos", up.base()),
        ));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{coding}: {r:?}");
        assert_eq!(up.seen().len(), 2, "{coding}");
        let files = d.outputs("j");
        assert_eq!(files.len(), 2, "{coding}: {files:?}");
        let page: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.path().join("out/j").join(&files[1])).unwrap())
                .unwrap();
        assert_eq!(page["items"][1]["id"], "GB01001", "{coding}");
    }
    // 16 MiB of JSON, gzipped to about 16 KiB, under a 64 KiB cap.
    let up = Standin::start(&[]);
    let d = api_deployment(&one_region_job(
        "bomb",
        &format!("{}/odd/bomb/16777216", up.base()),
    ));
    let yaml = std::fs::read_to_string(d.config()).unwrap();
    d.write(&yaml.replace("http: { ", "http: { max_body: 64KiB, "));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("past http.max_body, 64 KiB"), "{r:?}");
    assert_eq!(up.seen().len(), 1, "not retried");
}

/// Answers that cannot become JSON by asking again (a 204, an HTML or an
/// XML page, a coding nobody decodes) are charged once, not retried
/// (`retries: 1`): the region ends with an error naming why, exit 1.
#[test]
fn answers_that_can_never_be_a_page_are_not_retried() {
    let up = Standin::start(&[]);
    let base = up.base();
    let jobs: String = ["204", "html", "xml", "encoding", "corrupt"]
        .iter()
        .map(|odd| one_region_job(&format!("j{odd}"), &format!("{base}/odd/{odd}/x")))
        .collect();
    let d = api_deployment(&jobs);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(up.seen().len(), 5, "one request each: {r:?}");
    for why in [
        "HTTP 204 No Content carries no body",
        "it is an HTML or XML page",
        "its Content-Encoding is \"compress\", which portion cannot decode",
        "HTTP 200 OK with a body that cannot be decoded",
    ] {
        assert!(r.stderr.contains(why), "{why}: {r:?}");
    }
    assert_eq!(r.stderr.matches("not retried").count(), 5, "{r:?}");
    assert_eq!(r.stderr.matches("1 FAILED: GB").count(), 5, "{r:?}");
    assert!(!r.all().contains("demo-key"), "{r:?}");
}

/// A same-origin redirect whose Location drops the query: the hop gets
/// the key in `query` again, as a next link does. One to another origin
/// is still not followed.
#[test]
fn a_same_origin_redirect_hop_carries_the_query_key() {
    let up = Standin::start(&["--pages", "1"]);
    let url = format!("{}/hop-keyless/youtube/v3/videos", up.base());
    let d = api_deployment(&one_region_job("j", &url));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let seen = up.seen();
    let hops: Vec<(&str, u16)> = seen.iter().map(|s| (s.path.as_str(), s.status)).collect();
    assert_eq!(
        hops,
        [
            ("/hop-keyless/youtube/v3/videos", 302),
            ("/youtube/v3/videos", 200)
        ]
    );
    assert!(!r.all().contains("demo-key"), "{r:?}");

    let other = format!("http://localhost:{}", up.port);
    let away = format!("{}/youtube/v3/videos", up.away(302, &other));
    let d = api_deployment(&one_region_job("j", &away));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("redirects to another origin"), "{r:?}");
    let seen = up.seen();
    assert_eq!(seen.len(), 3, "the redirect only: {seen:?}");
    assert!(seen[2].path.starts_with("/away/302/"), "{seen:?}");
}
