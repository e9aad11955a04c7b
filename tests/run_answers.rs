//! Answers of an upstream nobody here wrote, byte for byte, from a small
//! server in the test: error answers whose body does not decode, codings
//! named in capitals, raw deflate or stacked, a byte order mark before
//! JSON, a Location with raw UTF-8, a header that echoes the key.

use std::io::Write;

use crate::common::deployment::{api_deployment, one_region_job};
use crate::common::server::{path, raw, serving};

const PAGE: &[u8] = br#"{"items":[{"id":"a"}]}"#;

/// A gzip header, then no deflate stream: a body that does not decode.
const BROKEN_GZIP: &[u8] = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff\xff\xfenot deflate";

/// An error answer whose compressed body does not decode is handled by
/// its status, not retried as a body that failed to arrive: a 429 blocks
/// the credential (exit 75), a 404 is refused, each charged once
/// (`retries: 1` would send each twice); a 503 is retried as a 5xx is.
#[test]
fn an_error_answer_whose_body_does_not_decode_is_handled_by_its_status() {
    let (base, heads) = serving(|head| {
        let status = match path(head) {
            "/429" => "429 Too Many Requests",
            "/503" => "503 Service Unavailable",
            _ => "404 Not Found",
        };
        raw(
            status,
            &["Retry-After: 3600", "Content-Encoding: gzip"],
            BROKEN_GZIP,
        )
    });
    let d = api_deployment(&one_region_job("j", &format!("{base}/429")));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "blocked: {r:?}");
    assert_eq!(heads.lock().unwrap().len(), 1, "not retried: {r:?}");
    let status = d.status_json();
    assert!(
        status["credentials"][0]["blocked_until"].is_string(),
        "{status}"
    );

    let d = api_deployment(&one_region_job("j", &format!("{base}/404")));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("HTTP 404"), "{r:?}");
    assert_eq!(heads.lock().unwrap().len(), 2, "not retried: {r:?}");

    // A 5xx is retried as a server error (`retries: 1`), said so.
    let d = api_deployment(&one_region_job("j", &format!("{base}/503")));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("HTTP 503 Service Unavailable; retry 1 of 1"),
        "{r:?}"
    );
    assert_eq!(heads.lock().unwrap().len(), 4, "{r:?}");
}

/// A `Content-Encoding` that echoes the key reaches no message: the value
/// is shown masked, as URLs are.
#[test]
fn a_header_value_that_echoes_the_key_is_shown_masked() {
    let (base, _heads) = serving(|head| {
        let key = head
            .split(['?', '&', ' '])
            .find_map(|p| p.strip_prefix("key="))
            .unwrap_or_default()
            .to_string();
        raw(
            "200 OK",
            &[&format!("Content-Encoding: x-{key}\"q")],
            b"\x00 coded",
        )
    });
    let d = api_deployment(&one_region_job("j", &format!("{base}/p")));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("its Content-Encoding is \"x-***\"q\", which portion cannot decode"),
        "{r:?}"
    );
    assert!(!r.all().contains("demo-key"), "{r:?}");
}

/// portion asks for the codings it reads whole (gzip, br, zstd), not
/// `deflate`, whose name servers use for two formats; one sent unasked is
/// read either way, a coding named in capitals is read as its name, and a
/// stack of codings is refused once, naming it.
#[test]
fn codings_are_asked_for_and_read_as_rfc_9110_names_them() {
    fn deflated(raw_stream: bool) -> Vec<u8> {
        let level = flate2::Compression::default();
        if raw_stream {
            let mut e = flate2::write::DeflateEncoder::new(Vec::new(), level);
            e.write_all(PAGE).unwrap();
            e.finish().unwrap()
        } else {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), level);
            e.write_all(PAGE).unwrap();
            e.finish().unwrap()
        }
    }
    let (base, heads) = serving(|head| match path(head) {
        "/rawdeflate" => raw("200 OK", &["Content-Encoding: deflate"], &deflated(true)),
        "/GZIP" => raw("200 OK", &["Content-Encoding: GZIP"], &deflated(false)),
        _ => raw(
            "200 OK",
            &["Content-Encoding: gzip, gzip"],
            &deflated(false),
        ),
    });
    let jobs = [
        one_region_job("raw", &format!("{base}/rawdeflate")),
        one_region_job("upper", &format!("{base}/GZIP")),
        one_region_job("stacked", &format!("{base}/gzipgzip")),
    ];
    let d = api_deployment(&jobs.concat());
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("its Content-Encoding is \"gzip, gzip\", a stack of codings"),
        "{r:?}"
    );
    assert!(r.stderr.contains("not retried"), "{r:?}");
    let heads = heads.lock().unwrap();
    assert_eq!(heads.len(), 3, "one request each: {r:?}");
    for head in heads.iter() {
        let asked = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("accept-encoding:")
                    .map(str::to_string)
            })
            .unwrap_or_default();
        assert!(asked.contains("gzip"), "{head}");
        assert!(!asked.contains("deflate"), "{head}");
    }
    for name in ["raw", "upper"] {
        let files = d.outputs(name);
        assert_eq!(files.len(), 1, "{name}: {r:?}");
        let page = std::fs::read(d.path().join("out").join(name).join(&files[0])).unwrap();
        assert_eq!(page, PAGE, "{name}");
    }
}

/// JSON after a UTF-8 byte order mark is a page (RFC 8259 §8.1 lets a
/// parser ignore the mark), read at once and written without the mark.
#[test]
fn a_byte_order_mark_before_json_is_dropped() {
    let (base, heads) = serving(|_| raw("200 OK", &[], &[b"\xEF\xBB\xBF", PAGE].concat()));
    let d = api_deployment(&one_region_job("j", &format!("{base}/bom")));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(heads.lock().unwrap().len(), 1, "{r:?}");
    let files = d.outputs("j");
    let page = std::fs::read(d.path().join("out/j").join(&files[0])).unwrap();
    assert_eq!(page, PAGE);
}

/// A 304 to a request that sent no validator (no `conditional`) ends the
/// job charged once, named as what it is, not as a redirect without a
/// Location (probe's minor item).
#[test]
fn an_unsolicited_304_is_named_as_such() {
    let (base, heads) = serving(|_| raw("304 Not Modified", &[], b""));
    let d = api_deployment(&one_region_job("j", &format!("{base}/same")));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("HTTP 304 Not Modified to a request that sent no validator")
            && !r.stderr.contains("Location"),
        "{r:?}"
    );
    assert_eq!(heads.lock().unwrap().len(), 1, "{r:?}");
    assert!(d.outputs("j").is_empty());
}

/// A Location with raw UTF-8 is followed, its bytes past ASCII
/// percent-encoded as browsers do (as a Link header's are).
#[test]
fn a_location_with_raw_utf8_is_followed() {
    let (base, heads) = serving(|head| match path(head) {
        "/moved" => raw("302 Found", &["Location: /here?q=café"], b""),
        _ => raw("200 OK", &[], PAGE),
    });
    let d = api_deployment(&one_region_job("j", &format!("{base}/moved")));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let heads = heads.lock().unwrap();
    assert_eq!(heads.len(), 2, "{r:?}");
    assert!(
        heads[1].starts_with("GET /here?q=caf%C3%A9&key=demo-key "),
        "{}",
        heads[1]
    );
    assert_eq!(d.outputs("j").len(), 1);
}

/// A page whose next token holds a lone surrogate escape (`"ab\ud800"`)
/// is JSON: written at once (`retries: 1` would send it twice), its
/// region's walk ended with a warning naming the pointer and counted in
/// the summary, the other regions served; the next run walks afresh, the
/// token never sent (review 2, item 5).
#[test]
fn a_page_whose_token_cannot_be_read_is_written_and_ends_its_walk() {
    let (base, heads) = serving(|head| {
        let body: &[u8] = if head.contains("regionCode=GB") {
            br#"{"items":[1],"nextPageToken":"ab\ud800"}"#
        } else {
            PAGE
        };
        raw("200 OK", &[], body)
    });
    let d =
        api_deployment(&one_region_job("j", &format!("{base}/tok")).replace("[GB]", "[GB, US]"));
    for run in 1..=2 {
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(
            r.stderr.contains(
                "region GB step 0 page 0: the next page's token at /nextPageToken cannot be read"
            ),
            "{r:?}"
        );
        assert!(r.stderr.contains("; 2 calls"), "{r:?}");
        assert!(
            r.stderr
                .contains("(1 ended at a next link or token that cannot be read)"),
            "{r:?}"
        );
        let heads = heads.lock().unwrap();
        let asked: Vec<bool> = heads.iter().map(|h| h.contains("regionCode=GB")).collect();
        assert_eq!(asked, [true, false].repeat(run), "{r:?}");
        assert!(heads.iter().all(|h| !h.contains("pageToken")), "{heads:?}");
        assert_eq!(d.outputs("j").len(), 2 * run, "{r:?}");
    }
}
