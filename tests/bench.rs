//! `portion bench`, through the real binary against a real `redis-server`:
//! small runs that check what it reports and that it cleans up after itself.
//! Figures are never asserted on (performance lives in BENCHMARKS.md).

use crate::common::deployment::{portion, run};
use crate::common::redis::RedisServer;

#[test]
fn bench_reports_every_figure_and_leaves_no_keys() {
    let server = RedisServer::start();
    let home = tempfile::tempdir().unwrap();
    let url = server.url();
    let ran = run(portion(home.path()).args([
        "--store",
        &url,
        "bench",
        "--requests",
        "200",
        "--clients",
        "4",
        "--rounds",
        "2",
        "--memory-calls",
        "100",
        "--json",
    ]));
    assert_eq!(ran.code, 0, "{ran:?}");
    let r: serde_json::Value = serde_json::from_str(&ran.stdout).expect("JSON");
    for key in ["ping", "charge_1_window", "charge_2_windows"] {
        assert!(r[key]["p50_us"].as_f64().unwrap() > 0.0, "{key}: {r}");
    }
    for key in [
        "evalsha_floor",
        "evalsha_charge_args",
        "charge_cost_1",
        "charge_cost_100",
        "charge_cost_1_two_windows",
    ] {
        let series = r[key].as_array().unwrap();
        let clients: Vec<u64> = series
            .iter()
            .map(|t| t["clients"].as_u64().unwrap())
            .collect();
        assert_eq!(clients, [1, 4], "{key}: {r}");
        assert!(
            series
                .iter()
                .all(|t| t["per_second"].as_f64().unwrap() > 0.0)
        );
    }
    // Bytes per call, with the charge ids in the entries, under the 40.
    for key in ["log_bytes_per_call_cost_1", "log_bytes_per_call_cost_100"] {
        let bytes = r[key].as_f64().unwrap();
        assert!(bytes > 0.0 && bytes <= 40.0, "{key}: {bytes}");
    }
    assert_eq!(r["rounds"], 2);
    // Every benchmark key is deleted at the end (one argument-transport
    // credential is never written: its script is `return 1`).
    assert_eq!(
        server.cli(&["DBSIZE"]),
        "0",
        "{}",
        server.cli(&["KEYS", "*"])
    );
}

#[test]
fn bench_needs_a_redis_store() {
    let home = tempfile::tempdir().unwrap();
    let ran = run(portion(home.path()).args(["--store", "embedded", "bench"]));
    // A usage error (README "Exit codes"), naming what to give instead.
    assert_eq!(ran.code, 2, "{ran:?}");
    assert!(ran.stderr.contains("--store redis://"), "{ran:?}");
}

/// Every bench script runs from a fresh clone on a machine where rustup
/// lives in `~/.rustup` (its default install): a script that sets `HOME`
/// runs no cargo command after it, unless it keeps `RUSTUP_HOME` and
/// `CARGO_HOME` (issue 36; `bench/charge_cli.sh` failed with "rustup could
/// not choose a version of cargo").
#[test]
fn no_bench_script_runs_cargo_after_changing_home() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut scripts = 0;
    for entry in std::fs::read_dir(format!("{root}/bench")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "sh") {
            continue;
        }
        scripts += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        let keeps_rustup = text.contains("RUSTUP_HOME") && text.contains("CARGO_HOME");
        let mut home_set_at = None;
        for (n, line) in text.lines().enumerate() {
            let code = line.split('#').next().unwrap_or_default();
            let words: Vec<&str> = code.split_whitespace().collect();
            if words.iter().any(|w| w.starts_with("HOME=")) {
                home_set_at.get_or_insert(n + 1);
            }
            if let Some(at) = home_set_at
                && !keeps_rustup
            {
                assert!(
                    !code.contains("cargo "),
                    "{}:{}: cargo after HOME changed at line {at}: {line}",
                    path.display(),
                    n + 1
                );
            }
        }
    }
    assert!(scripts >= 10, "the bench scripts were not found");
}
