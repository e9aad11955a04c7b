//! Other API shapes than YouTube's, so the tests can drive every kind of
//! pagination and request `portion` knows against a real server. Each has
//! `--pages` pages of `--items` items, checks the key, and logs every
//! request (its region, page, method and body) like the YouTube paths.
//!
//! * `/repos/OWNER/REPO/issues?page=N` (GitHub): `Authorization: Bearer
//!   KEY`, a relative `Link` header with `rel="next"` (and `rel="last"`).
//!   Under `OWNER` `away`, the next link points to another origin
//!   (`localhost` instead of the address asked), with the request's query.
//!   Each issue has an `updated_at`; `sort=updated` orders them newest
//!   first, `since=TIME` keeps those updated then or later. Each page has
//!   an `ETag`; `If-None-Match` with it answers 304, not counted against
//!   the rate limit, as GitHub does. `POST /_standin/touch?repo=OWNER/REPO`
//!   updates one issue of the repository (the next, round the repository's
//!   issues), one second after the last update anywhere.
//! * `/feed?region=R&cursor=N`: an absolute next URL at `/paging/next`.
//! * `/rows?region=R&page=N` (pages from 1) or `&offset=N&limit=L`: the
//!   items at `/data`, an empty array past the last.
//! * `/ids?region=R&page=N` (pages from 1): `{"items": [{"id": {"n": V}}]}`
//!   for a fan-out to read: value K of the walk is the number K when even,
//!   the string `vK` when odd, and each page starts with the last value of
//!   the page before (duplicates); an empty `items` past the last page.
//!   With `echo=1`, each page ends with one more value: the key it was
//!   sent, as a careless upstream might echo it. With `extra=V`, each
//!   page ends with the value V, whatever text it is (`../x#`), as data
//!   an upstream serves may be.
//! * `POST /chat`: a JSON body with a string `model` and a non-empty array
//!   `messages`, `Content-Type: application/json`, the key as `Bearer`;
//!   400 for anything else. It answers `{"echo": BODY, "usage": …}` as an
//!   LLM API reports tokens: `prompt_tokens` the characters of every
//!   message's `content`, `completion_tokens` 7, `total_tokens` their sum,
//!   also in the header `x-usage-tokens`; the model `silent` reports none.
//!   Also served as `/v1/chat/completions`, OpenAI's path.
//! * `POST /graphql` (also `/admin/api/VERSION/graphql.json`): a
//!   Shopify-style GraphQL API with cost extensions, the key as `Bearer` or
//!   `X-Shopify-Access-Token`; see [`crate::examples::graphql`].
//!
//! GitHub's and the LLM API's answers carry their rate-limit headers and
//! answer a spent limit as those APIs do ([`crate::examples`]).

use std::collections::HashMap;

use serde_json::json;

use crate::exchange::{Answer, Request, State, write_log};

/// The answer of one of these paths, or `None` for another path (or a
/// target that is no URL: [`crate::youtube`] answers those).
pub fn answer(state: &State, request: &Request) -> Option<Answer> {
    let url = &request.url()?;
    let q: HashMap<String, String> = url.query_pairs().into_owned().collect();
    let bearer = request
        .header("authorization")
        .and_then(|a| a.strip_prefix("Bearer "));
    let key = bearer
        .or_else(|| request.header("x-shopify-access-token"))
        .map(String::from)
        .or_else(|| q.get("key").cloned());
    let key_ok = key.as_deref() == Some(state.opts.key.as_str());
    let host = request.header("host").unwrap_or("127.0.0.1").to_string();
    let path = url.path();
    let (region, page, answer) = if path == "/_standin/touch" {
        let repo = q.get("repo").cloned().unwrap_or_default();
        let a = touch(state, &repo);
        (repo, 0, a)
    } else if let Some(repo) = path
        .strip_prefix("/repos/")
        .and_then(|r| r.strip_suffix("/issues"))
    {
        let page = number(&q, "page", 1);
        (
            repo.to_string(),
            page,
            issues(state, repo, page, &host, url, &q),
        )
    } else if path == "/feed" {
        let page = number(&q, "cursor", 0);
        let region = q.get("region").cloned().unwrap_or_default();
        let a = feed(state, &region, page, &host);
        (region, page, a)
    } else if path == "/rows" {
        let region = q.get("region").cloned().unwrap_or_default();
        let limit = number(&q, "limit", state.opts.items as u64);
        let (page, first) = match q.get("offset") {
            Some(_) => {
                let offset = number(&q, "offset", 0);
                (offset / limit.max(1), offset)
            }
            None => {
                let page = number(&q, "page", 1);
                (page, page.saturating_sub(1) * limit)
            }
        };
        (region.clone(), page, rows(state, &region, first, limit))
    } else if path == "/ids" {
        let region = q.get("region").cloned().unwrap_or_default();
        let page = number(&q, "page", 1);
        let echo = (q.get("echo").map(String::as_str) == Some("1")).then_some(key.as_deref());
        let extra = echo
            .flatten()
            .into_iter()
            .chain(q.get("extra").map(String::as_str));
        (region, page, ids(state, page, extra.collect()))
    } else if path == "/chat" || path == "/v1/chat/completions" {
        (String::new(), 0, chat(request))
    } else if crate::examples::is_graphql(path) {
        crate::examples::graphql(state, request, url)
    } else {
        return None;
    };
    let answer = if path == "/_standin/touch" {
        answer
    } else if !key_ok {
        (401, vec![], json!({"message": "Bad credentials"}))
    } else if path.starts_with("/repos/") {
        crate::examples::github(state, answer, request.header("if-none-match"))
    } else if path == "/chat" || path == "/v1/chat/completions" {
        crate::examples::llm(state, answer)
    } else {
        answer
    };
    let body: Option<serde_json::Value> = serde_json::from_slice(&request.body).ok();
    write_log(
        state,
        json!({
            "at_us": now_us(), "method": request.method, "path": path, "region": region,
            "page": page, "status": answer.0, "query": url.query(), "body": body,
            "host": host,
        }),
    );
    Some(answer)
}

fn number(q: &HashMap<String, String>, name: &str, default: u64) -> u64 {
    q.get(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn items(state: &State, region: &str, first: u64, count: u64) -> Vec<serde_json::Value> {
    let total = u64::from(state.opts.pages) * u64::from(state.opts.items);
    (first..(first + count).min(total))
        .map(|i| json!({ "id": format!("{region}#{i}"), "title": format!("item {i} of {region}") }))
        .collect()
}

/// GitHub's issues: an array body, the next page in the `Link` header,
/// an `ETag` of both.
fn issues(
    state: &State,
    repo: &str,
    page: u64,
    host: &str,
    url: &url::Url,
    q: &HashMap<String, String>,
) -> Answer {
    let per = u64::from(state.opts.items);
    let total = u64::from(state.opts.pages) * per;
    let updated = state.counters.updated.lock().unwrap().get(repo).cloned();
    let updated = updated.unwrap_or_default();
    // (issue i: updated at EPOCH, or when it was last touched)
    let mut all: Vec<(u64, u64)> = (0..total)
        .map(|i| (i, updated.get(&i).copied().unwrap_or(0)))
        .collect();
    if q.get("sort").map(String::as_str) == Some("updated") {
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    }
    if let Some(since) = q
        .get("since")
        .and_then(|s| humantime::parse_rfc3339_weak(s).ok())
    {
        let since = since
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        all.retain(|(_, at)| EPOCH + at >= since);
    }
    let first = ((page.max(1) - 1) * per) as usize;
    let body: Vec<serde_json::Value> = all
        .iter()
        .skip(first)
        .take(per as usize)
        .map(|(i, at)| {
            let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(EPOCH + at);
            json!({
                "id": format!("{repo}#{i}"),
                "title": format!("item {i} of {repo}"),
                "updated_at": humantime::format_rfc3339_seconds(time).to_string(),
            })
        })
        .collect();
    let last = (all.len() as u64).div_ceil(per).max(1);
    let mut links = Vec::new();
    if page < last {
        let query: Vec<String> = url
            .query_pairs()
            .filter(|(k, _)| k != "page")
            .map(|(k, v)| format!("{k}={v}"))
            .chain([format!("page={}", page + 1)])
            .collect();
        let target = format!("/repos/{repo}/issues?{}", query.join("&"));
        let target = if repo.starts_with("away/") {
            let port = host.rsplit(':').next().unwrap_or("80");
            format!("http://localhost:{port}{target}")
        } else {
            target
        };
        links.push(format!("<{target}>; rel=\"next\""));
    }
    links.push(format!("</repos/{repo}/issues?page={last}>; rel=\"last\""));
    let links = links.join(", ");
    let body = json!(body);
    let etag = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (body.to_string(), &links).hash(&mut h);
        format!("W/\"{:016x}\"", h.finish())
    };
    (200, vec![("Link", links), ("ETag", etag)], body)
}

/// The stand-in's GitHub issues were all last updated at this Unix time
/// (2024-01-01T00:00:00Z), plus the seconds a touch says.
const EPOCH: u64 = 1_704_067_200;

/// Update one issue of `repo`: the next one round its issues, one second
/// after the last update of any.
fn touch(state: &State, repo: &str) -> Answer {
    let total = u64::from(state.opts.pages) * u64::from(state.opts.items);
    let mut all = state.counters.updated.lock().unwrap();
    let at = all
        .values()
        .flat_map(|m| m.values())
        .max()
        .copied()
        .unwrap_or(0)
        + 1;
    let issues = all.entry(repo.to_string()).or_default();
    let touches = state
        .counters
        .touches
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let i = (issues.len() as u64 + touches) % total.max(1);
    issues.insert(i, at);
    (
        200,
        vec![],
        json!({ "repo": repo, "issue": i, "updated_at_offset": at }),
    )
}

/// A feed whose body names the next page's absolute URL.
fn feed(state: &State, region: &str, page: u64, host: &str) -> Answer {
    let per = u64::from(state.opts.items);
    let mut body = json!({ "data": items(state, region, page * per, per), "paging": {} });
    if page + 1 < u64::from(state.opts.pages) {
        body["paging"]["next"] = json!(format!(
            "http://{host}/feed?region={region}&cursor={}",
            page + 1
        ));
    }
    (200, vec![], body)
}

/// Rows from `first`: an empty `data` past the last.
fn rows(state: &State, region: &str, first: u64, limit: u64) -> Answer {
    (
        200,
        vec![],
        json!({ "data": items(state, region, first, limit) }),
    )
}

/// Values for a fan-out: see the module's text.
fn ids(state: &State, page: u64, extra: Vec<&str>) -> Answer {
    let per = u64::from(state.opts.items);
    let items: Vec<serde_json::Value> = if (1..=u64::from(state.opts.pages)).contains(&page) {
        let first = (page - 1) * per.saturating_sub(1);
        (first..first + per)
            .map(|k| match k % 2 {
                0 => json!({ "id": { "n": k } }),
                _ => json!({ "id": { "n": format!("v{k}") } }),
            })
            .chain(extra.iter().map(|v| json!({ "id": { "n": v } })))
            .collect()
    } else {
        Vec::new()
    };
    (200, vec![], json!({ "items": items }))
}

/// A JSON POST, checked the way a strict API checks it.
fn chat(request: &Request) -> Answer {
    let bad = |why: &str| (400, vec![], json!({ "error": { "message": why } }));
    if request.method != "POST" {
        return bad("POST only");
    }
    if request.header("content-type") != Some("application/json") {
        return bad("Content-Type must be application/json");
    }
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(&request.body) else {
        return bad("the body is not JSON");
    };
    let model_ok = body.get("model").is_some_and(|m| m.is_string());
    let messages_ok = body
        .get("messages")
        .and_then(|m| m.as_array())
        .is_some_and(|m| !m.is_empty());
    if !model_ok || !messages_ok {
        return bad("a string model and a non-empty array messages are required");
    }
    if body["model"] == "silent" {
        return (200, vec![], json!({ "echo": body }));
    }
    let prompt: usize = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_str())
        .map(|c| c.chars().count())
        .sum();
    let total = prompt + 7;
    let usage = json!({ "prompt_tokens": prompt, "completion_tokens": 7, "total_tokens": total });
    let headers = vec![("x-usage-tokens", total.to_string())];
    (200, headers, json!({ "echo": body, "usage": usage }))
}
