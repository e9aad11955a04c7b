//! What the example jobs of `jobs/` (`github.yaml`, `llm.yaml`,
//! `graphql.yaml`) need from their stand-in upstream beyond the shapes of
//! [`crate::apis`]: each upstream's own counters, reported the way the real
//! API reports them, so the examples show (and the tests can read) usage
//! made outside `portion`. `portion` does not read these headers yet; they are
//! plain headers for now.
//!
//! * GitHub (`/repos/OWNER/REPO/issues`): an hourly window of
//!   `--github-limit` requests per token that starts with `--github-used`
//!   already spent by other tools. Every authenticated answer carries
//!   `X-RateLimit-Limit`, `-Remaining`, `-Reset` (epoch seconds), `-Used`
//!   and `-Resource: core`; once spent, GitHub's 403 "API rate limit
//!   exceeded" with `X-RateLimit-Remaining: 0`.
//! * The LLM API (`POST /chat`, also `/v1/chat/completions`): a minute of
//!   `--llm-requests` requests and `--llm-tokens` tokens, starting with
//!   `--llm-used-requests` and `--llm-used-tokens` spent by others. Answers
//!   carry OpenAI's `x-ratelimit-limit-*`, `x-ratelimit-remaining-*` and
//!   `x-ratelimit-reset-*` (a duration such as `42s` or `1m3s`) for
//!   `requests` and `tokens`; once either is spent, a 429
//!   `rate_limit_exceeded` with `Retry-After`.
//! * Shopify-style GraphQL (`POST /graphql`, also
//!   `/admin/api/VERSION/graphql.json`): see [`graphql`].
//!
//! The counters themselves are in [`crate::counters`]. The windows are
//! fixed: each starts at the first request after the last one ended (the
//! stand-in's start for the first), and the usage of others counts in the
//! first window only.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::exchange::{Answer, Request, State};

const MINUTE: Duration = Duration::from_secs(60);

fn epoch(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// GitHub's count of an authenticated answer: its `X-RateLimit-*` headers
/// added, or the 403 of a spent hour instead.
pub fn github(state: &State, answer: Answer, if_none_match: Option<&str>) -> Answer {
    let limit = state.opts.github_limit;
    let window = state.opts.github_window;
    let now = SystemTime::now();
    let mut w = state.counters.github.lock().unwrap();
    w.roll(now, window);
    // (GitHub's reset is in whole epoch seconds, and so is its window's
    // start: a request at the reset it said is in the next window)
    w.start = UNIX_EPOCH + Duration::from_secs(epoch(w.start));
    // (GitHub: a conditional request answered 304 does not count against
    // the rate limit; its headers say the count as it stands)
    let etag = answer
        .1
        .iter()
        .find(|(k, _)| *k == "ETag")
        .map(|(_, v)| v.as_str());
    let unchanged = answer.0 == 200 && etag.is_some() && etag == if_none_match;
    if unchanged && w.used < limit {
        let reset = state
            .opts
            .github_reset
            .unwrap_or_else(|| epoch(w.start + window));
        let headers = vec![
            ("ETag", etag.unwrap_or_default().to_string()),
            ("X-RateLimit-Limit", limit.to_string()),
            ("X-RateLimit-Remaining", (limit - w.used).to_string()),
            ("X-RateLimit-Reset", reset.to_string()),
            ("X-RateLimit-Used", w.used.to_string()),
            ("X-RateLimit-Resource", "core".to_string()),
        ];
        return (304, headers, serde_json::Value::Null);
    }
    let reset = state
        .opts
        .github_reset
        .unwrap_or_else(|| epoch(w.start + window));
    let spent = w.used >= limit;
    if !spent {
        w.used += 1;
    }
    let headers = vec![
        ("X-RateLimit-Limit", limit.to_string()),
        (
            "X-RateLimit-Remaining",
            limit.saturating_sub(w.used).to_string(),
        ),
        ("X-RateLimit-Reset", reset.to_string()),
        ("X-RateLimit-Used", w.used.min(limit).to_string()),
        ("X-RateLimit-Resource", "core".to_string()),
    ];
    if spent {
        let body = json!({
            "message": "API rate limit exceeded for user ID 1.",
            "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
        });
        return (403, headers, body);
    }
    let (status, mut extra, body) = answer;
    extra.extend(headers);
    (status, extra, body)
}

/// A reset as OpenAI writes it: `42s`, `1m3s`.
fn reset_text(d: Duration) -> String {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    match s / 60 {
        0 => format!("{s}s"),
        m => format!("{m}m{}s", s % 60),
    }
}

/// The LLM API's count of an authenticated answer: its `x-ratelimit-*`
/// headers added, or a 429 when the minute's requests or tokens are spent.
/// A 200 spends one request and its `usage.total_tokens`.
pub fn llm(state: &State, answer: Answer) -> Answer {
    let (limit_r, limit_t) = (state.opts.llm_requests, state.opts.llm_tokens);
    let now = SystemTime::now();
    let mut w = state.counters.llm.lock().unwrap();
    w.roll(now, MINUTE);
    let spent = w.used >= limit_r || w.tokens >= limit_t;
    if !spent && answer.0 == 200 {
        w.used += 1;
        w.tokens += answer.2["usage"]["total_tokens"].as_u64().unwrap_or(0);
    }
    let reset = reset_text(w.left(now, MINUTE));
    let headers = vec![
        ("x-ratelimit-limit-requests", limit_r.to_string()),
        ("x-ratelimit-limit-tokens", limit_t.to_string()),
        (
            "x-ratelimit-remaining-requests",
            limit_r.saturating_sub(w.used).to_string(),
        ),
        (
            "x-ratelimit-remaining-tokens",
            limit_t.saturating_sub(w.tokens).to_string(),
        ),
        ("x-ratelimit-reset-requests", reset.clone()),
        ("x-ratelimit-reset-tokens", reset),
    ];
    if spent {
        let mut headers = headers;
        let wait = w.left(now, MINUTE).as_secs().max(1);
        headers.push(("Retry-After", wait.to_string()));
        let what = if w.used >= limit_r {
            "requests"
        } else {
            "tokens"
        };
        let body = json!({ "error": {
            "message": format!("Rate limit reached for {what} per min. Please try again in {wait}s."),
            "type": what, "param": null, "code": "rate_limit_exceeded",
        }});
        return (429, headers, body);
    }
    let (status, mut extra, body) = answer;
    extra.extend(headers);
    (status, extra, body)
}

/// Whether `path` is the GraphQL endpoint's.
pub fn is_graphql(path: &str) -> bool {
    path == "/graphql" || (path.starts_with("/admin/api/") && path.ends_with("/graphql.json"))
}

/// A Shopify-style GraphQL query, and (region, page) for the log.
///
/// The body must be JSON (`Content-Type: application/json`) with a string
/// `query` and an optional object `variables`: `first` (1 to 250, default
/// 10) items after the cursor `after`, of the item list `query` names (the
/// region). The cursor may also come as the query parameter `after`, which
/// wins: `portion`'s body-token pagination sends its token as a query
/// parameter. Each list holds `--pages` × `--items` items.
///
/// It answers `data.items` with `nodes` and `pageInfo {hasNextPage,
/// endCursor}` (`endCursor` null on an empty page, as Shopify's), and
/// `extensions.cost`: `requestedQueryCost` 2 + `first`, `actualQueryCost`
/// 1 + the nodes returned, and `throttleStatus` from a bucket of
/// `--graphql-points` that regains `--graphql-restore` points a second
/// (reported only: the stand-in does not throttle).
pub fn graphql(state: &State, request: &Request, url: &url::Url) -> (String, u64, Answer) {
    let bad = |why: &str| {
        let body = json!({ "errors": [{ "message": why }] });
        (String::new(), 0, (400, vec![], body))
    };
    if request.method != "POST" {
        return bad("POST only");
    }
    if request.header("content-type") != Some("application/json") {
        return bad("Content-Type must be application/json");
    }
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(&request.body) else {
        return bad("the body is not JSON");
    };
    if !body["query"].is_string() {
        return bad("a string query is required");
    }
    let vars = &body["variables"];
    if !(vars.is_null() || vars.is_object()) {
        return bad("variables must be an object");
    }
    let first = match &vars["first"] {
        serde_json::Value::Null => 10,
        v => match v.as_u64() {
            Some(n @ 1..=250) => n,
            _ => return bad("first must be a number from 1 to 250"),
        },
    };
    let region = vars["query"].as_str().unwrap_or_default().to_string();
    let after = url
        .query_pairs()
        .find(|(k, _)| k == "after")
        .map(|(_, v)| v.into_owned())
        .or_else(|| vars["after"].as_str().map(String::from));
    let from = match after
        .as_deref()
        .map(|c| c.strip_prefix("c").map(str::parse))
    {
        None => 0,
        Some(Some(Ok(n))) => n,
        Some(_) => return bad("invalid cursor"),
    };
    let total = u64::from(state.opts.pages) * u64::from(state.opts.items);
    let upto = (from + first).min(total);
    let nodes: Vec<serde_json::Value> = (from..upto)
        .map(|i| json!({ "id": format!("gid://shopify/Product/{region}-{i}"), "title": format!("item {i} of {region}") }))
        .collect();
    let end_cursor = (!nodes.is_empty()).then(|| format!("c{upto}"));
    let requested = 2 + first;
    let actual = 1 + nodes.len() as u64;
    let (maximum, restore) = (state.opts.graphql_points, state.opts.graphql_restore);
    let available = {
        let mut b = state.counters.graphql.lock().unwrap();
        let now = Instant::now();
        let regained = now.duration_since(b.at).as_secs_f64() * restore as f64;
        b.available = (b.available + regained).min(maximum as f64) - actual as f64;
        b.at = now;
        b.available.max(0.0).floor() as u64
    };
    let answer = json!({
        "data": { "items": {
            "nodes": nodes,
            "pageInfo": { "hasNextPage": upto < total, "endCursor": end_cursor },
        }},
        "extensions": { "cost": {
            "requestedQueryCost": requested,
            "actualQueryCost": actual,
            "throttleStatus": {
                "maximumAvailable": maximum,
                "currentlyAvailable": available,
                "restoreRate": restore,
            },
        }},
    });
    (region, from / first, (200, vec![], answer))
}
