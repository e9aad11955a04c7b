//! Upstream calls: build one request from a step's templates, send it (no
//! client-side retries and no redirects followed by the client: every
//! request, a retry or a redirect hop, is charged by the runner first), and
//! classify the answer the way the runner acts on it.

use std::time::Duration;

use reqwest::{Client, StatusCode};

use crate::config::{Fill, HttpSettings, Secret, Step, redact};

/// Reasons in a 403 body that mean the upstream's own quota is spent.
const QUOTA_REASONS: [&str; 3] = ["quotaExceeded", "dailyLimitExceeded", "rateLimitExceeded"];

/// How long an error excerpt of a response body may be.
const EXCERPT: usize = 300;

/// Same-origin redirects followed for one page, at most (each one charged).
pub const MAX_REDIRECTS: u32 = 3;

/// What came back from one attempt.
#[derive(Debug)]
pub enum Answer {
    /// 2xx with a JSON body.
    Page {
        body: Vec<u8>,
        json: serde_json::Value,
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

/// The request URL of one page, and the same URL fit for a log line.
pub fn url(step: &Step, fill: &Fill<'_>, token: Option<&str>) -> crate::Result<reqwest::Url> {
    let mut url = reqwest::Url::parse(&step.url.fill(fill)).map_err(|e| crate::Error::Http {
        what: "bad request URL",
        message: e.to_string(),
    })?;
    {
        let mut q = url.query_pairs_mut();
        for (k, v) in &step.query {
            q.append_pair(k, &v.fill(fill));
        }
        if let (Some(p), Some(token)) = (&step.paginate, token) {
            q.append_pair(&p.param, token);
        }
    }
    if url.query() == Some("") {
        url.set_query(None);
    }
    Ok(url)
}

/// Send one request and classify the answer. Anything that could carry the
/// secret (error texts, bodies) is redacted before it leaves this function.
pub async fn send(
    client: &Client,
    step: &Step,
    fill: &Fill<'_>,
    method: &reqwest::Method,
    url: &reqwest::Url,
) -> Answer {
    let secrets = [fill.secret];
    let mut req = client.request(method.clone(), url.clone());
    for (k, v) in &step.headers {
        req = req.header(k, v.fill(fill));
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => return Answer::Transient(describe(&e, &secrets)),
    };
    let status = resp.status();
    if status.is_redirection() {
        return redirect(status, resp.headers(), method, url, &secrets);
    }
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after);
    let body = match resp.bytes().await {
        Ok(b) => b.to_vec(),
        Err(e) => return Answer::Transient(describe(&e, &secrets)),
    };
    classify(status, retry_after, body, &secrets)
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
    let location = headers
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok());
    let Some(to) = location.and_then(|l| from.join(l).ok()) else {
        return Answer::Fatal(format!(
            "HTTP {status} without a Location to follow{}",
            location
                .map(|l| format!(" ({:?})", redact(l, secrets)))
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
    retry_after: Option<Duration>,
    body: Vec<u8>,
    secrets: &[&Secret],
) -> Answer {
    if status.is_success() {
        return match serde_json::from_slice(&body) {
            Ok(json) => Answer::Page { body, json },
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
    if status == StatusCode::TOO_MANY_REQUESTS
        || (status == StatusCode::FORBIDDEN && quota_reason.is_some())
    {
        return Answer::QuotaExhausted {
            status: status.as_u16(),
            reason: quota_reason
                .cloned()
                .unwrap_or_else(|| "too many requests".into()),
            retry_after,
        };
    }
    if status.is_server_error() {
        return Answer::Transient(format!("HTTP {status}"));
    }
    let text = String::from_utf8_lossy(&body);
    let mut excerpt: String = redact(&text, secrets).chars().take(EXCERPT).collect();
    if text.chars().count() > EXCERPT {
        excerpt.push('…');
    }
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

/// `Retry-After` as seconds (the HTTP-date form is rare on APIs: ignored).
fn parse_retry_after(v: &str) -> Option<Duration> {
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// A value at a JSON pointer, as a page token: a non-empty string.
pub fn next_token(json: &serde_json::Value, pointer: &str) -> Option<String> {
    json.pointer(pointer)
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .map(String::from)
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
        let a = classify(StatusCode::FORBIDDEN, None, body.to_vec(), &[&secret()]);
        assert!(
            matches!(a, Answer::QuotaExhausted { ref reason, .. } if reason == "quotaExceeded"),
            "{a:?}"
        );
        let a = classify(
            StatusCode::TOO_MANY_REQUESTS,
            Some(Duration::from_secs(7)),
            b"slow down".to_vec(),
            &[&secret()],
        );
        assert!(
            matches!(a, Answer::QuotaExhausted { retry_after: Some(d), .. } if d.as_secs() == 7),
            "{a:?}"
        );
    }

    #[test]
    fn other_403s_are_refusals_with_a_redacted_excerpt() {
        let body = br#"{"error":{"code":403,"message":"key SEKRET lacks access","errors":[{"reason":"forbidden"}]}}"#;
        match classify(StatusCode::FORBIDDEN, None, body.to_vec(), &[&secret()]) {
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
            classify(StatusCode::BAD_GATEWAY, None, vec![], &[]),
            Answer::Transient(_)
        ));
        assert!(matches!(
            classify(StatusCode::OK, None, b"<html>".to_vec(), &[]),
            Answer::Transient(_)
        ));
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
    fn page_tokens_follow_the_pointer() {
        let j: serde_json::Value = serde_json::json!({"nextPageToken": "CAUQ1", "x": ""});
        assert_eq!(next_token(&j, "/nextPageToken").as_deref(), Some("CAUQ1"));
        assert_eq!(next_token(&j, "/x"), None);
        assert_eq!(next_token(&j, "/missing"), None);
    }
}
