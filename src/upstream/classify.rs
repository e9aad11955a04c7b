//! What an answer with a body is to the runner: a page, the upstream's
//! own quota spent, worth another (charged) attempt, or refused.

use reqwest::StatusCode;

use super::Answer;
use super::answers::{self, Refusal};
use super::body::BOM;
use crate::config::{Secret, redact};
use crate::page_scan::scan;
use crate::upstream::quota_headers::QuotaHeaders;

/// How long an error excerpt of a response body may be.
const EXCERPT: usize = 300;

/// Why a 2xx whose body is not JSON can never become JSON by asking
/// again: no body at all (204), a coding the client cannot decode, or
/// markup (an HTML or XML page). `None` when another try may do (a JSON
/// body cut short, say). The coding is the upstream's text: redacted and
/// made printable, as anything from it is.
pub(super) fn never_json(
    status: StatusCode,
    encoding: Option<&str>,
    body: &[u8],
    secrets: &[&Secret],
) -> Option<String> {
    let text = body.strip_prefix(BOM).unwrap_or(body).trim_ascii_start();
    if let Some(coding) = encoding {
        let shown = crate::logging::cut(&redact(coding, secrets), 40);
        let why = if coding.contains(',') {
            "a stack of codings, which portion does not decode (one coding only)"
        } else {
            "which portion cannot decode"
        };
        return Some(format!("its Content-Encoding is \"{shown}\", {why}"));
    }
    if text.is_empty() {
        return Some(format!("HTTP {status} carries no body"));
    }
    text.starts_with(b"<")
        .then(|| "it is an HTML or XML page".to_string())
}

pub(super) fn classify(
    status: StatusCode,
    quota: QuotaHeaders,
    body: Vec<u8>,
    pointer: Option<&str>,
    secrets: &[&Secret],
) -> Answer {
    if answers::is_page(status) {
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
    // Google's reasons, in both of its shapes: `error.errors[].reason`
    // and `error.details[].reason`.
    let reasons: Vec<String> = ["/error/errors", "/error/details"]
        .iter()
        .filter_map(|at| json.as_ref()?.pointer(at)?.as_array())
        .flatten()
        .filter_map(|e| e.get("reason").and_then(|r| r.as_str()).map(String::from))
        .collect();
    let credential = match answers::refusal(status, &reasons, quota.spent) {
        Refusal::Quota(reason) => {
            return Answer::QuotaExhausted {
                status: status.as_u16(),
                reason,
                retry_after: quota.wait,
            };
        }
        Refusal::Transient => return Answer::Transient(format!("HTTP {status}")),
        Refusal::Credential => true,
        Refusal::Request => false,
    };
    let text = String::from_utf8_lossy(&body);
    let excerpt = crate::logging::cut(&redact(&text, secrets), EXCERPT);
    Answer::Refused {
        status: status.as_u16(),
        excerpt: excerpt.split_whitespace().collect::<Vec<_>>().join(" "),
        credential,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
                ..QuotaHeaders::default()
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
            said: Some("X-RateLimit-Remaining: 0"),
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
            Answer::Refused {
                status, excerpt, ..
            } => {
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
                .is_some_and(|w| w.contains("\"compress\", which portion cannot decode"))
        );
        // A JSON body cut short may come whole next time.
        assert_eq!(never(200, None, br#"{"items": ["#), None);
    }
}
