//! The stand-in: a local, metered imitation of the YouTube Data API, for the
//! demo and the tests (`quota standin`). It serves `videos` (chart=mostPopular)
//! and `search` with YouTube's response shapes and pagination tokens, keeps
//! its own per-key quota on a sliding window (videos 1 unit from `units`,
//! search 1 call from `search`), charges failed requests too, and answers
//! YouTube's real 403 `quotaExceeded` body when a key's quota is spent.
//!
//! Every request is appended to a JSON-lines log (`--log`), which the tests
//! read to check what the upstream actually saw.
//!
//! HTTP/1.1 is hand-written here on purpose: one GET per connection,
//! `Connection: close`, nothing else; a server framework would be larger
//! than the whole fixture.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::{Error, Result};

/// How the stand-in behaves.
#[derive(Clone, Debug)]
pub struct StandinOptions {
    pub listen: SocketAddr,
    /// The one valid API key; any other gets YouTube's 400 "API key not valid".
    pub key: String,
    /// The `units` quota per key and window (videos.list costs 1).
    pub units: u64,
    /// The `search` quota per key and window (search.list costs 1 call).
    pub search: u64,
    /// The length of the stand-in's own sliding quota window.
    pub window: Duration,
    /// Pages per region and chart.
    pub pages: u32,
    /// Items per page.
    pub items: u32,
    /// The first N requests answer 503 (charged, as upstreams charge failures).
    pub fail_first: u64,
    /// Answer an exhausted quota with 429 and `Retry-After` instead of 403.
    pub answer_429: bool,
    /// Wait this long before each answer.
    pub delay: Duration,
    /// Append one JSON line per request here.
    pub log: Option<PathBuf>,
}

/// Per (key, pool): the (arrival, cost) of requests inside the window.
type Spent = HashMap<(String, &'static str), VecDeque<(Instant, u64)>>;

struct State {
    opts: StandinOptions,
    spent: Mutex<Spent>,
    requests: Mutex<u64>,
    log: Option<Mutex<std::fs::File>>,
}

/// Serve until the process is stopped. Prints `listening on http://ADDR`
/// first, so a caller that asked for port 0 learns the port.
pub async fn serve(opts: StandinOptions) -> Result<u8> {
    let listener = TcpListener::bind(opts.listen)
        .await
        .map_err(|source| Error::Process {
            what: "listen",
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| Error::Process {
        what: "read the address",
        source,
    })?;
    let log = match &opts.log {
        Some(p) => Some(Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|source| Error::Io {
                    what: "open",
                    path: p.clone(),
                    source,
                })?,
        )),
        None => None,
    };
    let state = Arc::new(State {
        opts,
        spent: Mutex::new(HashMap::new()),
        requests: Mutex::new(0),
        log,
    });
    println!("listening on http://{addr}");
    let _ = std::io::stdout().flush();
    loop {
        let (stream, _) = listener.accept().await.map_err(|source| Error::Process {
            what: "accept",
            source,
        })?;
        let state = state.clone();
        tokio::spawn(async move {
            let _ = handle(stream, &state).await;
        });
    }
}

async fn handle(mut stream: TcpStream, state: &State) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || buf.len() > 64 * 1024 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let target = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let (status, headers, body) = answer(state, &target);
    if !state.opts.delay.is_zero() {
        tokio::time::sleep(state.opts.delay).await;
    }
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        _ => "Service Unavailable",
    };
    let body = body.to_string();
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json; charset=UTF-8\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(&body);
    stream.write_all(out.as_bytes()).await?;
    stream.shutdown().await
}

fn error_body(code: u16, message: &str, domain: &str, reason: &str) -> serde_json::Value {
    json!({ "error": {
        "code": code,
        "message": message,
        "errors": [{ "message": message, "domain": domain, "reason": reason }],
    }})
}

type Answer = (u16, Vec<(&'static str, String)>, serde_json::Value);

fn answer(state: &State, target: &str) -> Answer {
    let url = match reqwest::Url::parse(&format!("http://standin{target}")) {
        Ok(u) => u,
        Err(_) => return (400, vec![], json!({"error": "bad request line"})),
    };
    let q: HashMap<String, String> = url.query_pairs().into_owned().collect();
    let (pool, cost): (&'static str, u64) = match url.path() {
        "/youtube/v3/videos" => ("units", 1),
        "/youtube/v3/search" => ("search", 1),
        _ => {
            return (
                404,
                vec![],
                error_body(404, "Not Found", "global", "notFound"),
            );
        }
    };
    let region = q.get("regionCode").cloned().unwrap_or_default();
    let page: u32 = q
        .get("pageToken")
        .and_then(|t| t.strip_prefix("CAUQ"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let key = q.get("key").cloned().unwrap_or_default();

    let number = {
        let mut n = state.requests.lock().unwrap();
        *n += 1;
        *n
    };
    let (status, headers, body) = if key != state.opts.key {
        let m = "API key not valid. Please pass a valid API key.";
        (400, vec![], error_body(400, m, "global", "badRequest"))
    } else if let Some(retry) = spend(state, &key, pool, cost) {
        let m = "The request cannot be completed because you have exceeded your <a href=\"/youtube/v3/getting-started#quota\">quota</a>.";
        if state.opts.answer_429 {
            let body = error_body(429, "Too many requests", "usageLimits", "rateLimitExceeded");
            (
                429,
                vec![("Retry-After", retry.as_secs().max(1).to_string())],
                body,
            )
        } else {
            (
                403,
                vec![],
                error_body(403, m, "youtube.quota", "quotaExceeded"),
            )
        }
    } else if number <= state.opts.fail_first {
        let m = "The service is currently unavailable.";
        (503, vec![], error_body(503, m, "global", "backendError"))
    } else {
        (200, vec![], page_body(&state.opts, pool, &region, page))
    };
    if let Some(log) = &state.log {
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        let line = json!({
            "at_us": at, "path": url.path(), "region": region, "page": page,
            "status": status, "pool": pool, "cost": cost, "key_ok": key == state.opts.key,
        });
        // One write per line, so a reader never sees half of one.
        let mut f = log.lock().unwrap();
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
    (status, headers, body)
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

fn page_body(opts: &StandinOptions, pool: &str, region: &str, page: u32) -> serde_json::Value {
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
