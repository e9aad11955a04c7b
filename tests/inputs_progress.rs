//! The end in sight for a job of inputs (issue 25, part 4): `status` (text,
//! `--json`, OpenMetrics) and `run --dry-run` show inputs done, skipped,
//! failed and left, and when the rest will be done at the pace the
//! budgets allow, checked against a known ledger: 10 inputs, a budget of
//! 4 an hour.

use portion::ledger::{EmbeddedLedger, JobStore};
use serde_json::{Value, json};

use crate::common::deployment::{Deployment, embedded_store, main_units};
use crate::common::standin::Standin;
use crate::common::yaml::{Job, Step};

const BUDGET: u64 = 4;
const PER_SECONDS: u64 = 3600;

/// A once-job `list` over `ids.txt`, one videos.list call (1 unit) per
/// input, in a pool of [`BUDGET`] units an hour.
fn deployment(up: &Standin, inputs: usize) -> Deployment {
    let d = Deployment::new("");
    let keys: Vec<String> = (0..inputs).map(|i| format!("K{i}")).collect();
    std::fs::write(d.path().join("ids.txt"), keys.join("\n") + "\n").unwrap();
    let yaml = main_units(
        &embedded_store(&d),
        &[&format!("{{ limit: {BUDGET}, per: 1h }}")],
    )
    .endpoint("videos.list", "{ units: 1 }")
    .job(
        Job::new("list", "main")
            .set("inputs", "{ file: ids.txt }")
            .set("once", "true")
            .step(
                Step::new("videos.list")
                    .url(&format!("{}/youtube/v3/videos", up.base()))
                    .query(r#"{ part: snippet, regionCode: "{key}", key: "{secret}" }"#),
            ),
    )
    .render();
    d.write(&yaml);
    d
}

/// Seconds until `left` inputs of 1 unit are done with `remaining` units
/// free now, a sliding window freeing its budget evenly over its length:
/// the pace, worked out apart from portion's own arithmetic.
fn pace_seconds(left: u64, remaining: u64) -> u64 {
    left.saturating_sub(remaining) * PER_SECONDS / BUDGET
}

fn dry_run(d: &Deployment) -> Value {
    let r = d.portion(&["run", "--dry-run", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let plan: Value = serde_json::from_str(&r.stdout).unwrap();
    plan["credentials"][0]["jobs"][0].clone()
}

#[test]
fn status_and_dry_run_show_done_failed_left_and_when_the_rest_is_done() {
    let up = Standin::start(&[]);
    let d = deployment(&up, 10);

    // Before any run (no store yet): all 10 left, 4 fit now.
    let status = d.status_json();
    let inputs = &status["credentials"][0]["jobs"][0]["inputs"];
    assert_eq!((&inputs["done"], &inputs["left"]), (&json!(0), &json!(10)));
    assert_eq!(inputs["done_in_seconds"], pace_seconds(10, 4), "{status}");
    let job = dry_run(&d);
    assert_eq!(job["inputs"]["done"], 0, "{job}");
    assert_eq!(job["inputs"]["left"], 10, "{job}");
    assert_eq!(
        job["inputs"]["done_in_seconds"],
        pace_seconds(10, 4),
        "{job}"
    );
    assert_eq!(
        job["next_run"],
        json!({"outcome": "inputs", "inputs": 4, "calls": 4, "left_after": 6})
    );
    assert!(up.seen().is_empty(), "a dry run sends nothing");

    // A run does 4 (the budget), then stops.
    let r = d.portion(&["run"]);
    assert_eq!(up.seen().len(), 4, "{r:?}");
    // Its summary counts inputs, and says where in the file it resumes.
    assert!(
        r.stderr
            .contains("; inputs done 4, 0 skipped; 4 pages written; next run starts at K4 (line 5) step 0 page 0"),
        "{r:?}"
    );

    let status = d.status_json();
    let inputs = &status["credentials"][0]["jobs"][0]["inputs"];
    assert_eq!(inputs["done"], 4, "{status}");
    assert_eq!(inputs["skipped"], 0, "{status}");
    assert_eq!(inputs["failed"], 0, "{status}");
    assert_eq!(inputs["left"], 6, "{status}");
    assert_eq!(inputs["units_per_input"], json!({"units": 1}));
    assert_eq!(inputs["cost_estimated"], false);
    assert_eq!(inputs["done_in_seconds"], pace_seconds(6, 0), "{status}");

    // Two failed inputs, as a run records them: listed by line.
    let ledger = EmbeddedLedger::open(&d.path().join("ledger.sqlite3")).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (key, line) in [("K3", 4), ("K1", 2)] {
        let failure = json!({"line": line, "status": 404, "excerpt": "not found"}).to_string();
        rt.block_on(ledger.map_put("list:inputs:failed", &[(key.into(), failure)]))
            .unwrap();
    }
    let status = d.status_json();
    let inputs = &status["credentials"][0]["jobs"][0]["inputs"];
    assert_eq!(inputs["failed"], 2, "{status}");
    assert_eq!(
        inputs["failures"],
        json!([
            {"key": "K1", "line": 2, "status": 404, "excerpt": "not found"},
            {"key": "K3", "line": 4, "status": 404, "excerpt": "not found"},
        ])
    );

    let text = d.portion(&["status"]);
    assert!(
        text.stdout
            .contains("inputs: 4 done, 0 skipped, 2 failed, 6 left"),
        "{text:?}"
    );
    assert!(text.stdout.contains("failed: K1 (line 2): 404 not found"));

    let m = d.portion(&["status", "--format", "openmetrics"]);
    for (state, n) in [("done", 4), ("failed", 2), ("skipped", 0), ("left", 6)] {
        let line = format!("portion_job_inputs{{job=\"list\",state=\"{state}\"}} {n}\n");
        assert!(m.stdout.contains(&line), "{line}: {m:?}");
    }
    let sample = |name: &str| -> f64 {
        m.stdout
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name}: {m:?}"))
    };
    let at = sample("portion_status_timestamp_seconds ");
    let done_by = sample("portion_job_inputs_done_by_timestamp_seconds{job=\"list\"} ");
    assert!(
        (done_by - at - pace_seconds(6, 0) as f64).abs() < 1e-3,
        "{done_by} {at}"
    );

    // The next run: nothing fits now; the 6 left wait.
    let job = dry_run(&d);
    assert_eq!(job["inputs"]["left"], 6, "{job}");
    assert_eq!(job["inputs"]["failed"], 2, "{job}");
    assert_eq!(
        job["next_run"],
        json!({"outcome": "inputs", "inputs": 0, "calls": 0, "left_after": 6})
    );
    let text = d.portion(&["run", "--dry-run"]);
    assert!(
        text.stdout
            .contains("inputs: 4 done, 0 skipped, 2 failed, 6 left"),
        "{text:?}"
    );
    assert_eq!(up.seen().len(), 4, "a dry run sends nothing");
}

#[test]
fn a_run_of_inputs_draws_a_progress_bar_on_a_terminal_only() {
    let up = Standin::start(&[]);
    // Under cron or systemd (stderr a pipe here): no bar.
    let r = deployment(&up, 3).portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stderr.contains(" inputs, "), "{r:?}");
    // On a terminal (`script` gives the run a pseudo-terminal): the bar,
    // its count of the file's inputs and its rate.
    let d = deployment(&up, 3);
    let cmd = format!(
        "{} -c {} run",
        crate::common::deployment::portion_bin().display(),
        d.config().display()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("HOME", d.path())
        .output()
        .expect("script(1), from util-linux, gives the run a terminal");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(up.seen().len(), 6, "{text}");
    assert!(text.contains("list: "), "{text:?}");
    assert!(text.contains("/3 inputs, "), "{text:?}");
    assert!(text.contains("/s, the rest in ~"), "{text:?}");

    // Stopped by its budget (4 of 10): the bar says when the rest will be
    // done at the budgets' pace too, as `status` does. Each input costs a
    // unit, so after each page 6 inputs are left beyond what fits now.
    let d = deployment(&up, 10);
    let cmd = format!(
        "{} -c {} run",
        crate::common::deployment::portion_bin().display(),
        d.config().display()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("HOME", d.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(75), "{text}");
    let pace = format!("~{} at the budgets' pace", fmt(pace_seconds(6, 0)));
    assert!(text.contains(&pace), "{pace}: {text:?}");
}

/// Seconds as the configuration writes a duration (`1h30m`).
fn fmt(s: u64) -> String {
    portion::timefmt::fmt_duration(std::time::Duration::from_secs(s))
}
