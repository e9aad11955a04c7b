//! Upstream calls: build one request from a step's templates, send it (no
//! client-side retries and no redirects followed by the client: every
//! request, a retry or a redirect hop, is charged by the runner first), and
//! classify the answer the way the runner acts on it.

use std::time::Duration;

use reqwest::{Client, StatusCode};

mod decode;

use super::page_scan::{Found, scan};
use super::quota_headers::QuotaHeaders;
use super::settle::{self, Actual};
use crate::config::{Fill, HttpSettings, Secret, Step, redact};

/// Reasons in a 403 body that mean the upstream's own quota is spent.
const QUOTA_REASONS: [&str; 3] = ["quotaExceeded", "dailyLimitExceeded", "rateLimitExceeded"];

/// How long an error excerpt of a response body may be.
const EXCERPT: usize = 300;

/// Same-origin redirects followed for one page, at most (each one charged).
pub const MAX_REDIRECTS: u32 = 3;

/// How much of an error answer's body is read: enough for its reasons and
/// an excerpt.
const ERROR_BODY: u64 = 64 * 1024;

/// What came back from one attempt.
#[derive(Debug)]
pub enum Answer {
    /// 2xx with a JSON body, what it holds at the step's pagination
    /// pointer (if any), and its `Link` header(s), joined.
    Page {
        body: Vec<u8>,
        found: Option<Found>,
        link: Option<String>,
    },
    /// The upstream says its own quota is spent (403 with a quota reason, or
    /// 429); `retry_after` when it said how long.
    QuotaExhausted {
        status: u16,
        reason: String,
        retry_after: Option<Duration>,
    },
    /// 5xx, a network error, a timeout or an unreadable body: worth another
    /// (charged) attempt.
    Transient(String),
    /// Any other 4xx: retrying will not help.
    Refused { status: u16, excerpt: String },
    /// A 2xx that can never be a page (no body, HTML or XML, an encoding
    /// that cannot be decoded): asking again gets the same, so it is not
    /// retried, and only its region (or batch) ends. Redacted.
    Unusable(String),
    /// A redirect to the same origin (scheme, host and port), with the
    /// method the next hop uses: the runner charges and follows it.
    Redirect {
        status: u16,
        to: reqwest::Url,
        method: reqwest::Method,
    },
    /// The request can never succeed as it is (a redirect to another
    /// origin, …): not retried. Redacted.
    Fatal(String),
}

/// The HTTP client every run uses.
pub fn client(http: &HttpSettings) -> crate::Result<Client> {
    Client::builder()
        .connect_timeout(http.connect_timeout)
        .timeout(http.timeout)
        .retry(reqwest::retry::never())
        // Redirects are the runner's to follow (same origin only, each hop
        // charged): a client that follows them would send the key, in the
        // query, a header or a Referer, wherever the upstream points.
        .redirect(reqwest::redirect::Policy::none())
        .referer(false)
        .user_agent(concat!("quota/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| crate::Error::Http {
            what: "cannot build the HTTP client",
            message: e.to_string(),
        })
}

/// The request of one attempt, built before it is charged: a header whose
/// value HTTP does not allow is an error that names the header (and never
/// shows the value, which may hold the secret).
pub fn request(
    client: &Client,
    step: &Step,
    fill: &Fill<'_>,
    method: &reqwest::Method,
    url: &reqwest::Url,
) -> Result<reqwest::Request, String> {
    let mut headers = reqwest::header::HeaderMap::new();
    for (k, v) in &step.headers {
        let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| format!("header {k}: not a valid header name; nothing was sent"))?;
        let value = reqwest::header::HeaderValue::from_str(&v.fill(fill)).map_err(|_| {
            format!(
                "header {k}: after substitution its value holds a control character, which HTTP does not allow; nothing was sent or charged"
            )
        })?;
        headers.append(name, value);
    }
    let mut builder = client.request(method.clone(), url.clone()).headers(headers);
    // The body goes with the step's own method: a redirect that turned a
    // POST into a GET (303) sends none.
    if let Some(body) = step.body.as_ref().filter(|_| *method == step.method) {
        if !step
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        {
            builder = builder.header(reqwest::header::CONTENT_TYPE, "application/json");
        }
        builder = builder.body(body.fill(fill));
    }
    builder.build().map_err(|e| {
        format!(
            "the request cannot be built ({}); nothing was sent or charged",
            describe(&e, &[fill.secret])
        )
    })
}

/// What a response said besides its answer.
#[derive(Debug, Default)]
pub struct Reported {
    /// The step's settled costs, in its order (empty: no response).
    pub actuals: Vec<Actual>,
    /// The response's headers (the upstream's own counts are read from
    /// them with the credential's `upstream_headers`).
    pub headers: Option<reqwest::header::HeaderMap>,
}

/// Send one request and classify the answer. Anything that could carry the
/// secret (error texts, bodies) is redacted before it leaves this function.
/// `reported` gets what any response, whatever its status, says besides:
/// the step's settled costs and its headers (nothing when no response came).
pub async fn send(
    client: &Client,
    request: reqwest::Request,
    step: &Step,
    fill: &Fill<'_>,
    max_body: u64,
    reported: &mut Reported,
) -> Answer {
    let secrets = [fill.secret];
    let (method, url) = (request.method().clone(), request.url().clone());
    let resp = match client.execute(request).await {
        Ok(r) => r,
        Err(e) => {
            let why = describe(&e, &secrets);
            return match cannot_succeed(&e) {
                Some(because) => Answer::Fatal(format!(
                    "{why} ({because}: not retried, since every attempt is charged and would fail the same way)"
                )),
                None => Answer::Transient(why),
            };
        }
    };
    let status = resp.status();
    reported.headers = Some(resp.headers().clone());
    reported.actuals = settle::actuals(&step.settle, resp.headers(), None);
    if status.is_redirection() {
        return redirect(status, resp.headers(), &method, &url, &secrets);
    }
    let quota = QuotaHeaders::read(resp.headers());
    // Several Link fields are one list (RFC 9110 §5.3); bytes past ASCII
    // (raw UTF-8 in a URL) percent-encoded, as browsers do.
    let links: Vec<String> = resp
        .headers()
        .get_all(reqwest::header::LINK)
        .iter()
        .map(|v| super::paginate::visible(v.as_bytes()))
        .collect();
    let link = (!links.is_empty()).then(|| links.join(", "));
    // A page is read up to `max_body`, never past it; an error answer up
    // to what its reasons and excerpt need.
    let limit = if status.is_success() {
        max_body
    } else {
        max_body.min(ERROR_BODY)
    };
    // (a compressed body is decoded as it streams in, and has no declared
    // size then: `max_body` bounds what it decodes to)
    let declared = resp.content_length();
    let mut encoding = undecoded(resp.headers());
    if status.is_success()
        && let Some(n) = declared.filter(|n| *n > max_body)
    {
        return Answer::Fatal(too_big(status, max_body, Some(n)));
    }
    let body = match read_body(resp, limit).await {
        Ok((body, false)) => body,
        Ok((_, true)) if status.is_success() => {
            return Answer::Fatal(too_big(status, max_body, None));
        }
        Ok((body, true)) => body,
        Err(e) if status.is_success() && corrupt(&e) => {
            return Answer::Unusable(format!(
                "HTTP {status} with a body that cannot be decoded ({}): not retried, since every attempt is charged and would get the same",
                describe(&e, &secrets)
            ));
        }
        Err(e) if status.is_success() => return Answer::Transient(describe(&e, &secrets)),
        // An error answer is handled by its status, whatever its body: a
        // 429 whose body does not decode still blocks, a 404 is still
        // refused (retried, each attempt charged, it blocked nothing).
        Err(_) => Vec::new(),
    };
    // A coding the client left alone that quota decodes itself (a name in
    // capitals, deflate raw or zlib-wrapped): bounded by `limit` decoded.
    let body = match encoding.as_deref().map(|c| decode::body(c, &body, limit)) {
        None | Some(decode::Decoded::Unknown) => body,
        Some(decode::Decoded::Body(decoded)) => {
            encoding = None;
            decoded
        }
        Some(decode::Decoded::TooBig) if status.is_success() => {
            return Answer::Fatal(too_big(status, max_body, None));
        }
        Some(decode::Decoded::Failed(why)) if status.is_success() => {
            return Answer::Unusable(format!(
                "HTTP {status} with a body that cannot be decoded ({why}): not retried, since every attempt is charged and would get the same"
            ));
        }
        Some(_) => {
            encoding = None;
            Vec::new()
        }
    };
    // A UTF-8 byte order mark before JSON is dropped (RFC 8259 §8.1 lets a
    // parser ignore it): every reader, and the page written, see the JSON.
    let body = match body.strip_prefix(BOM) {
        Some(rest) => rest.to_vec(),
        None => body,
    };
    let never = status
        .is_success()
        .then(|| never_json(status, encoding.as_deref(), &body, &secrets))
        .flatten();
    if let Some(headers) = reported
        .headers
        .as_ref()
        .filter(|_| !step.settle.is_empty())
    {
        reported.actuals = settle::actuals(&step.settle, headers, Some(&body));
    }
    let pointer = step.paginate.as_ref().and_then(|p| p.kind.pointer());
    let answer = classify(status, quota, body, pointer, &secrets);
    match answer {
        Answer::Page { body, found, .. } => Answer::Page { body, found, link },
        // The README's rule: never pay twice for a request that cannot
        // succeed; an answer that cannot become JSON by asking again is one.
        Answer::Transient(why) => match never {
            Some(because) => Answer::Unusable(format!(
                "{why} ({because}): not retried, since every attempt is charged and would get the same"
            )),
            None => Answer::Transient(why),
        },
        other => other,
    }
}

/// Whether a 4xx refuses the one request it answers rather than every
/// request (401, 403 and the rest): 400, 404, 410, 422. When the request
/// carries what the upstream gave (a page token, a next link, a batch of
/// its values: an expired token, a batch it rejects), only that region or
/// batch ends; one made from the file alone stops the job, as the file
/// (or the key) is what to fix and every region would meet the same.
pub fn refused_for_itself(status: u16) -> bool {
    matches!(status, 400 | 404 | 410 | 422)
}

/// The `Content-Encoding` of a response the client did not decode (one
/// it has no decoder for: it removes the header of those it decodes).
fn undecoded(headers: &reqwest::header::HeaderMap) -> Option<String> {
    let coding = headers.get(reqwest::header::CONTENT_ENCODING)?;
    let coding = String::from_utf8_lossy(coding.as_bytes())
        .trim()
        .to_string();
    (!coding.eq_ignore_ascii_case("identity")).then_some(coding)
}

/// Why a 2xx whose body is not JSON can never become JSON by asking
/// again: no body at all (204), a coding the client cannot decode, or
/// markup (an HTML or XML page). `None` when another try may do (a JSON
/// body cut short, say). The coding is the upstream's text: redacted and
/// made printable, as anything from it is.
fn never_json(
    status: StatusCode,
    encoding: Option<&str>,
    body: &[u8],
    secrets: &[&Secret],
) -> Option<String> {
    let text = body.strip_prefix(BOM).unwrap_or(body).trim_ascii_start();
    if let Some(coding) = encoding {
        let shown = super::report::cut(&redact(coding, secrets), 40);
        let why = if coding.contains(',') {
            "a stack of codings, which quota does not decode (one coding only)"
        } else {
            "which quota cannot decode"
        };
        return Some(format!("its Content-Encoding is \"{shown}\", {why}"));
    }
    if text.is_empty() {
        return Some(format!("HTTP {status} carries no body"));
    }
    text.starts_with(b"<")
        .then(|| "it is an HTML or XML page".to_string())
}

/// A UTF-8 byte order mark.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Whether a body read failed on data the decoder refuses (a corrupt
/// compressed body), not on the connection: the same bytes come again.
/// The decoder's own failure is an `io::Error` right under reqwest's
/// (a truncated stream, `UnexpectedEof`, may be the connection's); one
/// of the connection comes under hyper's error instead.
fn corrupt(e: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::Other
                    | std::io::ErrorKind::InvalidData
                    | std::io::ErrorKind::InvalidInput
            );
        }
        if !s.is::<reqwest::Error>() {
            return false;
        }
        source = s.source();
    }
    false
}

/// Read a body as it streams in, at most `limit` bytes; `true` when there
/// was more (the rest is not read: the connection is dropped). Memory is
/// the body itself: the buffer grows by doubling, never beyond `limit`.
async fn read_body(
    mut resp: reqwest::Response,
    limit: u64,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let declared = resp.content_length().map_or(0, |n| n as usize);
    let mut body = Vec::with_capacity(declared.min(limit));
    while let Some(chunk) = resp.chunk().await? {
        let room = limit - body.len();
        let take = chunk.len().min(room);
        if body.capacity() < body.len() + take {
            let want = (body.capacity() * 2).max(body.len() + take).min(limit);
            body.reserve_exact(want - body.len());
        }
        body.extend_from_slice(&chunk[..take]);
        if take < chunk.len() {
            return Ok((body, true));
        }
    }
    Ok((body, false))
}

fn too_big(status: StatusCode, max_body: u64, declared: Option<u64>) -> String {
    let size = match declared {
        Some(n) => format!("of {} ({n} bytes)", fmt_bytes(n)),
        None => "that goes on".into(),
    };
    format!(
        "HTTP {status} with a body {size} past http.max_body, {} ({max_body} bytes): not read further; raise http.max_body if pages really are this large",
        fmt_bytes(max_body)
    )
}

/// Bytes in the largest binary unit that keeps one decimal.
pub fn fmt_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[unit])
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A 3xx: a redirect to follow when it stays on the request's origin;
/// anything else ends the job (not retried), naming the target with the
/// secret masked.
fn redirect(
    status: StatusCode,
    headers: &reqwest::header::HeaderMap,
    method: &reqwest::Method,
    from: &reqwest::Url,
    secrets: &[&Secret],
) -> Answer {
    // Bytes past ASCII (raw UTF-8 in a URL) percent-encoded, as browsers
    // do and as for a Link header.
    let location = headers
        .get(reqwest::header::LOCATION)
        .map(|v| super::paginate::visible(v.as_bytes()));
    let Some(to) = location.as_deref().and_then(|l| from.join(l).ok()) else {
        return Answer::Fatal(format!(
            "HTTP {status} without a Location to follow{}",
            location
                .map(|l| format!(" (\"{}\")", super::report::cut(&redact(&l, secrets), 200)))
                .unwrap_or_default()
        ));
    };
    if !same_origin(from, &to) {
        return Answer::Fatal(format!(
            "HTTP {status} redirects to another origin, {}: not followed (only redirects within {} are: one elsewhere could carry the key away)",
            redact(to.as_str(), secrets),
            from.origin().ascii_serialization()
        ));
    }
    // What clients do: 303 (and 301/302 after a POST) switch to GET; 307 and
    // 308 keep the method.
    let method = match status {
        StatusCode::SEE_OTHER => reqwest::Method::GET,
        StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND if *method == reqwest::Method::POST => {
            reqwest::Method::GET
        }
        _ => method.clone(),
    };
    Answer::Redirect {
        status: status.as_u16(),
        to,
        method,
    }
}

/// Whether `to` has the scheme, host and port of `from` (an https → http
/// redirect never has: the schemes differ).
pub fn same_origin(from: &reqwest::Url, to: &reqwest::Url) -> bool {
    from.scheme() == to.scheme()
        && from.host() == to.host()
        && from.port_or_known_default() == to.port_or_known_default()
}

fn classify(
    status: StatusCode,
    quota: QuotaHeaders,
    body: Vec<u8>,
    pointer: Option<&str>,
    secrets: &[&Secret],
) -> Answer {
    if status.is_success() {
        return match scan(&body, pointer) {
            Ok(found) => Answer::Page {
                body,
                found,
                link: None,
            },
            Err(e) => Answer::Transient(format!("HTTP {status} with a body that is not JSON: {e}")),
        };
    }
    let json: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
    let reasons: Vec<String> = json
        .as_ref()
        .and_then(|j| j.pointer("/error/errors"))
        .and_then(|e| e.as_array())
        .map(|errors| {
            errors
                .iter()
                .filter_map(|e| e.get("reason").and_then(|r| r.as_str()).map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let quota_reason = reasons.iter().find(|r| QUOTA_REASONS.contains(&r.as_str()));
    // GitHub answers a spent quota with 403 and X-RateLimit-Remaining: 0.
    let refused = status == StatusCode::FORBIDDEN || status == StatusCode::TOO_MANY_REQUESTS;
    if status == StatusCode::TOO_MANY_REQUESTS
        || (status == StatusCode::FORBIDDEN && quota_reason.is_some())
        || (refused && quota.spent)
    {
        let reason = match quota_reason {
            Some(r) => r.clone(),
            None if quota.spent => "rate limit exceeded: no units remaining".into(),
            None => "too many requests".into(),
        };
        return Answer::QuotaExhausted {
            status: status.as_u16(),
            reason,
            retry_after: quota.wait,
        };
    }
    if status.is_server_error() {
        return Answer::Transient(format!("HTTP {status}"));
    }
    let text = String::from_utf8_lossy(&body);
    let excerpt = super::report::cut(&redact(&text, secrets), EXCERPT);
    Answer::Refused {
        status: status.as_u16(),
        excerpt: excerpt.split_whitespace().collect::<Vec<_>>().join(" "),
    }
}

/// A reqwest error, without its URL (which holds the key) and redacted anyway.
fn describe(e: &reqwest::Error, secrets: &[&Secret]) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    let mut text = kind.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    redact(&text, secrets)
}

/// Why a failed request can never succeed as it is, if it cannot: an
/// invalid request, a certificate that does not verify, a host name that
/// does not exist. Anything else (refused, reset, timed out, a DNS server
/// that did not answer) may pass, and is retried.
fn cannot_succeed(e: &reqwest::Error) -> Option<&'static str> {
    if e.is_builder() {
        return Some("the request is invalid");
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        // rustls reports through io::Errors wrapped in io::Errors, whose
        // source() skips the error each wraps: look inside them.
        let mut inner: Option<&(dyn std::error::Error + 'static)> = Some(s);
        while let Some(candidate) = inner {
            if let Some(tls) = candidate.downcast_ref::<rustls::Error>()
                && matches!(
                    tls,
                    rustls::Error::InvalidCertificate(_)
                        | rustls::Error::NoCertificatesPresented
                        | rustls::Error::UnsupportedNameType
                )
            {
                return Some("the upstream's TLS certificate does not verify");
            }
            inner = candidate
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|i| i as &(dyn std::error::Error + 'static));
        }
        // getaddrinfo's EAI_NONAME / EAI_NODATA, which std reports only as
        // text (glibc, musl, BSD wordings); "Temporary failure in name
        // resolution" (EAI_AGAIN) is not among them.
        let text = s.to_string();
        if [
            "Name or service not known",
            "No address associated with hostname",
            "Name does not resolve",
            "nodename nor servname provided, or not known",
        ]
        .iter()
        .any(|t| text.contains(t))
        {
            return Some("the host name does not exist");
        }
        source = s.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> Secret {
        Secret::new("SEKRET".into())
    }

    #[test]
    fn youtube_quota_errors_and_429_mean_the_upstream_quota_is_spent() {
        let body = br#"{"error":{"code":403,"errors":[{"domain":"youtube.quota","reason":"quotaExceeded"}]}}"#;
        let a = classify(
            StatusCode::FORBIDDEN,
            QuotaHeaders::default(),
            body.to_vec(),
            None,
            &[&secret()],
        );
        assert!(
            matches!(a, Answer::QuotaExhausted { ref reason, .. } if reason == "quotaExceeded"),
            "{a:?}"
        );
        let a = classify(
            StatusCode::TOO_MANY_REQUESTS,
            QuotaHeaders {
                wait: Some(Duration::from_secs(7)),
                spent: false,
            },
            b"slow down".to_vec(),
            None,
            &[&secret()],
        );
        assert!(
            matches!(a, Answer::QuotaExhausted { retry_after: Some(d), .. } if d.as_secs() == 7),
            "{a:?}"
        );
    }

    #[test]
    fn a_403_whose_headers_say_nothing_remains_means_the_quota_is_spent() {
        let body = br#"{"message":"API rate limit exceeded for installation ID 1."}"#;
        let spent = QuotaHeaders {
            wait: Some(Duration::from_secs(300)),
            spent: true,
        };
        let a = classify(
            StatusCode::FORBIDDEN,
            spent,
            body.to_vec(),
            None,
            &[&secret()],
        );
        assert!(
            matches!(a, Answer::QuotaExhausted { retry_after: Some(d), .. } if d.as_secs() == 300),
            "{a:?}"
        );
        // The same 403 with units left is a refusal.
        let a = classify(
            StatusCode::FORBIDDEN,
            QuotaHeaders::default(),
            body.to_vec(),
            None,
            &[&secret()],
        );
        assert!(matches!(a, Answer::Refused { status: 403, .. }), "{a:?}");
    }

    #[test]
    fn other_403s_are_refusals_with_a_redacted_excerpt() {
        let body = br#"{"error":{"code":403,"message":"key SEKRET lacks access","errors":[{"reason":"forbidden"}]}}"#;
        match classify(
            StatusCode::FORBIDDEN,
            QuotaHeaders::default(),
            body.to_vec(),
            None,
            &[&secret()],
        ) {
            Answer::Refused { status, excerpt } => {
                assert_eq!(status, 403);
                assert!(excerpt.contains("key *** lacks access"), "{excerpt}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn server_errors_and_bad_bodies_are_transient() {
        assert!(matches!(
            classify(
                StatusCode::BAD_GATEWAY,
                QuotaHeaders::default(),
                vec![],
                None,
                &[]
            ),
            Answer::Transient(_)
        ));
        assert!(matches!(
            classify(
                StatusCode::OK,
                QuotaHeaders::default(),
                b"<html>".to_vec(),
                None,
                &[]
            ),
            Answer::Transient(_)
        ));
    }

    #[test]
    fn answers_that_asking_again_cannot_make_json_are_named() {
        let never = |status: u16, coding: Option<&str>, body: &[u8]| {
            never_json(StatusCode::from_u16(status).unwrap(), coding, body, &[])
        };
        assert_eq!(
            never(204, None, b"").as_deref(),
            Some("HTTP 204 No Content carries no body")
        );
        for markup in [
            &b" <!DOCTYPE html><html>"[..],
            b"\xEF\xBB\xBF<?xml version=\"1.0\"?>",
        ] {
            assert_eq!(
                never(200, None, markup).as_deref(),
                Some("it is an HTML or XML page")
            );
        }
        assert!(
            never(200, Some("compress"), b"\x1f\x9d")
                .is_some_and(|w| w.contains("\"compress\", which quota cannot decode"))
        );
        // A JSON body cut short may come whole next time.
        assert_eq!(never(200, None, br#"{"items": ["#), None);
    }

    #[test]
    fn redirects_are_followed_only_on_the_same_origin() {
        let u = |s: &str| reqwest::Url::parse(s).unwrap();
        let from = u("https://api.example.com/v3/videos?key=SEKRET");
        assert!(same_origin(&from, &u("https://api.example.com:443/other")));
        for other in [
            "http://api.example.com/v3/videos",       // https → http
            "https://api.example.com:8443/v3/videos", // another port
            "https://cdn.example.com/v3/videos",      // another host
        ] {
            assert!(!same_origin(&from, &u(other)), "{other}");
        }
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            "location",
            "http://api.example.com/x?key=SEKRET".parse().unwrap(),
        );
        match redirect(
            StatusCode::FOUND,
            &headers,
            &reqwest::Method::GET,
            &from,
            &[&secret()],
        ) {
            Answer::Fatal(why) => {
                assert!(
                    why.contains("another origin, http://api.example.com/x?key=***"),
                    "{why}"
                );
                assert!(!why.contains("SEKRET"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        headers.insert("location", "/v3/other".parse().unwrap());
        match redirect(
            StatusCode::FOUND,
            &headers,
            &reqwest::Method::POST,
            &from,
            &[],
        ) {
            Answer::Redirect { to, method, .. } => {
                assert_eq!(to.as_str(), "https://api.example.com/v3/other");
                assert_eq!(method, reqwest::Method::GET);
            }
            other => panic!("{other:?}"),
        }
        match redirect(
            StatusCode::TEMPORARY_REDIRECT,
            &headers,
            &reqwest::Method::POST,
            &from,
            &[],
        ) {
            Answer::Redirect { method, .. } => assert_eq!(method, reqwest::Method::POST),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_request_that_can_never_be_sent_is_refused_before_its_charge() {
        let yaml = r#"
credentials:
  main: { secret: { env: UNUSED }, pools: { units: [ { limit: 10, per: 1h } ] } }
endpoints:
  e: { cost: 1 }
jobs:
  j:
    credential: main
    steps:
      - endpoint: e
        request: { url: "http://127.0.0.1:9/x", headers: { Accept: application/json } }
    output: out
"#;
        let mut config = crate::config::Config::parse(
            std::path::Path::new("q.yaml"),
            yaml,
            crate::config::Secrets::Skip,
        )
        .unwrap();
        let step = &mut config.jobs[0].steps[0];
        let client = client(&config.http).unwrap();
        let secret = secret();
        let fill = Fill {
            region: "",
            secret: &secret,
            job: "j",
            step: 0,
            page: 0,
            batch: "",
        };
        let url = super::super::paginate::page_url(step, &fill, None).unwrap();
        let built = request(&client, step, &fill, &step.method, &url).unwrap();
        assert_eq!(built.headers()["accept"], "application/json");
        // What validation refuses at load, the runner refuses too, naming the header.
        step.headers.push((
            "X-Trace".into(),
            crate::config::Template::parse("a\u{7}{secret}").unwrap(),
        ));
        let why = request(&client, step, &fill, &step.method, &url).unwrap_err();
        assert!(
            why.starts_with("header X-Trace: after substitution"),
            "{why}"
        );
        assert!(!why.contains("SEKRET"), "{why}");
    }

    #[test]
    fn sizes_are_shown_in_binary_units() {
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(32 << 20), "32 MiB");
        assert_eq!(fmt_bytes(1_500_000), "1.4 MiB");
    }
}
