//! `portion-standin`: a local, metered imitation of the YouTube Data API, for
//! the demo (`jobs/demo.sh`) and the tests. It is not part of `portion`, the
//! operator's tool, and does not use its library: a package of its own in
//! portion's workspace (`standin/`), built beside it by `cargo build`.
//!
//! * [`exchange`]: what the others build on: the request, the answer, the
//!   state all requests share and the request log.
//! * [`youtube`]: what it answers (`videos`, `search`, its own quota).
//! * [`apis`]: other API shapes (GitHub's Link pagination, a next URL in
//!   the body, page and offset numbers, a JSON POST).
//! * [`examples`]: what the example jobs of `jobs/` need beyond those: the
//!   upstreams' own rate-limit counters (GitHub's, an LLM API's, kept in
//!   [`counters`]) and a Shopify-style GraphQL endpoint with cost
//!   extensions.
//! * [`odd`]: answers no client hopes for, on demand (refused requests,
//!   compressed bodies, odd `Link` headers, bodies that are not JSON).
//! * [`http`]: the hand-written HTTP/1.1 server it answers through, which
//!   routes each request to one of the above.

mod apis;
mod counters;
mod examples;
mod exchange;
mod http;
mod large;
mod odd;
mod youtube;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

/// Serve a local stand-in for a metered API (YouTube-shaped), for the demo
/// and the tests
#[derive(Clone, Debug, Parser)]
#[command(name = "portion-standin", version, about)]
pub struct Options {
    /// Address to listen on (port 0 picks a free port; the first line printed says which)
    #[arg(long, default_value = "127.0.0.1:8089")]
    pub listen: std::net::SocketAddr,

    /// The one API key it accepts
    #[arg(long, default_value = "demo-key")]
    pub key: String,

    /// Its own `units` quota per key and window (videos costs 1)
    #[arg(long, default_value_t = 10_000)]
    pub units: u64,

    /// Its own `search` quota per key and window (search costs 1 call)
    #[arg(long, default_value_t = 100)]
    pub search: u64,

    /// The length of its own sliding quota window
    #[arg(long, default_value = "24h", value_parser = humantime::parse_duration)]
    pub window: Duration,

    /// Pages per region
    #[arg(long, default_value_t = 3)]
    pub pages: u32,

    /// Items per page
    #[arg(long, default_value_t = 5)]
    pub items: u32,

    /// Answer the first N requests with 503 (charged all the same)
    #[arg(long, default_value_t = 0)]
    pub fail_first: u64,

    /// Answer a spent quota with 429 and Retry-After instead of YouTube's 403
    #[arg(long)]
    pub answer_429: bool,

    /// With --answer-429: send this Retry-After value as it is (seconds or
    /// an HTTP-date, sane or not) instead of the seconds until units free up
    #[arg(long, value_name = "VALUE", requires = "answer_429")]
    pub retry_after: Option<String>,

    /// With --answer-429: no Retry-After at all (a bare 429)
    #[arg(long, requires = "answer_429", conflicts_with = "retry_after")]
    pub bare_429: bool,

    /// Answer a spent quota as GitHub does: 403, `X-RateLimit-Remaining: 0`,
    /// `X-RateLimit-Reset` (epoch seconds) and "API rate limit exceeded"
    #[arg(long, conflicts_with = "answer_429")]
    pub answer_github: bool,

    /// Page tokens go in circles of N: after page P comes token CAUQ{1 + P mod N}
    /// (1: the same token again and again)
    #[arg(long, value_name = "N")]
    pub token_cycle: Option<u32>,

    /// Page tokens echo the key (`CAUQ2.KEY`), as a next-page link that
    /// repeats the query would
    #[arg(long)]
    pub token_echoes_key: bool,

    /// Page tokens of region REGION carry BYTES more characters
    /// (`CAUQ2.xxx…`): an upstream whose next page cannot be asked for (a
    /// request line has room for 65,534 bytes)
    #[arg(long, value_name = "REGION=BYTES")]
    pub long_tokens: Option<String>,

    /// Answer 404 (notFound, charged) for region (or input key) REGION, as
    /// an upstream does for an id it does not have (repeatable)
    #[arg(long, value_name = "REGION")]
    pub missing: Vec<String>,

    /// Wait this long before every answer
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub delay: Duration,

    /// A request whose target (path and query) contains TEXT waits DURATION
    /// instead of --delay: one batch of a fan-out slower than the others,
    /// so that they finish out of order
    #[arg(long, value_name = "TEXT=DURATION", value_parser = slow)]
    pub slow: Option<(String, Duration)>,

    /// GitHub's hourly request limit per token, which its `X-RateLimit-*`
    /// headers count down (a spent one answers 403, `X-RateLimit-Remaining: 0`)
    #[arg(long, default_value_t = 5000)]
    pub github_limit: u64,

    /// The length of GitHub's rate-limit window (its hour; shorter for a
    /// benchmark that runs through several)
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub github_window: Duration,

    /// Requests already spent from GitHub's hourly limit by other tools when
    /// the stand-in starts (usage made outside `portion`)
    #[arg(long, default_value_t = 0)]
    pub github_used: u64,

    /// Send this `X-RateLimit-Reset` (epoch seconds) instead of the hour's
    /// real one: an upstream whose reset is absurd (or in milliseconds)
    #[arg(long)]
    pub github_reset: Option<u64>,

    /// The LLM API's requests per minute (`x-ratelimit-*-requests`; a spent
    /// one answers 429)
    #[arg(long, default_value_t = 10_000)]
    pub llm_requests: u64,

    /// The LLM API's tokens per minute (`x-ratelimit-*-tokens`)
    #[arg(long, default_value_t = 10_000_000)]
    pub llm_tokens: u64,

    /// Requests already spent from the LLM API's minute by others at start
    #[arg(long, default_value_t = 0)]
    pub llm_used_requests: u64,

    /// Tokens already spent from the LLM API's minute by others at start
    #[arg(long, default_value_t = 0)]
    pub llm_used_tokens: u64,

    /// The GraphQL API's bucket of query cost points (`maximumAvailable`)
    #[arg(long, default_value_t = 1000)]
    pub graphql_points: u64,

    /// Points the GraphQL bucket regains per second (`restoreRate`)
    #[arg(long, default_value_t = 50)]
    pub graphql_restore: u64,

    /// Answer 400 to a request whose query has every pair of K=V[&K=V…]
    /// (as decoded): an expired page token, a batch the upstream rejects
    #[arg(long, value_name = "K=V[&K=V…]")]
    pub refuse: Option<String>,

    /// Compress every answer's body in CODING (gzip, deflate, br, zstd),
    /// with its Content-Encoding
    #[arg(long, value_name = "CODING", value_parser = ["gzip", "deflate", "br", "zstd"])]
    pub encode: Option<String>,

    /// Send the GitHub shape's Link header in FORM: utf8 (raw UTF-8 in its
    /// URLs), unclosed (a stray `<` never closed before the real link),
    /// unterminated (a quoted parameter left open before it)
    #[arg(long, value_name = "FORM", value_parser = ["utf8", "unclosed", "unterminated"])]
    pub link_form: Option<String>,

    /// Pages of `/ids` start with a field of about BYTES bytes of small
    /// numbers (`"filler":[0,0,…]`): a page large and cheap to send
    #[arg(long, value_name = "BYTES")]
    pub large_page: Option<usize>,

    /// Pages of `/ids` hold nesting 200 deep and, first among their items,
    /// an id that is a string with a lone surrogate escape (`"cut \ud83d"`)
    #[arg(long)]
    pub odd_ids: bool,

    /// Pages of `/ids` hold, first among their items, ids that are
    /// numbers a double cannot hold as written (`123456789012345678901234`,
    /// `-0`)
    #[arg(long)]
    pub long_ids: bool,

    /// Pages of `/ids` hold a number with the key inside (`"views":
    /// 9KEY99`), when the key is all digits
    #[arg(long)]
    pub key_in_number: bool,

    /// Pages of `/ids` hold the key as numbers written otherwise
    /// (`"views": 1.2345678e7, "w": 123456.78E2` for the key 12345678),
    /// when the key is all digits (3 or more)
    #[arg(long)]
    pub key_in_exponent: bool,

    /// With --key-in-number: only the pages whose query has every pair of
    /// K=V[&K=V…] (as decoded), `region=A&page=2` say
    #[arg(long, value_name = "K=V[&K=V…]", requires = "key_in_number")]
    pub key_in_number_where: Option<String>,

    /// Append one JSON line per request to this file
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
}

/// What stops the stand-in: a sentence for stderr.
pub type Error = String;

fn main() -> ExitCode {
    let options = Options::parse();
    let served = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
        .and_then(|runtime| runtime.block_on(http::serve(options)));
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("portion-standin: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--slow TEXT=DURATION`.
fn slow(arg: &str) -> Result<(String, Duration), String> {
    let (text, wait) = arg
        .rsplit_once('=')
        .ok_or_else(|| format!("{arg:?}: want TEXT=DURATION"))?;
    let wait = humantime::parse_duration(wait).map_err(|e| format!("{wait:?}: {e}"))?;
    Ok((text.to_string(), wait))
}
