//! Costs settled from the response, end to end (issue 13, part 1): an LLM
//! job reserves an estimate of tokens before each call and settles it to
//! `usage.total_tokens` (or a header) after; a response that does not say
//! keeps the estimate, and the run says so; bad `{estimate, actual}` exits
//! 78 naming the field. And observe mode (issue 14, part 3) on the same
//! job: nothing the ledger says stops it, and it says what would have.

use crate::common::deployment::{Deployment, embedded_store, finish, kill, spawn};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;

/// A credential with a requests pool and a tokens pool of 1,000 a minute;
/// `chat` settles tokens from the body, `chat_h` from a header.
fn llm_yaml(store: &str, base: &str, regions: &str, model: &str, endpoint: &str) -> String {
    format!(
        r#"store: {store}
lock_ttl: 2s
http: {{ timeout: 5s, connect_timeout: 2s, retries: 1, backoff: 20ms }}
credentials:
  llm:
    secret: {{ file: key }}
    pools:
      requests: [{{ limit: 100, per: 1m }}]
      tokens: [{{ limit: 1000, per: 1m }}]
endpoints:
  chat:
    cost:
      requests: 1
      tokens: {{ estimate: 200, actual: /usage/total_tokens }}
  chat_h:
    cost:
      requests: 1
      tokens: {{ estimate: 200, actual: {{ header: X-Usage-Tokens }} }}
jobs:
  ask:
    credential: llm
    regions: [{regions}]
    steps:
      - endpoint: {endpoint}
        request:
          method: POST
          url: "{base}/chat"
          headers: {{ Authorization: "Bearer {{secret}}" }}
          body: {{ model: {model}, messages: [{{ role: user, content: "{{region}}" }}] }}
    output: out/ask
"#
    )
}

/// Units used in the 1 m window of pool `pool`, from `status --json`.
fn used(d: &Deployment, pool: &str) -> u64 {
    window(d, pool, "used")
}

/// Units of `used` reserved at their estimate, not settled yet.
fn reserved(d: &Deployment, pool: &str) -> u64 {
    window(d, pool, "reserved")
}

/// Field `field` of the 1 m window of pool `pool`, from `status --json`.
fn window(d: &Deployment, pool: &str, field: &str) -> u64 {
    let s = d.status_json();
    let pools = s["credentials"][0]["pools"].as_array().expect("pools");
    let p = pools.iter().find(|p| p["pool"] == pool).expect("pool");
    p["windows"][0][field].as_u64().expect(field)
}

fn deployment(up: &Standin, regions: &str, model: &str, endpoint: &str) -> Deployment {
    let d = Deployment::new("");
    let yaml = llm_yaml(&embedded_store(&d), &up.base(), regions, model, endpoint);
    d.write(&yaml);
    d
}

#[test]
fn tokens_are_settled_to_what_the_response_reports() {
    let up = Standin::start(&[]);
    // "hi" is 2 + 7 tokens, "hello world" 11 + 7: 27, not 2 x 200.
    for endpoint in ["chat", "chat_h"] {
        let d = deployment(&up, r#""hi", "hello world""#, "m", endpoint);
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 0, "{endpoint}: {r:?}");
        assert_eq!(used(&d, "tokens"), 27, "{endpoint}");
        assert_eq!(reserved(&d, "tokens"), 0, "{endpoint}: all settled");
        assert_eq!(used(&d, "requests"), 2, "{endpoint}");
        assert!(
            r.stderr.contains("spent requests 2, tokens 27"),
            "{endpoint}: {}",
            r.stderr
        );
    }
}

#[test]
fn settled_tokens_leave_room_that_estimates_alone_would_not() {
    let up = Standin::start(&[]);
    // Ten calls reserve 200 each: 2,000 would not fit 1,000 a minute, but
    // each settles to 9 before the next is charged.
    let regions: Vec<String> = (0..10).map(|k| format!("q{k}")).collect();
    let regions = regions.join(", ");
    let d = deployment(&up, &regions, "m", "chat");
    // The plan counts estimates: it promises no more than 5 calls.
    let plan = d.portion(&["run", "--dry-run"]);
    assert!(
        plan.stdout.contains("tokens 2000") && plan.stdout.contains("after 5 calls"),
        "{plan:?}"
    );
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(used(&d, "tokens"), 90);
    assert_eq!(up.seen().len(), 10);
}

#[test]
fn a_response_that_does_not_say_keeps_the_estimate_and_the_run_says_so() {
    let up = Standin::start(&[]);
    let d = deployment(&up, r#""hi", "hello""#, "silent", "chat");
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(used(&d, "tokens"), 400);
    assert_eq!(reserved(&d, "tokens"), 0, "settled at the estimate");
    assert!(
        r.stderr
            .contains("nothing at /usage/total_tokens in the body")
            && r.stderr
                .contains("the estimate of 200 tokens stays charged"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("(2 at their estimate)"), "{}", r.stderr);
}

/// An actual above every budget of its pool is recorded as the pool's
/// largest budget plus one, and the run says so (issue 23, item 1): 107
/// tokens on a pool of 100 count as 101, keeping the call over budget
/// until it leaves, and no window can be carried past 2^53.
#[test]
fn an_actual_above_every_budget_is_recorded_as_the_largest_plus_one() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let region = "q".repeat(100);
    let yaml = llm_yaml(&embedded_store(&d), &up.base(), &region, "m", "chat")
        .replace(
            "tokens: [{ limit: 1000, per: 1m }]",
            "tokens: [{ limit: 100, per: 1m }]",
        )
        .replace(
            "estimate: 200, actual: /usage",
            "estimate: 50, actual: /usage",
        );
    d.write(&yaml);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains(
            "tokens: an actual of 107 units is above every budget of the pool: recorded as 101"
        ),
        "{}",
        r.stderr
    );
    assert_eq!(used(&d, "tokens"), 101);
}

/// A run killed while its call is in flight never settles it: `status`
/// shows its estimate as reserved (in both stores), which the run after
/// does not settle either.
#[test]
fn a_killed_runs_estimate_shows_as_reserved() {
    let up = Standin::start(&["--delay", "20s"]);
    let server = RedisServer::start();
    for store in ["embedded", "redis"] {
        let d = Deployment::new("");
        let url = match store {
            "redis" => server.url(),
            _ => embedded_store(&d),
        };
        d.write(&llm_yaml(&url, &up.base(), r#""hi""#, "m", "chat"));
        let before = up.seen().len();
        let run = spawn(&mut d.cmd(&["run"]));
        up.wait_for(before + 1);
        kill("-KILL", run.id());
        let killed = finish(run);
        assert_eq!(killed.code, -1, "{store}: killed: {killed:?}");
        assert_eq!(used(&d, "tokens"), 200, "{store}");
        assert_eq!(
            reserved(&d, "tokens"),
            200,
            "{store}: the estimate, reserved"
        );
        assert_eq!(reserved(&d, "requests"), 0, "{store}: a fixed cost");
        let text = d.portion(&["status"]);
        assert!(
            text.stdout.contains("200 (200 reserved)"),
            "{store}: {text:?}"
        );
        let metrics = d.portion(&["status", "--format", "openmetrics"]).stdout;
        let line =
            r#"portion_window_reserved_units{credential="llm",pool="tokens",window="1m"} 200"#;
        assert!(metrics.lines().any(|l| l == line), "{store}: {metrics}");
    }
}

#[test]
fn tokens_are_settled_in_redis_too() {
    let up = Standin::start(&[]);
    let server = RedisServer::start();
    let d = Deployment::new("");
    d.write(&llm_yaml(
        &server.url(),
        &up.base(),
        r#""hi", "hello world""#,
        "m",
        "chat",
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(used(&d, "tokens"), 27);
}

#[test]
fn a_bad_settled_cost_exits_78_naming_the_field_and_charges_nothing() {
    let up = Standin::start(&[]);
    let good = "tokens: { estimate: 200, actual: /usage/total_tokens }";
    let cases = [
        (
            "tokens: { estimate: 200, actual: usage/total_tokens }",
            "endpoints.chat.cost.tokens.actual",
            "not a JSON pointer",
        ),
        (
            "tokens: { actual: /usage/total_tokens }",
            "endpoints.chat.cost.tokens",
            "no estimate",
        ),
        (
            "tokens: { estimate: 0, actual: /usage/total_tokens }",
            "endpoints.chat.cost.tokens.estimate",
            "not positive",
        ),
        (
            "tokens: { estimate: 200, actual: /u, extra: 1 }",
            "endpoints.chat.cost.tokens",
            "unknown key",
        ),
        (
            "tokens: { estimate: 200, actual: { header: \"bad header\" } }",
            "endpoints.chat.cost.tokens.actual",
            "valid header name",
        ),
    ];
    for (bad, field, why) in cases {
        let d = deployment(&up, "\"hi\"", "m", "chat");
        let yaml = std::fs::read_to_string(d.config()).unwrap();
        assert!(yaml.contains(good));
        d.write(&yaml.replacen(good, bad, 1));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 78, "{bad}: {r:?}");
        assert!(
            r.stderr.contains(field) && r.stderr.contains(why) && r.stderr.contains("portion.yaml"),
            "{bad}: {}",
            r.stderr
        );
    }
    assert!(up.seen().is_empty(), "nothing sent");
}

#[test]
fn observe_mode_sends_every_call_and_says_how_many_would_have_stopped() {
    let up = Standin::start(&[]);
    let regions: Vec<String> = (0..5).map(|k| format!("q{k}")).collect();
    let d = deployment(&up, &regions.join(", "), "m", "chat");
    let yaml = std::fs::read_to_string(d.config()).unwrap();
    // 2 requests a minute: enforce mode stops at the third call.
    let small = yaml.replace(
        "requests: [{ limit: 100, per: 1m }]",
        "requests: [{ limit: 2, per: 1m }]",
    );
    assert_ne!(small, yaml);
    d.write(&small);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert_eq!(up.seen().len(), 2);
    // The same on a store of its own, in observe mode.
    let d = deployment(&up, &regions.join(", "), "m", "chat");
    let yaml = std::fs::read_to_string(d.config()).unwrap();
    let small = yaml.replace(
        "requests: [{ limit: 100, per: 1m }]",
        "requests: [{ limit: 2, per: 1m }]",
    );
    d.write(&small.replace("  llm:\n", "  llm:\n    mode: observe\n"));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(up.seen().len(), 2 + 5, "every call sent");
    assert!(
        r.stderr.contains("(3 OBSERVED: the ledger would have stopped them)")
            && r.stderr.contains("observe mode: chat would have been stopped here (the 1m window of pool requests is full"),
        "{}",
        r.stderr
    );
    let s = d.status_json();
    let pools = s["credentials"][0]["pools"].as_array().unwrap();
    let requests = pools.iter().find(|p| p["pool"] == "requests").unwrap();
    assert_eq!(requests["observed_rejections"], 3);
    assert!(requests["observed_at"].is_string());
    assert_eq!(used(&d, "requests"), 5, "recorded above the budget");
    // A mode that is neither: 78, naming the field.
    d.write(&small.replace("  llm:\n", "  llm:\n    mode: watch\n"));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 78, "{r:?}");
    assert!(r.stderr.contains("credentials.llm.mode"), "{}", r.stderr);
}

#[test]
fn others_usage_is_read_against_the_settled_count_not_the_estimate() {
    // The upstream's tokens minute is the pool's (1,000): others spent 100.
    // After the first call (estimate 200, actual 9) it says 891 remain;
    // the charge's own count, at the estimate, said 800 remained: only
    // against the settled count (991) does the difference show.
    let up = Standin::start(&["--llm-tokens", "1000", "--llm-used-tokens", "100"]);
    let d = Deployment::new("");
    let yaml = llm_yaml(&embedded_store(&d), &up.base(), "\"hi\"", "m", "chat").replace(
        "    secret: { file: key }\n",
        "    secret: { file: key }\n    upstream_headers: { tokens: { remaining: x-ratelimit-remaining-tokens, limit: x-ratelimit-limit-tokens } }\n",
    );
    d.write(&yaml);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let s = d.status_json();
    let pools = s["credentials"][0]["pools"].as_array().unwrap();
    let tokens = &pools.iter().find(|p| p["pool"] == "tokens").unwrap()["windows"][0];
    assert_eq!(
        (tokens["used"].as_u64(), tokens["others"].as_u64()),
        (Some(9), Some(100)),
        "{tokens}"
    );
}

#[test]
fn a_bad_upstream_headers_exits_78_naming_the_field() {
    let up = Standin::start(&[]);
    for (value, why) in [
        ("githab", "expected github, openai, ietf"),
        ("{ nopool: { remaining: x-left } }", "no pool nopool"),
        ("{ tokens: { reset: x-reset } }", "no remaining header"),
        (
            "{ tokens: { remaining: \"bad header\" } }",
            "expected a header name",
        ),
        ("github", "apply to the pool named requests"),
    ] {
        let d = Deployment::new("");
        let yaml = llm_yaml(&embedded_store(&d), &up.base(), "\"hi\"", "m", "chat");
        // (github needs a pool named requests or a single pool: this
        // credential has requests and tokens, so it resolves; make it fail
        // by renaming requests)
        let yaml = if value == "github" {
            yaml.replace("      requests: [", "      calls: [")
                .replace("      requests: 1\n", "      calls: 1\n")
        } else {
            yaml
        };
        d.write(&yaml.replace(
            "    secret: { file: key }\n",
            &format!("    secret: {{ file: key }}\n    upstream_headers: {value}\n"),
        ));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 78, "{value}: {r:?}");
        assert!(
            r.stderr.contains("portion.yaml")
                && r.stderr.contains("credentials.llm.upstream_headers")
                && r.stderr.contains(why),
            "{value}: {}",
            r.stderr
        );
    }
    assert!(up.seen().is_empty());
}
