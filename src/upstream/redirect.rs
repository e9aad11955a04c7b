//! A 3xx answer: a hop to follow on the request's own origin, or an end.

use reqwest::StatusCode;

use super::Answer;
use super::origin::same_origin;
use crate::config::{Secret, redact};

/// A 3xx: a redirect to follow when it stays on the request's origin;
/// anything else ends the job (not retried), naming the target with the
/// secret masked.
pub(super) fn redirect(
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
        .map(|v| super::origin::visible(v.as_bytes()));
    let Some(to) = location.as_deref().and_then(|l| from.join(l).ok()) else {
        return Answer::Fatal(format!(
            "HTTP {status} without a Location to follow{}",
            location
                .map(|l| format!(" (\"{}\")", crate::logging::cut(&redact(&l, secrets), 200)))
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
    let method = super::answers::redirect_method(status, method);
    Answer::Redirect {
        status: status.as_u16(),
        to,
        method,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> Secret {
        Secret::new("SEKRET".into())
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
}
