//! The example jobs of `jobs/` (`github.yaml`, `llm.yaml`, `graphql.yaml`,
//! `backfill.yaml`), as shipped, run end to end against the stand-in (issue
//! 13, part 6; the once-jobs of inputs, issue 25, part 5): the
//! requests each sends, the pages it writes, the units it charges (settled,
//! from `status --json`), its exit code, and that a budget too small for it
//! stops it (75) and the next run resumes where it stopped. Also what the
//! stand-in's imitations report of usage made outside `portion` (its
//! rate-limit headers), which `portion` does not read yet.

use std::io::{Read, Write};

use crate::common::deployment::{Deployment, embedded_store};
use crate::common::redis::RedisServer;
use crate::common::standin::{Seen, Standin};

/// `jobs/NAME.yaml` as shipped, with `origin` (the real API's) pointed at
/// the stand-in `base`, the secret read from the deployment's `key` file
/// (`secret_env` named the variable), pages under `out/`, `store` first,
/// and every `(from, to)` of `edits` applied (each must be in the file).
fn example(
    name: &str,
    origin: &str,
    secret_env: &str,
    base: &str,
    store: &str,
    edits: &[(&str, &str)],
) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut text = std::fs::read_to_string(format!("{root}/jobs/{name}.yaml")).unwrap();
    let secret = format!("{{ env: {secret_env} }}");
    for needle in [origin, secret.as_str(), "../out/"] {
        assert!(text.contains(needle), "jobs/{name}.yaml: no {needle}");
    }
    for (from, to) in edits {
        assert!(text.contains(from), "jobs/{name}.yaml changed: no {from}");
        text = text.replace(from, to);
    }
    format!(
        "store: {store}\n{}",
        text.replace(origin, base)
            .replace(&secret, "{ file: key }")
            .replace("../out/", "out/")
    )
}

/// `jobs/FILE` (an example's inputs) copied beside the deployment's config,
/// where its `inputs: { file }` is read.
fn inputs_beside(d: &Deployment, file: &str) {
    let root = env!("CARGO_MANIFEST_DIR");
    std::fs::copy(format!("{root}/jobs/{file}"), d.path().join(file)).unwrap();
}

/// Units used in pool `pool`'s window of `per_seconds`, from `status --json`.
fn used(d: &Deployment, pool: &str, per_seconds: u64) -> u64 {
    let s = d.status_json();
    let pools = s["credentials"][0]["pools"].as_array().expect("pools");
    let p = pools.iter().find(|p| p["pool"] == pool).expect("pool");
    let windows = p["windows"].as_array().expect("windows");
    let w = windows
        .iter()
        .find(|w| w["per_seconds"] == per_seconds)
        .expect("window");
    w["used"].as_u64().expect("used")
}

/// One raw HTTP/1.1 request to the stand-in: the answer's head (lower-case
/// header names) and body.
fn http(
    up: &Standin,
    method: &str,
    target: &str,
    headers: &[&str],
    body: &str,
) -> (String, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", up.port)).unwrap();
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for h in headers {
        req.push_str(&format!("{h}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    (head.to_ascii_lowercase(), body.to_string())
}

/// The value of header `name` (lower case) in a head from [`http`].
fn header<'h>(head: &'h str, name: &str) -> &'h str {
    head.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .unwrap_or_else(|| panic!("no {name} in {head}"))
}

// ---- GitHub ------------------------------------------------------------

const GITHUB: &str = "https://api.github.com";
const REPOS: [&str; 3] = ["rust-lang/rust", "tokio-rs/tokio", "redis/redis"];
const GITHUB_HOUR: &str = "{ limit: 5000, per: 1h, headroom: 10% }";

fn github(d: &Deployment, up: &Standin, edits: &[(&str, &str)]) -> String {
    example(
        "github",
        GITHUB,
        "GITHUB_TOKEN",
        &up.base(),
        &embedded_store(d),
        edits,
    )
}

/// (repository, page) of each request seen.
fn walked(seen: &[Seen]) -> Vec<(String, u32)> {
    seen.iter().map(|s| (s.region.clone(), s.page)).collect()
}

fn full_github_walk() -> Vec<(String, u32)> {
    REPOS
        .iter()
        .flat_map(|r| (1..=3).map(move |p| (r.to_string(), p)))
        .collect()
}

#[test]
fn the_github_example_walks_each_repository_by_its_link_pages() {
    let up = Standin::start(&["--pages", "3", "--items", "5", "--github-used", "1200"]);
    let d = Deployment::new("");
    d.write(&github(&d, &up, &[]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");

    let seen = up.seen();
    assert_eq!(walked(&seen), full_github_walk());
    for s in &seen {
        assert_eq!((s.method.as_str(), s.status), ("GET", 200), "{s:?}");
        let query = s.query.as_deref().unwrap_or_default();
        assert!(query.starts_with("state=open&per_page=100"), "{query}");
    }
    assert_eq!(d.outputs("github-issues").len(), 9);
    assert_eq!(used(&d, "requests", 3600), 9);
    // upstream_headers: github. The first answer said 3,799 remain where
    // the ledger counted 1 call: 1,200 spent elsewhere, until the reset.
    let s = d.status_json();
    let hour = &s["credentials"][0]["pools"][0]["windows"][0];
    assert_eq!(hour["others"], 1200, "{hour}");
    assert_eq!(hour["remaining"], 4500 - 9 - 1200, "{hour}");
    assert!(hour["others_until"].is_string(), "{hour}");

    // The stand-in counts what others spent from the token too: 1,200 at
    // its start, 9 by portion, and this request.
    let (head, _) = http(
        &up,
        "GET",
        "/repos/a/b/issues",
        &["Authorization: Bearer demo-key"],
        "",
    );
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert_eq!(header(&head, "x-ratelimit-limit"), "5000");
    assert_eq!(header(&head, "x-ratelimit-used"), "1210");
    assert_eq!(header(&head, "x-ratelimit-remaining"), "3790");
    let reset: u64 = header(&head, "x-ratelimit-reset").parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(reset > now && reset <= now + 3600, "{reset} vs {now}");
}

#[test]
fn the_github_example_stops_on_a_small_budget_and_resumes_where_it_stopped() {
    let up = Standin::start(&["--pages", "3", "--items", "5"]);
    let d = Deployment::new("");
    d.write(&github(&d, &up, &[(GITHUB_HOUR, "{ limit: 4, per: 1h }")]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert_eq!(walked(&up.seen()), full_github_walk()[..4]);
    assert_eq!(d.outputs("github-issues").len(), 4);

    // The next run starts at tokio's 2nd page and serves every repository
    // once, wrapping around to rust-lang/rust (guarantee 3), whose page 1,
    // unchanged since the first run (`conditional`), answers 304: nothing
    // written, and its unit given back (`not_modified: 0`).
    d.write(&github(&d, &up, &[]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let full = full_github_walk();
    let seen = up.seen();
    assert_eq!(walked(&seen[4..]), [&full[4..], &full[..1]].concat());
    assert_eq!(seen.last().unwrap().status, 304);
    assert_eq!(d.outputs("github-issues").len(), 9);
    assert_eq!(used(&d, "requests", 3600), 9);
}

/// An answer whose reset is absurd (a century on, or a time in
/// milliseconds read as seconds) counts others' units no longer than the
/// pool's longest window: the token's hour, not millennia.
#[test]
fn others_units_never_outlast_the_pools_longest_window() {
    let up = Standin::start(&[
        "--pages",
        "1",
        "--items",
        "5",
        "--github-used",
        "4996",
        "--github-reset",
        "99999999999999",
    ]);
    let d = Deployment::new("");
    d.write(&github(&d, &up, &[]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    let s = d.status_json();
    let hour = &s["credentials"][0]["pools"][0]["windows"][0];
    assert_eq!(hour["others"].as_u64(), Some(4996), "{hour}");
    let until = chrono::DateTime::parse_from_rfc3339(hour["others_until"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {hour}"));
    let left = until.signed_duration_since(chrono::Utc::now());
    assert!(
        left <= chrono::TimeDelta::hours(1) && left > chrono::TimeDelta::minutes(55),
        "others counted until {until}: {hour}"
    );
    // The stop names a time within the hour, not a panic or millennia.
    let again = d.portion(&["run"]);
    assert_eq!(again.code, 75, "{again:?}");
}

/// A later period's answer that counts no more than the ledger clears the
/// units the ledger counts as spent by others (issue 23, item 8): the
/// charge's `remaining` includes them, so a count compared with it alone
/// never reached the store.
#[test]
fn a_later_higher_count_clears_others_units() {
    let d = Deployment::new("");
    a_later_higher_count_clears(&embedded_store(&d), &d);
    let server = RedisServer::start();
    a_later_higher_count_clears(&server.url(), &Deployment::new(""));
}

fn a_later_higher_count_clears(store: &str, d: &Deployment) {
    let hour = "{ limit: 100, per: 1h }";
    let one_repo = (
        "regions: [rust-lang/rust, tokio-rs/tokio, redis/redis]",
        "regions: [a/b]",
    );
    let yaml = |up: &Standin| {
        let text = example(
            "github",
            GITHUB,
            "GITHUB_TOKEN",
            &up.base(),
            store,
            &[(GITHUB_HOUR, hour), one_repo],
        );
        d.write(&text);
    };
    let window = || d.status_json()["credentials"][0]["pools"][0]["windows"][0].clone();
    // (each stand-in's period has its own reset: the second a later one)
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (first_reset, second_reset) = ((now + 1200).to_string(), (now + 2400).to_string());
    // Others spent 89 of the token's 100: the first answer says 10 remain.
    let up = Standin::start(&[
        "--pages",
        "1",
        "--github-limit",
        "100",
        "--github-used",
        "89",
        "--github-reset",
        &first_reset,
    ]);
    yaml(&up);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let w = window();
    assert_eq!(
        (w["used"].as_u64(), w["others"].as_u64()),
        (Some(1), Some(89)),
        "{w}"
    );

    // The token's count reset (a new period): 99 remain after the next
    // call, more than the ledger's 100 - 2 - 89. Within the first period
    // the same higher count would be a stale one (`run_counts`).
    let up = Standin::start(&[
        "--pages",
        "1",
        "--github-limit",
        "100",
        "--github-reset",
        &second_reset,
    ]);
    yaml(&up);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let w = window();
    assert_eq!(w["used"].as_u64(), Some(2), "{w}");
    assert_eq!(w["others"].as_u64().unwrap_or(0), 0, "{w}");
    assert_eq!(w["remaining"].as_u64(), Some(98), "{w}");
}

#[test]
fn the_github_example_stops_when_others_have_spent_the_token() {
    // Others spent 4,996 of the 5,000. The first answer says so (3 remain
    // after portion's one call): the ledger records 4,996 spent by others,
    // more than the 4,500 budget leaves, so portion stops itself (75) before
    // GitHub has to refuse anything; the next run sends nothing either.
    let up = Standin::start(&["--pages", "3", "--items", "5", "--github-used", "4996"]);
    let d = Deployment::new("");
    d.write(&github(&d, &up, &[]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(r.stderr.contains("4996 spent elsewhere"), "{}", r.stderr);
    let statuses: Vec<u16> = up.seen().iter().map(|s| s.status).collect();
    assert_eq!(statuses, [200], "no 403 needed");
    let s = d.status_json();
    let hour = &s["credentials"][0]["pools"][0]["windows"][0];
    assert_eq!(
        (hour["used"].as_u64(), hour["others"].as_u64()),
        (Some(1), Some(4996))
    );
    assert_eq!(hour["remaining"], 0);
    assert_eq!(d.portion(&["run"]).code, 75);
    assert_eq!(up.seen().len(), 1);

    // Without upstream_headers, the ledger cannot foresee it, but the 4th
    // answer, a 200 with X-RateLimit-Remaining: 0, blocks the credential
    // until the reset: the run stops there, no 403 needed (issue 38).
    let up = Standin::start(&["--pages", "3", "--items", "5", "--github-used", "4996"]);
    let d = Deployment::new("");
    d.write(&github(
        &d,
        &up,
        &[(
            "    upstream_headers: github     # X-RateLimit-Remaining / X-RateLimit-Reset\n",
            "",
        )],
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    let statuses: Vec<u16> = up.seen().iter().map(|s| s.status).collect();
    assert_eq!(statuses, [200, 200, 200, 200]);
    assert!(
        r.stderr
            .contains("answered 200 with X-RateLimit-Remaining: 0"),
        "{r:?}"
    );
    let s = d.status_json();
    assert!(!s["credentials"][0]["blocked_until"].is_null(), "{s}");
}

// ---- The LLM batch -------------------------------------------------------

const OPENAI: &str = "https://api.openai.com";
const TOPICS: [&str; 5] = ["rust", "redis", "sqlite", "systemd", "http"];
const LLM_REQUESTS: &str = "{ limit: 500, per: 1m, headroom: 10% }";
const LLM_TOKENS: &str = "{ limit: 200000, per: 1m, headroom: 10% }";

/// The example's wait for refused units inside a run.
const LLM_WAIT: &str = "max_wait: 10m";

/// jobs/llm.yaml against the stand-in, with `edits`; a run that meets a
/// refusal stops (75) unless the edits keep the example's `max_wait`
/// ([`llm_waiting`]).
fn llm(d: &Deployment, up: &Standin, edits: &[(&str, &str)]) -> String {
    let mut all = vec![(LLM_WAIT, "max_wait: 0s")];
    all.extend_from_slice(edits);
    llm_waiting(d, up, &all)
}

/// jobs/llm.yaml against the stand-in, with `edits`, as it is otherwise.
fn llm_waiting(d: &Deployment, up: &Standin, edits: &[(&str, &str)]) -> String {
    inputs_beside(d, "prompts.jsonl");
    example(
        "llm",
        OPENAI,
        "OPENAI_API_KEY",
        &up.base(),
        &embedded_store(d),
        edits,
    )
}

/// The stand-in's tokens for topic `t`: the characters of both messages
/// ("You answer in one sentence." and "What is T?") and 7 of completion.
fn tokens(t: &str) -> u64 {
    27 + 9 + t.len() as u64 + 7
}

/// The topic each request asked about.
fn asked(seen: &[Seen]) -> Vec<String> {
    seen.iter()
        .map(|s| {
            let body = s.body.as_ref().expect("a JSON body");
            let q = body["messages"][1]["content"].as_str().unwrap();
            q.strip_prefix("What is ")
                .and_then(|q| q.strip_suffix('?'))
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn the_llm_example_settles_tokens_to_what_each_answer_used() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    d.write(&llm(&d, &up, &[]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");

    let seen = up.seen();
    assert_eq!(asked(&seen), TOPICS);
    for s in &seen {
        assert_eq!(
            (s.method.as_str(), s.path.as_str(), s.status),
            ("POST", "/v1/chat/completions", 200)
        );
        let body = s.body.as_ref().unwrap();
        assert_eq!(body["model"], "gpt-4o-mini");
        assert_eq!(body["max_tokens"], 200);
        assert_eq!(body["messages"][0]["role"], "system");
    }
    assert_eq!(d.outputs("llm").len(), 5);
    let want: u64 = TOPICS.iter().map(|t| tokens(t)).sum();
    assert_eq!(want, 241);
    assert_eq!(used(&d, "tokens", 60), want, "settled, not 5 x 400");
    assert_eq!(used(&d, "tokens", 86400), want);
    assert_eq!(used(&d, "requests", 60), 5);
    // One row per prompt, keyed by its id, with its answer.
    let db = rusqlite::Connection::open(d.path().join("out/llm.db")).unwrap();
    let rows: Vec<(String, String, i64)> = db
        .prepare("SELECT key, input, json_extract(item, '$.usage.total_tokens') FROM summaries ORDER BY key")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut topics = TOPICS.to_vec();
    topics.sort();
    let want: Vec<(String, String, i64)> = topics
        .iter()
        .map(|t| (t.to_string(), t.to_string(), tokens(t) as i64))
        .collect();
    assert_eq!(rows, want);

    // A once-job: every prompt is done, the next run sends nothing.
    let r = d.portion(&["run"]);
    assert_eq!((r.code, up.seen().len()), (0, 5), "{r:?}");
}

/// The example as it is waits for refused units inside the run: a budget
/// of 2 requests every 2 s takes its 5 prompts in one run (0), each once,
/// where without its `max_wait` the run stops at the 3rd (75).
#[test]
fn the_llm_example_waits_for_its_budget_inside_one_run() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let small = [(LLM_REQUESTS, "{ limit: 2, per: 2s }")];
    let yaml = llm_waiting(&d, &up, &small);
    assert!(yaml.contains(LLM_WAIT), "{yaml}");
    d.write(&yaml);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("window is full: waiting"), "{r:?}");
    assert_eq!(asked(&up.seen()), TOPICS);
    assert_eq!(d.outputs("llm").len(), 5);
}

#[test]
fn the_llm_example_stops_on_a_small_request_budget_and_resumes() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    d.write(&llm(&d, &up, &[(LLM_REQUESTS, "{ limit: 2, per: 1m }")]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert_eq!(asked(&up.seen()), TOPICS[..2]);

    // The next run starts at the 3rd prompt and asks the rest, each once
    // ever: no wrapping around, and a third run sends nothing.
    d.write(&llm(&d, &up, &[]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(asked(&up.seen()[2..]), TOPICS[2..]);
    assert_eq!(d.outputs("llm").len(), 5);
    assert_eq!(used(&d, "tokens", 60), 241);
    assert_eq!(used(&d, "requests", 60), 5);
    let r = d.portion(&["run"]);
    assert_eq!((r.code, up.seen().len()), (0, 5), "{r:?}");
}

#[test]
fn the_llm_examples_settled_tokens_leave_room_that_estimates_would_not() {
    // 500 tokens a minute: one estimate of 400 at a time. Settled, the calls
    // cost 47, 48 and 49, so a 2nd and 3rd estimate fit; a 4th does not.
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    d.write(&llm(&d, &up, &[(LLM_TOKENS, "{ limit: 500, per: 1m }")]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert_eq!(asked(&up.seen()), TOPICS[..3]);
    assert_eq!(used(&d, "tokens", 60), 47 + 48 + 49);
    assert_eq!(used(&d, "requests", 60), 3);
}

#[test]
fn the_llm_stand_in_counts_usage_made_outside_quota_and_answers_429_when_spent() {
    // Others spent 7 of 10 requests and 1,000 tokens this minute: the 3rd
    // answer, a 200, says no request remains, which blocks the credential
    // (the stand-in would answer the next 429, as asked directly below).
    let up = Standin::start(&[
        "--llm-requests",
        "10",
        "--llm-used-requests",
        "7",
        "--llm-used-tokens",
        "1000",
    ]);
    let d = Deployment::new("");
    d.write(&llm(&d, &up, &[]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    let statuses: Vec<u16> = up.seen().iter().map(|s| s.status).collect();
    assert_eq!(statuses, [200, 200, 200]);
    let s = d.status_json();
    assert!(!s["credentials"][0]["blocked_until"].is_null(), "{s}");

    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let auth = [
        "Authorization: Bearer demo-key",
        "Content-Type: application/json",
    ];
    let (head, answer) = http(&up, "POST", "/v1/chat/completions", &auth, body);
    assert!(head.starts_with("http/1.1 429"), "{head}");
    assert!(answer.contains("rate_limit_exceeded"), "{answer}");
    assert_eq!(header(&head, "x-ratelimit-remaining-requests"), "0");
    let spent = 1000 + tokens("rust") + tokens("redis") + tokens("sqlite");
    assert_eq!(
        header(&head, "x-ratelimit-remaining-tokens"),
        (10_000_000 - spent).to_string()
    );
    assert!(header(&head, "x-ratelimit-reset-requests").ends_with('s'));
    let retry: u64 = header(&head, "retry-after").parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
}

#[test]
fn the_llm_example_slows_down_for_requests_others_made_with_the_key() {
    // The API's own minute is the pool's (500 requests): others made 450
    // of them. After portion's first call it says 49 remain: 450 spent
    // elsewhere, so the 450-request budget is spent and portion stops itself
    // (75) before the API has to refuse anything. Its tokens count is of
    // another limit (10,000,000 a minute) than the tokens pool's longest
    // window (5,000,000 a day): not applied.
    let up = Standin::start(&["--llm-requests", "500", "--llm-used-requests", "450"]);
    let d = Deployment::new("");
    d.write(&llm(&d, &up, &[]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    let statuses: Vec<u16> = up.seen().iter().map(|s| s.status).collect();
    assert_eq!(statuses, [200]);
    assert!(r.stderr.contains("450 spent elsewhere"), "{}", r.stderr);
    let s = d.status_json();
    let pools = s["credentials"][0]["pools"].as_array().unwrap();
    let minute = &pools.iter().find(|p| p["pool"] == "requests").unwrap()["windows"][0];
    assert_eq!(
        (minute["used"].as_u64(), minute["others"].as_u64()),
        (Some(1), Some(450))
    );
    let tokens = pools.iter().find(|p| p["pool"] == "tokens").unwrap();
    for w in tokens["windows"].as_array().unwrap() {
        assert!(w["others"].is_null(), "{w}");
    }
}

// ---- GraphQL -------------------------------------------------------------

const SHOP: &str = "https://example-shop.myshopify.com";
const VENDORS: [&str; 3] = ["acme", "globex", "initech"];
const POINTS: &str = "{ limit: 1000, per: 1m, headroom: 10% }";

fn graphql(store: &str, up: &Standin, edits: &[(&str, &str)]) -> String {
    example("graphql", SHOP, "SHOPIFY_TOKEN", &up.base(), store, edits)
}

/// (vendor, cursor) of each query seen.
fn queried(seen: &[Seen]) -> Vec<(String, Option<String>)> {
    seen.iter()
        .map(|s| {
            let body = s.body.as_ref().expect("a JSON body");
            assert_eq!(body["variables"]["first"], 10, "{body}");
            assert!(body["query"].as_str().unwrap().contains("pageInfo"));
            let url = reqwest::Url::parse(&format!(
                "http://x/?{}",
                s.query.clone().unwrap_or_default()
            ))
            .unwrap();
            let after = url
                .query_pairs()
                .find(|(k, _)| k == "after")
                .map(|(_, v)| v.into_owned());
            (s.region.clone(), after)
        })
        .collect()
}

/// 15 products a vendor, 10 a query: cursors none, c10, c15 (an empty page).
fn full_graphql_walk() -> Vec<(String, Option<String>)> {
    VENDORS
        .iter()
        .flat_map(|v| {
            [None, Some("c10"), Some("c15")].map(|c| (format!("vendor:{v}"), c.map(String::from)))
        })
        .collect()
}

fn graphql_end_to_end(store: &str, d: &Deployment) {
    let up = Standin::start(&["--pages", "3", "--items", "5"]);
    d.write(&graphql(store, &up, &[]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");

    let seen = up.seen();
    assert_eq!(queried(&seen), full_graphql_walk());
    assert!(seen.iter().all(|s| s.method == "POST" && s.status == 200));
    assert!(
        seen.iter()
            .all(|s| s.path == "/admin/api/2024-07/graphql.json")
    );
    let pages = d.outputs("graphql-products");
    assert_eq!(pages.len(), 9);
    // Each page is the answer: estimated 12, settled to 1 + its products.
    let first = pages
        .iter()
        .find(|p| p.contains(".acme.s0.p000000"))
        .unwrap();
    let text = std::fs::read_to_string(d.path().join("out/graphql-products").join(first)).unwrap();
    let page: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(page["extensions"]["cost"]["requestedQueryCost"], 12);
    assert_eq!(page["extensions"]["cost"]["actualQueryCost"], 11);
    assert_eq!(page["data"]["items"]["nodes"].as_array().unwrap().len(), 10);
    let throttle = &page["extensions"]["cost"]["throttleStatus"];
    assert_eq!(throttle["maximumAvailable"], 1000);
    assert_eq!(throttle["restoreRate"], 50);
    assert!(throttle["currentlyAvailable"].as_u64().unwrap() <= 989);
    // 11 + 6 + 1 a vendor, not 9 x 12.
    assert_eq!(used(d, "points", 60), 3 * 18);
}

#[test]
fn the_graphql_example_settles_points_to_the_actual_query_cost() {
    let d = Deployment::new("");
    graphql_end_to_end(&embedded_store(&d), &d);
}

#[test]
fn the_graphql_example_settles_points_in_redis_too() {
    let server = RedisServer::start();
    let d = Deployment::new("");
    graphql_end_to_end(&server.url(), &d);
}

#[test]
fn the_graphql_example_stops_on_a_small_budget_and_resumes() {
    // 30 points: reserve 12, settle to 11; 12 -> 6; 12 -> 1; 12 -> 11 (29
    // spent); the 5th estimate would make 41.
    let up = Standin::start(&["--pages", "3", "--items", "5"]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    d.write(&graphql(&store, &up, &[(POINTS, "{ limit: 30, per: 1m }")]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert_eq!(queried(&up.seen()), full_graphql_walk()[..4]);
    assert_eq!(used(&d, "points", 60), 29);

    // The next run goes on at globex's 2nd query and serves every vendor
    // once, wrapping around to acme (guarantee 3).
    d.write(&graphql(&store, &up, &[]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let full = full_graphql_walk();
    assert_eq!(queried(&up.seen()[4..]), [&full[4..], &full[..3]].concat());
    assert_eq!(d.outputs("graphql-products").len(), 12);
    assert_eq!(used(&d, "points", 60), 54 + 18);
}

#[test]
fn the_graphql_stand_in_checks_the_key_and_the_request() {
    let up = Standin::start(&[]);
    let json = "Content-Type: application/json";
    let query = r#"{"query":"{ items }","variables":{"first":3,"query":"v"}}"#;
    let (head, _) = http(
        &up,
        "POST",
        "/graphql",
        &[json, "X-Shopify-Access-Token: nope"],
        query,
    );
    assert!(head.starts_with("http/1.1 401"), "{head}");
    let (head, body) = http(
        &up,
        "POST",
        "/graphql",
        &[json, "Authorization: Bearer demo-key"],
        query,
    );
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["extensions"]["cost"]["requestedQueryCost"], 5);
    assert_eq!(body["extensions"]["cost"]["actualQueryCost"], 4);
    assert_eq!(body["data"]["items"]["pageInfo"]["endCursor"], "c3");
    assert_eq!(body["data"]["items"]["pageInfo"]["hasNextPage"], true);
    let token = "X-Shopify-Access-Token: demo-key";
    for bad in [
        r#"{"variables":{}}"#,
        r#"{"query":"q","variables":{"first":0}}"#,
        "not json",
    ] {
        let (head, _) = http(&up, "POST", "/graphql", &[json, token], bad);
        assert!(head.starts_with("http/1.1 400"), "{bad}: {head}");
    }
    let (head, _) = http(&up, "POST", "/graphql?after=zz", &[json, token], query);
    assert!(head.starts_with("http/1.1 400"), "{head}");
}

// ---- The YouTube backfill ------------------------------------------------

const GOOGLE: &str = "https://www.googleapis.com";
const BACKFILL_HOUR: &str = "{ limit: 2000, per: 1h }";

fn backfill(d: &Deployment, up: &Standin, edits: &[(&str, &str)]) -> String {
    inputs_beside(d, "video_ids.txt");
    example(
        "backfill",
        GOOGLE,
        "YT_API_KEY",
        &up.base(),
        &embedded_store(d),
        edits,
    )
}

/// The ids of `jobs/video_ids.txt`, in order.
fn video_ids() -> Vec<String> {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/jobs/video_ids.txt")).unwrap();
    text.lines().map(String::from).collect()
}

/// The video id each request asked for (`id=`), and checks its shape.
fn fetched(seen: &[Seen]) -> Vec<String> {
    seen.iter()
        .map(|s| {
            assert_eq!((s.path.as_str(), s.status), ("/youtube/v3/videos", 200));
            let url = format!("http://x/?{}", s.query.clone().unwrap_or_default());
            let url = reqwest::Url::parse(&url).unwrap();
            let q: std::collections::HashMap<_, _> = url.query_pairs().into_owned().collect();
            assert_eq!(q["part"], "snippet,statistics", "{q:?}");
            q["id"].clone()
        })
        .collect()
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

/// The ids of each request, from its `id=` (a comma-separated batch).
fn batches(seen: &[Seen]) -> Vec<Vec<String>> {
    fetched(seen)
        .iter()
        .map(|ids| ids.split(',').map(String::from).collect())
        .collect()
}

#[test]
fn the_backfill_example_fetches_each_video_once_ever_50_a_call() {
    let up = Standin::start(&["--pages", "1", "--items", "1"]);
    let d = Deployment::new("");
    d.write(&backfill(&d, &up, &[]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let ids = video_ids();
    assert_eq!(ids.len(), 300);
    // 50 ids a call (inputs.batch), 6 calls: each id once, the file's
    // batches in any order (concurrency 4).
    let sent = batches(&up.seen());
    assert_eq!(sent.len(), 6, "{sent:?}");
    let mut want: Vec<Vec<String>> = ids.chunks(50).map(<[String]>::to_vec).collect();
    let mut got = sent.clone();
    want.sort();
    got.sort();
    assert_eq!(got, want, "each batch the file's next 50 ids");
    // One page a batch, holding one item per id asked.
    let pages = d.outputs("video-details");
    assert_eq!(pages.len(), 6);
    for p in &pages {
        let path = d.path().join("out/video-details").join(p);
        let page: serde_json::Value =
            serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        assert_eq!(page["items"].as_array().map(Vec::len), Some(50), "{p:?}");
    }
    assert_eq!(used(&d, "units", 3600), 6);
    let progress = &d.status_json()["credentials"][0]["jobs"][0]["inputs"];
    assert_eq!(
        (progress["done"].as_u64(), progress["left"].as_u64()),
        (Some(300), Some(0)),
        "{progress}"
    );

    let r = d.portion(&["run"]);
    assert_eq!((r.code, up.seen().len()), (0, 6), "nothing left: {r:?}");
}

#[test]
fn the_backfill_example_stops_on_its_pacing_window_and_the_next_tick_goes_on() {
    let up = Standin::start(&["--pages", "1", "--items", "1"]);
    let d = Deployment::new("");
    d.write(&backfill(
        &d,
        &up,
        &[(BACKFILL_HOUR, "{ limit: 3, per: 1h }")],
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    let first = batches(&up.seen());
    assert_eq!(first.len(), 3);
    assert_eq!(first.concat().len(), 150);

    d.write(&backfill(&d, &up, &[]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let all = batches(&up.seen());
    assert_eq!(all.len(), 6);
    assert_eq!(
        sorted(all.concat()),
        sorted(video_ids()),
        "each id once, none skipped"
    );
    assert_eq!(d.outputs("video-details").len(), 6);
}
