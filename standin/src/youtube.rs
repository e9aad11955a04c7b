//! What the stand-in answers: `videos` (chart=mostPopular, or the details
//! of the videos `id=A,B,C` names, as a fan-out step asks) and `search`
//! with the YouTube Data API's response shapes and pagination tokens, its
//! own per-key quota on a sliding window (videos 1 unit from `units`,
//! search 1 call from `search`), failed requests charged too, and YouTube's
//! real 403 `quotaExceeded` body when a key's quota is spent.
//!
//! Every request is appended to a JSON-lines log (`--log`), which the tests
//! read to check what the upstream actually saw (its method, `Referer` and
//! `X-Api-Key` headers and page token included).
//!
//! Misbehaviour on demand, by path, for the tests:
//!
//! * `/hop/N/REST`: a 302 to `/hop/N-1/REST` (the query kept), and from
//!   `/hop/1/REST` to `/REST`: N same-origin redirects.
//! * `/away/STATUS/ORIGIN/REST`: a STATUS redirect to `ORIGIN/REST` (ORIGIN
//!   percent-encoded, e.g. `http%3A%2F%2Flocalhost%3A8090`), the query kept,
//!   key and all.
//! * `/endless/…`: a 200 JSON body that never ends (no `Content-Length`),
//!   about 40 MiB/s, until the client hangs up.
//! * `/echo/…`: a 401 whose body echoes the request (its `Authorization`
//!   header first, then the target and the other headers), as a careless
//!   upstream's error page does.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::Options;
use crate::exchange::{Answer, ENDLESS, Request, State, write_log};

fn error_body(code: u16, message: &str, domain: &str, reason: &str) -> serde_json::Value {
    json!({ "error": {
        "code": code,
        "message": message,
        "errors": [{ "message": message, "domain": domain, "reason": reason }],
    }})
}

/// Answer `request` (a path none of [`crate::apis`]' shapes takes),
/// charging its key and logging it.
pub fn answer(state: &State, request: &Request) -> Answer {
    let Some(url) = request.url() else {
        return (400, vec![], json!({"error": "bad request line"}));
    };
    let q: HashMap<String, String> = url.query_pairs().into_owned().collect();
    let region = q.get("regionCode").cloned().unwrap_or_default();
    let token = q.get("pageToken").cloned();
    let page: u32 = token
        .as_deref()
        .and_then(|t| t.strip_prefix("CAUQ"))
        .map(|n| n.split(|c: char| !c.is_ascii_digit()).next().unwrap_or(""))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    // The header wins over the query, as APIs that take both do.
    let key = request
        .header("x-api-key")
        .map(String::from)
        .or_else(|| q.get("key").cloned())
        .unwrap_or_default();
    if url.path().starts_with("/endless/") {
        log(
            state, request, &url, &key, &region, page, &token, 200, "", 0,
        );
        return (200, vec![(ENDLESS, String::new())], json!(null));
    }
    if url.path().starts_with("/echo/") {
        let mut echo = vec![format!(
            "Authorization: {}",
            request.header("authorization").unwrap_or("none")
        )];
        echo.push(format!("{} {}", request.method, request.target));
        echo.extend(request.headers.iter().map(|(k, v)| format!("{k}: {v}")));
        let body = error_body(401, &echo.join("; "), "global", "unauthorized");
        return (401, vec![], body);
    }
    let (status, headers, body, pool, cost) = respond(state, &url, &key, &region, page);
    log(
        state, request, &url, &key, &region, page, &token, status, pool, cost,
    );
    (status, headers, body)
}

/// Append one line to the request log, if there is one.
#[allow(clippy::too_many_arguments)]
fn log(
    state: &State,
    request: &Request,
    url: &url::Url,
    key: &str,
    region: &str,
    page: u32,
    token: &Option<String>,
    status: u16,
    pool: &str,
    cost: u64,
) {
    if !state.logs() {
        return;
    }
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    let line = json!({
        "at_us": at, "method": request.method, "path": url.path(), "region": region,
        "page": page, "token": token, "status": status, "pool": pool, "cost": cost,
        "key_ok": key == state.opts.key, "referer": request.header("referer"),
        "x_api_key": request.header("x-api-key"), "query": url.query(),
    });
    write_log(state, line);
}

/// The answer to one request, and the pool and cost it was charged (none
/// for a redirect or an unknown path).
fn respond(
    state: &State,
    url: &url::Url,
    key: &str,
    region: &str,
    page: u32,
) -> (
    u16,
    Vec<(&'static str, String)>,
    serde_json::Value,
    &'static str,
    u64,
) {
    let path = url.path();
    let query = url.query().map(|q| format!("?{q}")).unwrap_or_default();
    if let Some(rest) = path.strip_prefix("/hop/") {
        let (n, rest) = rest.split_once('/').unwrap_or((rest, ""));
        let to = match n.parse::<u32>() {
            Ok(n) if n > 1 => format!("/hop/{}/{rest}{query}", n - 1),
            _ => format!("/{rest}{query}"),
        };
        return (302, vec![("Location", to)], json!({}), "", 0);
    }
    if let Some(rest) = path.strip_prefix("/away/") {
        let mut parts = rest.splitn(3, '/');
        let status = parts.next().and_then(|s| s.parse().ok()).unwrap_or(302);
        let origin = parts.next().unwrap_or_default();
        // Percent-decoded the way a query value is.
        let origin: String = url::Url::parse(&format!("http://x/?o={origin}"))
            .ok()
            .and_then(|u| u.query_pairs().next().map(|(_, v)| v.into_owned()))
            .unwrap_or_default();
        let to = format!("{origin}/{}{query}", parts.next().unwrap_or_default());
        return (status, vec![("Location", to)], json!({}), "", 0);
    }
    let (pool, cost): (&'static str, u64) = match path {
        "/youtube/v3/videos" => ("units", 1),
        "/youtube/v3/search" => ("search", 1),
        _ => {
            let body = error_body(404, "Not Found", "global", "notFound");
            return (404, vec![], body, "", 0);
        }
    };

    let number = {
        let mut n = state.requests.lock().unwrap();
        *n += 1;
        *n
    };
    let (status, headers, body) = if key != state.opts.key {
        let m = "API key not valid. Please pass a valid API key.";
        (400, vec![], error_body(400, m, "global", "badRequest"))
    } else if let Some(retry) = spend(state, key, pool, cost) {
        let m = "The request cannot be completed because you have exceeded your <a href=\"/youtube/v3/getting-started#quota\">quota</a>.";
        if state.opts.answer_429 {
            let body = error_body(429, "Too many requests", "usageLimits", "rateLimitExceeded");
            let after = (state.opts.retry_after.clone())
                .unwrap_or_else(|| retry.as_secs().max(1).to_string());
            let headers = match state.opts.bare_429 {
                true => vec![],
                false => vec![("Retry-After", after)],
            };
            (429, headers, body)
        } else if state.opts.answer_github {
            let reset = SystemTime::now() + retry + Duration::from_secs(1);
            let epoch = reset
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs();
            let body = json!({
                "message": "API rate limit exceeded for installation ID 1.",
                "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
            });
            (
                403,
                vec![
                    ("X-RateLimit-Limit", "5000".to_string()),
                    ("X-RateLimit-Remaining", "0".to_string()),
                    ("X-RateLimit-Reset", epoch.to_string()),
                ],
                body,
            )
        } else {
            (
                403,
                vec![],
                error_body(403, m, "youtube.quota", "quotaExceeded"),
            )
        }
    } else if state.opts.missing.iter().any(|m| m == region) {
        let m = "The video identified by the <code>id</code> parameter could not be found.";
        (
            404,
            vec![],
            error_body(404, m, "youtube.video", "videoNotFound"),
        )
    } else if number <= state.opts.fail_first {
        let m = "The service is currently unavailable.";
        (503, vec![], error_body(503, m, "global", "backendError"))
    } else {
        let ids = url.query_pairs().find(|(k, _)| k == "id").map(|(_, v)| v);
        let mut body = match ids {
            Some(ids) if pool == "units" => details(&ids),
            _ => page_body(&state.opts, pool, region, page),
        };
        if let (Some(n), Some(next)) = (state.opts.token_cycle, body.get_mut("nextPageToken")) {
            *next = json!(format!("CAUQ{}", 1 + page % n.max(1)));
        }
        if let Some((long, bytes)) = state
            .opts
            .long_tokens
            .as_deref()
            .and_then(|l| l.split_once('='))
            && long == region
            && let Some(next) = body.get_mut("nextPageToken")
        {
            let pad = "x".repeat(bytes.parse().unwrap_or(0));
            *next = json!(format!("{}.{pad}", next.as_str().unwrap_or_default()));
        }
        if state.opts.token_echoes_key
            && let Some(next) = body.get_mut("nextPageToken")
        {
            *next = json!(format!("{}.{key}", next.as_str().unwrap_or_default()));
        }
        (200, vec![], body)
    };
    (status, headers, body, pool, cost)
}

/// Spend `cost` from the key's `pool`, or say how long until it would fit.
fn spend(state: &State, key: &str, pool: &'static str, cost: u64) -> Option<Duration> {
    let limit = if pool == "units" {
        state.opts.units
    } else {
        state.opts.search
    };
    let now = Instant::now();
    let mut spent = state.spent.lock().unwrap();
    let log = spent.entry((key.to_string(), pool)).or_default();
    while log
        .front()
        .is_some_and(|(t, _)| now.duration_since(*t) >= state.opts.window)
    {
        log.pop_front();
    }
    let used: u64 = log.iter().map(|(_, c)| c).sum();
    if used + cost > limit {
        let oldest = log.front().map_or(now, |(t, _)| *t);
        return Some(state.opts.window.saturating_sub(now.duration_since(oldest)));
    }
    log.push_back((now, cost));
    None
}

/// videos.list by id: one item per id asked (at most 50, as YouTube allows),
/// in the order asked, with made-up statistics.
fn details(ids: &str) -> serde_json::Value {
    let items: Vec<_> = ids
        .split(',')
        .filter(|id| !id.is_empty())
        .take(50)
        .map(|id| {
            json!({ "kind": "youtube#video", "etag": format!("e{id}"), "id": id,
                    "statistics": { "viewCount": (id.len() * 1000).to_string() } })
        })
        .collect();
    json!({
        "kind": "youtube#videoListResponse",
        "items": items,
        "pageInfo": { "totalResults": items.len(), "resultsPerPage": items.len() },
    })
}

fn page_body(opts: &Options, pool: &str, region: &str, page: u32) -> serde_json::Value {
    let items: Vec<_> = (0..opts.items)
        .map(|i| {
            let id = format!("{region}{page:02}{i:03}");
            if pool == "units" {
                json!({ "kind": "youtube#video", "etag": format!("e{id}"), "id": id,
                        "snippet": { "title": format!("Trending {region} #{}", page * opts.items + i + 1),
                                     "channelTitle": "Stand-in" } })
            } else {
                json!({ "kind": "youtube#searchResult", "etag": format!("e{id}"),
                        "id": { "kind": "youtube#video", "videoId": id } })
            }
        })
        .collect();
    let kind = if pool == "units" {
        "youtube#videoListResponse"
    } else {
        "youtube#searchListResponse"
    };
    let mut body = json!({
        "kind": kind,
        "etag": format!("{region}-{page}"),
        "items": items,
        "pageInfo": { "totalResults": opts.pages * opts.items, "resultsPerPage": opts.items },
    });
    if page + 1 < opts.pages {
        body["nextPageToken"] = json!(format!("CAUQ{}", page + 1));
    }
    if page > 0 {
        body["prevPageToken"] = json!(format!("CAUQ{}", page - 1));
    }
    body
}
