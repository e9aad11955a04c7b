//! contrib/: the Prometheus alerting rules and the Grafana dashboard, over
//! the names the tool really writes. Each test makes real output (`portion
//! status --format openmetrics` and `portion run --metrics-file` after a run
//! the quota stopped, a blocked credential, a configuration error and a
//! Redis that lost its log), then `promtool test rules` feeds it through the
//! rules, and the dashboard's and rules' queries are checked to name only
//! metrics the output has. promtool is Debian's package `prometheus`; a
//! machine without it fails here (`.ci/run` installs it).

use std::collections::BTreeSet;
use std::process::Command;

use portion::ledger::{At, EmbeddedLedger, Ledger};
use serde_json::{Value, json};

use crate::common::deployment::{Deployment, trending_with};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Real output, each with the `instance` label its series get in the test.
struct Outputs {
    /// (instance, OpenMetrics text)
    texts: Vec<(&'static str, String)>,
    /// The `portion_run_end_timestamp_seconds` of the first run, whole seconds:
    /// promtool's time 0 (its clock starts at the epoch).
    base: f64,
}

fn real_outputs() -> Outputs {
    // A run the quota stops (75) on a budget of 5 units an hour, then the
    // credential blocked as an upstream's 403 blocks it: the status.
    let up = Standin::start(&["--pages", "3"]);
    let tight = &["{ limit: 5, per: 1h }"];
    let d = trending_with(&up, "embedded", tight, &["US", "GB"], 3, "fail_closed");
    let ok = d.path().join("ok.prom");
    let r = d.portion(&["run", "--metrics-file", ok.to_str().unwrap()]);
    assert_eq!(r.code, 75, "{r:?}");
    let ledger = EmbeddedLedger::open(&d.path().join("ledger.sqlite3")).unwrap();
    let now = chrono::Utc::now().timestamp_micros();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(ledger.block(
            "main",
            now + 5 * 3_600_000_000,
            "upstream 403",
            At::StoreClock,
        ))
        .unwrap();
    let status = d.portion(&["status", "--format", "openmetrics"]);
    assert_eq!(status.code, 0, "{status:?}");

    // A configuration error (78): the outcome is written all the same.
    let broken = Deployment::new("credentials: {}\nnot_a_key: 1\n");
    let failed = broken.path().join("broken.prom");
    let r = broken.portion(&["run", "--metrics-file", failed.to_str().unwrap()]);
    assert_eq!(r.code, 78, "{r:?}");

    // A Redis restarted without persistence: the store lost the log.
    let mut redis = RedisServer::start();
    let shared = trending_with(&up, &redis.url(), tight, &["US"], 1, "fail_closed");
    assert_eq!(shared.portion(&["run"]).code, 0);
    redis.restart();
    let lost = shared.portion(&["status", "--format", "openmetrics"]);
    assert_eq!(lost.code, 0, "{lost:?}");

    let ok = std::fs::read_to_string(ok).unwrap();
    let base = ok
        .lines()
        .find_map(|l| l.strip_prefix("portion_run_end_timestamp_seconds "))
        .map(|v| v.parse::<f64>().unwrap().floor())
        .unwrap_or_else(|| panic!("no end timestamp in:\n{ok}"));
    Outputs {
        texts: vec![
            ("status", status.stdout),
            ("ok", ok),
            ("broken", std::fs::read_to_string(failed).unwrap()),
            ("redis", lost.stdout),
        ],
        base,
    }
}

/// The samples of `text` as promtool input series, constant for three hours
/// at one sample a minute, each with the label `instance`. Unix times are
/// moved by `base`, so the first run ended at promtool's time 0.
fn series(instance: &str, text: &str, base: f64) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (name, value) = l.rsplit_once(' ').unwrap();
            let mut value: f64 = value.parse().unwrap();
            if name
                .split('{')
                .next()
                .unwrap()
                .ends_with("_timestamp_seconds")
                && value > 0.0
            {
                value -= base;
            }
            let name = match name.split_once('{') {
                Some((n, labels)) => format!("{n}{{instance=\"{instance}\",{labels}"),
                None => format!("{name}{{instance=\"{instance}\"}}"),
            };
            json!({ "series": name, "values": format!("{value}x180") })
        })
        .collect()
}

fn alert(name: &str, labels: Value, summary: &str) -> Value {
    json!({ "eval_time": "2h", "alertname": name, "exp_alerts": [
        { "exp_labels": labels, "exp_annotations": { "summary": summary } }
    ]})
}

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .output()
        .expect("promtool is missing (Debian package prometheus; bash .ci/run installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_alerting_rules_fire_on_real_output() {
    let rules = format!("{ROOT}/contrib/prometheus/portion.rules.yml");
    promtool(&["check", "rules", &rules]);
    let out = real_outputs();
    let input: Vec<Value> = out
        .texts
        .iter()
        .flat_map(|(instance, text)| series(instance, text, out.base))
        .collect();
    let window = json!({ "instance": "status", "credential": "main", "pool": "units",
                         "window": "1h", "severity": "warning" });
    let overdue = |instance| json!({ "instance": instance, "severity": "warning" });
    let overdue_summary = "portion: no run has finished for over 90 minutes";
    let tests = json!({
        "rule_files": [rules],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": input,
            "alert_rule_test": [
                // Before their `for` and their age: nothing yet.
                { "eval_time": "30m", "alertname": "PortionWindowNearlySpent", "exp_alerts": [] },
                { "eval_time": "30m", "alertname": "PortionRunOverdue", "exp_alerts": [] },
                alert("PortionWindowNearlySpent", window,
                      "portion: under 10% of main/units's 1h budget left"),
                alert("PortionCredentialBlocked",
                      json!({ "instance": "status", "credential": "main", "severity": "warning" }),
                      "portion: credential main is blocked by its upstream"),
                alert("QuotaLogLost",
                      json!({ "instance": "redis", "credential": "main", "severity": "critical" }),
                      "portion: the store lost the log of credential main"),
                // 78 fires; the run stopped cleanly (75) does not.
                alert("PortionRunFailed", json!({ "instance": "broken", "severity": "critical" }),
                      "portion: a run exited 78"),
                { "eval_time": "2h", "alertname": "PortionRunOverdue", "exp_alerts": [
                    { "exp_labels": overdue("ok"), "exp_annotations": { "summary": overdue_summary } },
                    { "exp_labels": overdue("broken"), "exp_annotations": { "summary": overdue_summary } },
                ]},
            ],
        }],
    });
    // JSON is YAML: promtool reads it as its test file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("portion.rules.test.yml");
    std::fs::write(&file, serde_json::to_string_pretty(&tests).unwrap()).unwrap();
    promtool(&["test", "rules", file.to_str().unwrap()]);
}

/// Every `portion_…` name in `text`.
fn portion_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("portion_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let before = rest[..i].chars().last();
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            names.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    names
}

#[test]
fn the_dashboard_and_the_rules_name_only_metrics_the_tool_writes() {
    let out = real_outputs();
    let written: BTreeSet<String> = out
        .texts
        .iter()
        .flat_map(|(_, t)| t.lines())
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();

    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{ROOT}/contrib/grafana/portion.json")).unwrap(),
    )
    .expect("contrib/grafana/portion.json is not valid JSON");
    let panels = dashboard["panels"].as_array().expect("no panels");
    let mut used = BTreeSet::new();
    for panel in panels {
        let targets = panel["targets"]
            .as_array()
            .expect("a panel without targets");
        for t in targets {
            let expr = t["expr"].as_str().expect("a target without expr");
            let names = portion_names(expr);
            assert!(!names.is_empty(), "{expr} names no portion metric");
            used.extend(names);
        }
    }
    // The dashboard shows remaining per window, spend by job, blocks and
    // run outcomes.
    for name in [
        "portion_window_remaining_units",
        "portion_window_used_by_job_units",
        "portion_credential_blocked",
        "portion_run_exit_code",
    ] {
        assert!(used.contains(name), "the dashboard lacks {name}");
    }
    let rules =
        std::fs::read_to_string(format!("{ROOT}/contrib/prometheus/portion.rules.yml")).unwrap();
    used.extend(portion_names(
        &rules
            .lines()
            .filter(|l| l.trim_start().starts_with("expr:"))
            .collect::<Vec<_>>()
            .join("\n"),
    ));
    let unknown: Vec<&String> = used.difference(&written).collect();
    assert!(
        unknown.is_empty(),
        "not written by portion: {unknown:?}\nwritten: {written:?}"
    );
}
