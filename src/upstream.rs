//! The wire: how one request is made and its answer read, apart from the
//! run that decides which request comes next. The run imports it; it
//! imports nothing of the run.
//!
//! Here (this file): build one request from a step's templates, send it
//! (no client-side retries and no redirects followed by the client: every
//! request, a retry or a redirect hop, is charged by the runner first),
//! and classify the answer the way the runner acts on it ([`Attempts`]
//! says what comes after it). Its rooms: [`answers`] (the one table of
//! what each answer does), [`attempts`] (retries and hops of one
//! request), `classify`, `body`, `decode` and `redirect` (reading an
//! answer), `origin` (what pagination and redirects share),
//! [`paginate`] (every kind of pagination: page URLs and what comes
//! next), [`query`] (a query parameter set, never sent twice),
//! [`quota_headers`] (what an answer says of the upstream's own quota)
//! and [`settle`] (what an answer says a call cost).

use std::time::Duration;

use reqwest::Client;
use reqwest::header::{IF_MODIFIED_SINCE, IF_NONE_MATCH};

pub mod answers;
pub mod attempts;
mod body;
mod classify;
mod decode;
mod origin;
pub mod paginate;
pub mod query;
pub mod quota_headers;
mod redirect;
pub mod settle;

pub use answers::{Does, TABLE as ANSWERS, bare_rate_limit};
pub use attempts::{AfterAttempt, Attempts, MAX_REDIRECTS};
pub use origin::same_origin;

use self::quota_headers::QuotaHeaders;
use self::settle::{self as settled, Actual};
use crate::config::{Fill, HttpSettings, Secret, Step, redact};
use crate::page_scan::Found;

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
    /// Any other refusal: retrying will not help. `credential`: it is
    /// about the credential (401, 407, a 403 with a reason about the key),
    /// so every request would meet it.
    Refused {
        status: u16,
        excerpt: String,
        credential: bool,
    },
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
    /// 304 to a conditional request: the page is as it was.
    NotModified,
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
        .user_agent(concat!("portion/", env!("CARGO_PKG_VERSION")))
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
    /// The response's status (none: no response).
    pub status: Option<u16>,
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
    let conditional = [IF_NONE_MATCH, IF_MODIFIED_SINCE]
        .iter()
        .any(|h| request.headers().contains_key(h));
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
    reported.status = Some(status.as_u16());
    reported.actuals = settled::actuals(&step.settle, resp.headers(), None);
    // (only a request that asked for it: a 304 to any other is what it
    // always was, a redirect without a Location)
    match answers::status(status) {
        answers::Status::NotModified if conditional => return Answer::NotModified,
        // (not a redirect problem, as "without a Location" read: the
        // upstream says "unchanged" to a request that named no copy, a
        // broken cache in front of it, say; asking again gets the same,
        // so only its region or input ends, as a 2xx that can never be a
        // page does)
        answers::Status::NotModified => {
            return Answer::Unusable(
                "HTTP 304 Not Modified to a request that sent no validator (no If-None-Match or If-Modified-Since): there is no page to keep"
                    .into(),
            );
        }
        answers::Status::Redirect => {
            return redirect::redirect(status, resp.headers(), &method, &url, &secrets);
        }
        answers::Status::Page | answers::Status::Refusal => {}
    }
    let quota = QuotaHeaders::read(resp.headers());
    let link = link(resp.headers());
    let (body, encoding) = match body::read(resp, status, max_body, &secrets).await {
        Ok(read) => read,
        Err(answer) => return answer,
    };
    let never = answers::is_page(status)
        .then(|| classify::never_json(status, encoding.as_deref(), &body, &secrets))
        .flatten();
    if let Some(headers) = reported
        .headers
        .as_ref()
        .filter(|_| !step.settle.is_empty())
    {
        reported.actuals = settled::actuals(&step.settle, headers, Some(&body));
    }
    let pointer = step.paginate.as_ref().and_then(|p| p.kind.pointer());
    let answer = classify::classify(status, quota, body, pointer, &secrets);
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

/// An answer's `Link` header(s), joined: several Link fields are one list
/// (RFC 9110 §5.3); bytes past ASCII (raw UTF-8 in a URL) percent-encoded,
/// as browsers do.
fn link(headers: &reqwest::header::HeaderMap) -> Option<String> {
    let links: Vec<String> = headers
        .get_all(reqwest::header::LINK)
        .iter()
        .map(|v| origin::visible(v.as_bytes()))
        .collect();
    (!links.is_empty()).then(|| links.join(", "))
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
            input: None,
        };
        let url = super::paginate::page_url(step, &fill, None).unwrap();
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
}
