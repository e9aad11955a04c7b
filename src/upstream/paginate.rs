//! Pagination, every common kind: where a page's request goes (the step's
//! URL and what its pagination adds) and what a fetched page says of the
//! next one. The runner stores that "next" as the cursor's token, so each
//! kind resumes exactly after a kill: a body token as it is, a next link or
//! URL as an absolute URL with the secret's query parameters taken out
//! (they are put back when it is followed), a page number or offset as its
//! number.
//!
//! A next link or URL that leaves the request's origin (scheme, host or
//! port) is never followed: the step's headers and the secret's query
//! parameters would go with it.

use reqwest::Url;

use self::link::link_next;
use super::origin::same_origin;
pub use super::origin::visible;
use super::query::set_query;
use crate::config::{Fill, PageKind, Placeholder, Step, redact};
use crate::page_scan::Found;

mod link;

/// What a fetched page says of the next one.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Fetch the next page with this token (see the module's text).
    Follow(String),
    /// The walk is over; with a note when it ended for an odd reason.
    End(Option<String>),
    /// The next page is elsewhere and is not followed, or this page's
    /// request was refused for itself: why, redacted. The region ends with
    /// an error.
    Refused(String),
    /// The page's `Link` header, or the token or URL at the pagination's
    /// pointer, cannot be read: why, redacted. The walk ends here (the
    /// page is written), with a warning the run counts.
    Unreadable(String),
}

/// The request URL of one page: the step's URL and query, and the
/// pagination's part for `token` (the cursor's token of this page; `None`
/// on a walk's first page).
pub fn page_url(step: &Step, fill: &Fill<'_>, token: Option<&str>) -> crate::Result<Url> {
    let kind = step.paginate.as_ref().map(|p| &p.kind);
    if let (Some(PageKind::Link | PageKind::NextUrl { .. }), Some(next)) = (kind, token) {
        let mut url = Url::parse(next).map_err(|e| bad_url(&e))?;
        put_back_secret(step, fill, &mut url);
        return Ok(url);
    }
    let mut url = step_url(step, fill)?;
    let mut pairs: Vec<(&str, String)> = step
        .query
        .iter()
        .map(|(k, v)| (k.as_str(), v.fill(fill)))
        .collect();
    match (kind, token) {
        (Some(PageKind::Token { param, .. }), Some(t)) => pairs.push((param, t.into())),
        (Some(PageKind::Page { param, start, .. }), t) => {
            pairs.push((param, t.map_or_else(|| start.to_string(), str::to_string)));
        }
        (Some(PageKind::Offset { param, .. }), t) => {
            pairs.push((param, t.unwrap_or("0").into()));
        }
        _ => {}
    }
    // Set, not appended: a parameter the URL or `query` already names is
    // sent once, with the later value (servers that read the first copy
    // saw page 1 on every page).
    set_query(&mut url, &pairs);
    Ok(url)
}

/// The step's URL, each placeholder's value encoded for its part of it.
fn step_url(step: &Step, fill: &Fill<'_>) -> crate::Result<Url> {
    let filled = step.url.fill_url(fill).map_err(|m| bad_url(&m))?;
    Url::parse(&filled).map_err(|e| bad_url(&e))
}

/// Whether a cursor's token can be this step's: a number for page and
/// offset numbers, a URL on the step's own origin for a next link or URL. A
/// file edited between runs (another kind, another host) could leave one
/// that does not fit, which must restart the step, not fail every run nor
/// send the key to the old host.
pub fn token_fits(step: &Step, fill: &Fill<'_>, token: &str) -> bool {
    match step.paginate.as_ref().map(|p| &p.kind) {
        None => false,
        Some(PageKind::Token { .. }) => true,
        Some(PageKind::Page { .. } | PageKind::Offset { .. }) => token.parse::<u64>().is_ok(),
        Some(PageKind::Link | PageKind::NextUrl { .. }) => {
            match (step_url(step, fill), Url::parse(token)) {
                (Ok(base), Ok(next)) => same_origin(&base, &next),
                _ => false,
            }
        }
    }
}

fn bad_url(e: &dyn std::fmt::Display) -> crate::Error {
    crate::Error::Http {
        what: "bad request URL",
        message: e.to_string(),
    }
}

/// The query parameters of `step` whose value carries `{secret}`.
fn secret_params(step: &Step) -> impl Iterator<Item = &(String, crate::config::Template)> {
    step.query
        .iter()
        .filter(|(_, v)| v.uses(Placeholder::Secret))
}

/// A next link or a same-origin redirect's target followed as given, with
/// every query parameter of the step that carries the secret set
/// (replacing what the link had, if anything).
pub fn put_back_secret(step: &Step, fill: &Fill<'_>, url: &mut Url) {
    if secret_params(step).next().is_none() {
        return;
    }
    let names: Vec<&str> = secret_params(step).map(|(k, _)| k.as_str()).collect();
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(k, _)| !names.contains(&k.as_ref()))
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let mut q = url.query_pairs_mut();
    q.clear().extend_pairs(kept);
    for (k, v) in secret_params(step) {
        q.append_pair(k, &v.fill(fill));
    }
}

/// A next URL as the cursor keeps it: without the step's secret-carrying
/// query parameters, which [`put_back_secret`] adds when it is followed.
fn without_secret(step: &Step, mut url: Url) -> String {
    let names: Vec<&str> = secret_params(step).map(|(k, _)| k.as_str()).collect();
    if !names.is_empty() && url.query_pairs().any(|(k, _)| names.contains(&k.as_ref())) {
        let kept: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(k, _)| !names.contains(&k.as_ref()))
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        url.query_pairs_mut().clear().extend_pairs(kept);
        if url.query() == Some("") {
            url.set_query(None);
        }
    }
    url.into()
}

/// What a page fetched from `request` with `token` says of the next one:
/// `found` is what its body holds at the kind's pointer, `link` its `Link`
/// header(s), joined.
pub fn next(
    step: &Step,
    fill: &Fill<'_>,
    request: &Url,
    token: Option<&str>,
    found: Option<Found>,
    link: Option<&str>,
) -> Next {
    let Some(p) = &step.paginate else {
        return Next::End(None);
    };
    if let (
        Some(Found::Unreadable),
        PageKind::Token { pointer, .. } | PageKind::NextUrl { pointer },
    ) = (&found, &p.kind)
    {
        // (the page is JSON, and the same again if asked again: no retry)
        return Next::Unreadable(format!(
            "the next page's {} at {pointer} cannot be read as text (a lone surrogate escape, \
             a number out of range); the walk ends here",
            if matches!(p.kind, PageKind::Token { .. }) {
                "token"
            } else {
                "URL"
            }
        ));
    }
    match &p.kind {
        PageKind::Token { .. } => found
            .and_then(Found::token)
            .map_or(Next::End(None), Next::Follow),
        PageKind::Link => match link.map(link_next) {
            Some(Ok(Some(target))) => follow(step, fill, request, &target, "Link header's next"),
            None | Some(Ok(None)) => Next::End(None),
            Some(Err(why)) => Next::Unreadable(format!(
                "the Link header cannot be read ({why}): \"{}\"; the walk ends here",
                crate::logging::cut(&redact(link.unwrap_or_default(), &[fill.secret]), 200)
            )),
        },
        PageKind::NextUrl { pointer } => match found.and_then(Found::text) {
            Some(target) => follow(
                step,
                fill,
                request,
                &target,
                &format!("next URL at {pointer}"),
            ),
            None => Next::End(None),
        },
        PageKind::Page {
            start, until_empty, ..
        } => counted(found, until_empty, token, *start, 1),
        PageKind::Offset {
            size, until_empty, ..
        } => counted(found, until_empty, token, 0, *size),
    }
}

/// A next link or URL, resolved against the page's URL, followed only on
/// the same origin.
fn follow(step: &Step, fill: &Fill<'_>, request: &Url, target: &str, what: &str) -> Next {
    let shown = |s: &str| redact(s, &[fill.secret]);
    let Ok(to) = request.join(target) else {
        return Next::End(Some(format!(
            "the {what} ({:?}) is not a URL: the walk ends here",
            shown(target)
        )));
    };
    if !matches!(to.scheme(), "http" | "https") || !same_origin(request, &to) {
        return Next::Refused(format!(
            "the {what} points to another origin, {}: not followed (only pages within {} are: the key would leave with the request)",
            shown(to.as_str()),
            request.origin().ascii_serialization()
        ));
    }
    Next::Follow(without_secret(step, to))
}

/// Page and offset numbers: the next one while the page's array at
/// `until_empty` has items.
fn counted(
    found: Option<Found>,
    until_empty: &str,
    token: Option<&str>,
    first: u64,
    by: u64,
) -> Next {
    let current = token.and_then(|t| t.parse::<u64>().ok()).unwrap_or(first);
    match found {
        Some(Found::Items(0)) => Next::End(None),
        Some(Found::Items(_)) => Next::Follow(current.saturating_add(by).to_string()),
        _ => Next::End(Some(format!(
            "the page has no array at {until_empty}: the walk ends here"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_and_offset_numbers_stop_on_an_empty_array() {
        let next = |found, token| counted(found, "/items", token, 1, 1);
        assert_eq!(next(Some(Found::Items(3)), None), Next::Follow("2".into()));
        assert_eq!(
            next(Some(Found::Items(3)), Some("7")),
            Next::Follow("8".into())
        );
        assert_eq!(next(Some(Found::Items(0)), Some("7")), Next::End(None));
        assert!(matches!(next(None, Some("7")), Next::End(Some(_))));
        assert_eq!(
            counted(Some(Found::Items(50)), "/d", Some("100"), 0, 50),
            Next::Follow("150".into())
        );
    }

    fn job(paginate: &str) -> crate::config::Config {
        let yaml = format!(
            r#"
credentials:
  main: {{ secret: {{ env: UNUSED }}, pools: {{ units: [ {{ limit: 10, per: 1h }} ] }} }}
endpoints:
  e: {{ cost: 1 }}
jobs:
  j:
    credential: main
    regions: [o/r]
    steps:
      - endpoint: e
        request: {{ url: "https://api.example.com/repos/{{region}}/issues", query: {{ state: open, key: "{{secret}}" }} }}
        paginate: {paginate}
    output: out
"#
        );
        crate::config::Config::parse(
            std::path::Path::new("q.yaml"),
            &yaml,
            crate::config::Secrets::Skip,
        )
        .unwrap()
    }

    /// The first page's fill of job `j`'s region `o/r`.
    fn fill(secret: &crate::config::Secret) -> Fill<'_> {
        Fill {
            region: "o/r",
            secret,
            job: "j",
            step: 0,
            page: 0,
            batch: "",
            input: None,
        }
    }

    #[test]
    fn a_token_that_is_a_number_is_followed_as_its_text() {
        let config = job("{ token: /next_cursor, param: cursor, max_pages: 5 }");
        let step = &config.jobs[0].steps[0];
        let secret = crate::config::Secret::new("SEKRET12".into());
        let fill = fill(&secret);
        let first = page_url(step, &fill, None).unwrap();
        let body = br#"{"data": [1], "next_cursor": 1374004777531007833}"#;
        let found = crate::page_scan::scan(body, Some("/next_cursor")).unwrap();
        assert_eq!(
            next(step, &fill, &first, None, found, None),
            Next::Follow("1374004777531007833".into())
        );
        // (a next_url is a string or nothing: a number there is no URL)
        let found = crate::page_scan::scan(br#"{"n": 2}"#, Some("/n")).unwrap();
        assert_eq!(found.and_then(Found::text), None);
        // A token that is not text (a lone surrogate escape) ends the walk,
        // named, with a warning: the page is JSON, asking again gets the same.
        let body = br#"{"data": [1], "next_cursor": "ab\ud800"}"#;
        let found = crate::page_scan::scan(body, Some("/next_cursor")).unwrap();
        match next(step, &fill, &first, None, found, None) {
            Next::Unreadable(why) => assert!(why.contains("token at /next_cursor"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_next_link_is_kept_without_the_secret_and_followed_with_it() {
        let config = job("{ link: next, max_pages: 5 }");
        let step = &config.jobs[0].steps[0];
        let secret = crate::config::Secret::new("SEKRET".into());
        let fill = fill(&secret);
        let first = page_url(step, &fill, None).unwrap();
        assert_eq!(
            first.as_str(),
            "https://api.example.com/repos/o/r/issues?state=open&key=SEKRET"
        );
        // The link echoes the key: the cursor's token leaves it out.
        let link = r#"<?state=open&key=SEKRET&page=2>; rel="next""#;
        let next = next(step, &fill, &first, None, None, Some(link));
        let Next::Follow(token) = next else {
            panic!("{next:?}")
        };
        assert_eq!(
            token,
            "https://api.example.com/repos/o/r/issues?state=open&page=2"
        );
        // Followed, the key is back (once).
        assert_eq!(
            page_url(step, &fill, Some(&token)).unwrap().as_str(),
            "https://api.example.com/repos/o/r/issues?state=open&page=2&key=SEKRET"
        );
        // Elsewhere: refused, the key masked.
        let away = r#"<https://evil.example.net/x?key=SEKRET>; rel="next""#;
        match super::next(step, &fill, &first, None, None, Some(away)) {
            Next::Refused(why) => {
                assert!(why.contains("https://evil.example.net/x?key=***"), "{why}");
                assert!(!why.contains("SEKRET"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        // A cursor's token from another kind or host restarts the step.
        assert!(token_fits(step, &fill, &token));
        for stale in [
            "CAUQ1",
            "7",
            "https://old.example.com/repos/o/r/issues?page=2",
        ] {
            assert!(!token_fits(step, &fill, stale), "{stale}");
        }
        // Another scheme or port is another origin too.
        for other in ["http://api.example.com/y", "https://api.example.com:8443/y"] {
            let link = format!("<{other}>; rel=next");
            assert!(matches!(
                super::next(step, &fill, &first, None, None, Some(&link)),
                Next::Refused(_)
            ));
        }
    }
}
