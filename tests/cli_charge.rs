//! `portion charge` and `portion exec` as a script uses them: the real binary
//! against real stores (embedded SQLite and a real redis-server), checked
//! by exit code, stderr, `--json` and what `status --json` then reports.
//! Waits are measured against what the ledger said, never slept for.

use std::path::Path;
use std::time::{Duration, Instant};

use portion::ledger::{At, BlockEnd, Ledger, Store, StoreLocation};
use serde_json::Value;

use crate::common::deployment::{Deployment, Ran, embedded_store, finish, kill, spawn};
use crate::common::redis::RedisServer;
use crate::common::yaml::{Config, Credential, limit};
use crate::common::{free_port, wait_until};

/// Credential `main`: a `units` pool of the windows `units` and a
/// `search` pool of 10 an hour; `solo`: one pool, `calls`, of 5 an hour.
/// No jobs: scripts spend them.
fn config(store: &str, units: &[&str]) -> String {
    let main = Credential::new("main")
        .secret("{ env: UNUSED_KEY }")
        .pool("units", units)
        .pool("search", &[limit(10, "1h")]);
    let solo = Credential::new("solo")
        .secret("{ env: UNUSED_KEY }")
        .pool("calls", &[limit(5, "1h")]);
    Config::new(store)
        .credential(main)
        .credential(solo)
        .render()
}

const HOURLY_3: &[&str] = &["{ limit: 3, per: 1h }"];

/// The test run once on each kind of store: a fresh deployment whose
/// `units` pool has the windows `units`, and its store (as `--store`
/// writes it; also what the assertions name).
fn on_each_store(units: &[&str], test: impl Fn(&Deployment, &str)) {
    let redis = RedisServer::start();
    let d = Deployment::new("");
    let embedded = embedded_store(&d);
    d.write(&config(&embedded, units));
    test(&d, &embedded);
    let d = Deployment::new(&config(&redis.url(), units));
    test(&d, &redis.url());
}

fn charge(d: &Deployment, args: &[&str]) -> Ran {
    d.portion(&[&["charge", "main"][..], args].concat())
}

fn json(r: &Ran) -> Value {
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {r:?}"))
}

/// `status --json`: the first window of `pool` of credential `main`.
fn window(d: &Deployment, pool: &str) -> Value {
    let s = d.status_json();
    let pools = s["credentials"][0]["pools"].as_array().unwrap().clone();
    let p = pools.into_iter().find(|p| p["pool"] == pool).unwrap();
    p["windows"][0].clone()
}

#[test]
fn admits_until_the_budget_is_spent_then_says_when_units_free_up() {
    on_each_store(HOURLY_3, |d, kind| {
        let r = charge(d, &["--cost", "units=2"]);
        assert_eq!(r.code, 0, "{kind}: {r:?}");
        let r = charge(d, &["--cost", "units=1"]);
        assert_eq!(r.code, 0, "{kind}: {r:?}");
        // `units` is full, `search` is not: all or nothing.
        let r = charge(d, &["--cost", "units=1,search=1"]);
        assert_eq!(r.code, 75, "{kind}: {r:?}");
        assert!(
            r.stderr.contains(
                "charge refused: the 1h window of pool 'units' is full; units free up in"
            ),
            "{kind}: {r:?}"
        );
        assert_eq!(window(d, "units")["used"], 3, "{kind}");
        assert_eq!(window(d, "search")["used"], 0, "{kind}: nothing charged");
        // A credential with one pool takes a bare number.
        let r = d.portion(&["charge", "solo", "--cost", "5", "--json"]);
        assert_eq!(r.code, 0, "{kind}: {r:?}");
        assert_eq!(json(&r)["cost"], serde_json::json!({"calls": 5}), "{kind}");
    });
}

#[test]
fn json_gives_the_decision_and_what_remains_per_window() {
    on_each_store(
        &[
            "{ limit: 5, per: 1h, headroom: 2 }",
            "{ limit: 100, per: 24h }",
        ],
        |d, kind| {
            let r = charge(d, &["--cost", "units=2", "--cost", "search=4", "--json"]);
            assert_eq!(r.code, 0, "{kind}: {r:?}");
            let j = json(&r);
            assert_eq!(j["decision"], "admitted", "{kind}");
            assert_eq!(j["admitted"], true);
            assert_eq!(j["credential"], "main");
            assert_eq!(
                (j["endpoint"].as_str(), j["job"].as_str()),
                (Some("charge"), Some("cli"))
            );
            assert_eq!(j["cost"], serde_json::json!({"units": 2, "search": 4}));
            assert_eq!(j["charges_recorded"], 1, "{kind}");
            assert_eq!(j["retry_after_ms"], Value::Null);
            assert_eq!(j["full"], Value::Null);
            assert_eq!(j["waited_ms"], 0, "{kind}: no --wait, no wait");
            let remaining: Vec<(String, String, u64, u64)> = j["remaining"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| {
                    (
                        w["pool"].as_str().unwrap().to_string(),
                        w["window"].as_str().unwrap().to_string(),
                        w["budget"].as_u64().unwrap(),
                        w["remaining"].as_u64().unwrap(),
                    )
                })
                .collect();
            let want = |p: &str, w: &str, b, r| (p.to_string(), w.to_string(), b, r);
            for w in [
                want("units", "1h", 3, 1),
                want("units", "24h", 100, 98),
                want("search", "1h", 10, 6),
            ] {
                assert!(remaining.contains(&w), "{kind}: {w:?} in {remaining:?}");
            }

            let r = charge(d, &["--cost", "units=2", "--json"]);
            assert_eq!(r.code, 75, "{kind}: {r:?}");
            let j = json(&r);
            assert_eq!(j["decision"], "rejected", "{kind}");
            assert_eq!(j["admitted"], false);
            assert_eq!(j["full"]["pool"], "units");
            assert_eq!(j["full"]["window"], "1h");
            assert_eq!(j["full"]["per_seconds"], 3600);
            let retry = j["retry_after_ms"].as_u64().unwrap();
            assert!(retry > 3_590_000 && retry <= 3_600_000, "{kind}: {retry}");
            assert!(j["retry_at"].as_str().unwrap().ends_with('Z'));
            assert!(
                j["reason"]
                    .as_str()
                    .unwrap()
                    .contains("pool 'units' is full")
            );
            assert_eq!(
                j["remaining"][0]["remaining"], 1,
                "{kind}: read from the store"
            );
        },
    );
}

#[test]
fn configuration_mistakes_exit_78_naming_them_and_charge_nothing() {
    on_each_store(HOURLY_3, |d, kind| {
        for (args, says) in [
            (
                vec!["charge", "main", "--cost", "dollars=1"],
                "no pool named 'dollars' (pools: units, search)",
            ),
            (
                vec!["charge", "main", "--cost", "units=0"],
                "'0' is not a positive whole number",
            ),
            (
                vec!["charge", "main", "--cost", "units=-1"],
                "'-1' is not a positive whole number",
            ),
            (
                // Rust's own parse took a leading '+'.
                vec!["charge", "main", "--cost", "units=+1"],
                "'+1' is not a positive whole number",
            ),
            (
                vec!["charge", "main", "--cost", "units=x"],
                "'x' is not a positive whole number",
            ),
            (
                vec!["charge", "main", "--cost", "units=9007199254740992"],
                "9007199254740992 is above the largest number of units, 9007199254740991 (2^53 - 1",
            ),
            (
                // Past u64 too: said "not a positive whole number".
                vec!["charge", "main", "--cost", "units=99999999999999999999999"],
                "99999999999999999999999 is above the largest number of units",
            ),
            (
                vec!["charge", "main", "--cost", "units=1,search=1,units=1"],
                "pool units is named twice",
            ),
            (
                vec!["charge", "main", "--cost", "units=4"],
                "4 units can never fit its 1h window, whose budget is 3",
            ),
            (
                vec!["charge", "main", "--cost", "1"],
                "'1' does not name a pool: write POOL=N",
            ),
            (
                vec!["exec", "main", "--cost", "units=4", "--", "true"],
                "can never fit",
            ),
        ] {
            let r = d.portion(&args);
            assert_eq!(r.code, 78, "{kind} {args:?}: {r:?}");
            assert!(r.stderr.contains(says), "{kind} {args:?}: {r:?}");
            assert!(
                r.stderr.contains("portion.yaml"),
                "{kind}: names the file: {r:?}"
            );
        }
        assert_eq!(window(d, "units")["used"], 0, "{kind}");
        assert_eq!(window(d, "search")["used"], 0, "{kind}");
    });
}

/// A credential the file does not have, named on the command line, is a
/// usage error (2) in every command, as an unknown job is for `run` (it
/// was 78 in `charge` and `exec`, 2 in `status` and `unblock`): nothing is
/// charged or run, and no store is made.
#[test]
fn an_unknown_credential_is_a_usage_error_in_every_command() {
    let d = Deployment::new("");
    d.write(&config(&embedded_store(&d), HOURLY_3));
    let ran = d.path().join("ran");
    let touch = format!("touch {}", ran.display());
    for args in [
        &["charge", "nobody", "--cost", "units=1"][..],
        &[
            "exec", "nobody", "--cost", "units=1", "--", "sh", "-c", &touch,
        ],
        &["status", "nobody"],
        &["unblock", "nobody"],
    ] {
        let r = d.portion(args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(
            r.stderr.contains("no credential named 'nobody' in ")
                && r.stderr.contains("portion.yaml (credentials: main, solo)"),
            "{args:?}: {r:?}"
        );
    }
    assert!(!ran.exists(), "the command was not run");
    assert!(!d.path().join("ledger.sqlite3").exists(), "no store made");
}

#[test]
fn an_unreachable_store_exits_69_without_its_password_or_the_command() {
    let d = Deployment::new(&config("embedded", HOURLY_3));
    let store = format!("redis://user:hunter2@127.0.0.1:{}/0", free_port());
    let r = d.portion(&["--store", &store, "charge", "main", "--cost", "units=1"]);
    assert_eq!(r.code, 69, "{r:?}");
    assert!(r.stderr.contains("user:***@127.0.0.1"), "{r:?}");
    assert!(!r.all().contains("hunter2"), "{r:?}");

    let ran = d.path().join("ran");
    let touch = format!("touch {}", ran.display());
    let r = d.portion(&[
        "--store", &store, "exec", "main", "--cost", "units=1", "--", "sh", "-c", &touch,
    ]);
    assert_eq!(r.code, 69, "{r:?}");
    assert!(!ran.exists(), "the command ran");
}

#[test]
fn wait_sleeps_until_the_ledger_says_and_then_is_admitted() {
    on_each_store(&["{ limit: 1, per: 2s }"], |d, kind| {
        let sent = Instant::now();
        assert_eq!(charge(d, &["--cost", "units=1"]).code, 0, "{kind}");
        let answered = Instant::now();
        let r = charge(d, &["--cost", "units=1", "--json"]);
        assert_eq!(r.code, 75, "{kind}: {r:?}");
        let retry = json(&r)["retry_after_ms"].as_u64().unwrap();
        assert!((1..=2000).contains(&retry), "{kind}: {retry}");

        let started = Instant::now();
        let r = charge(d, &["--cost", "units=1", "--wait", "30s", "--json"]);
        let done = Instant::now();
        assert_eq!(r.code, 0, "{kind}: {r:?}");
        let j = json(&r);
        assert_eq!(j["decision"], "admitted");
        // Admitted no sooner than the first unit left the window (it was
        // logged after `sent`)...
        assert!(
            done >= sent + Duration::from_secs(2),
            "{kind}: admitted too soon"
        );
        // ...and not much later than it did (logged before `answered`): the wait
        // was the ledger's retry time, not --wait's 30 s (a margin of
        // seconds: two processes start on a busy machine meanwhile).
        let needed = (answered + Duration::from_secs(2)).saturating_duration_since(started);
        assert!(
            done - started < needed + Duration::from_secs(5),
            "{kind}: waited {:?} where {needed:?} was needed",
            done - started
        );
        assert!(j["waited_ms"].as_u64().unwrap() > 0, "{kind}: {j}");
    });
}

#[test]
fn a_wait_shorter_than_needed_exits_75_at_once() {
    on_each_store(HOURLY_3, |d, kind| {
        assert_eq!(charge(d, &["--cost", "units=3"]).code, 0, "{kind}");
        let started = Instant::now();
        let r = charge(d, &["--cost", "units=1", "--wait", "20s"]);
        assert_eq!(r.code, 75, "{kind}: {r:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{kind}: slept for nothing ({:?})",
            started.elapsed()
        );
        assert!(r.stderr.contains("units free up in 1h"), "{kind}: {r:?}");
        assert!(
            r.stderr.contains("--wait 20s ends before that"),
            "{kind}: {r:?}"
        );
    });
}

/// An observe-mode credential admits what does not fit, and `--json` says
/// which window would have refused it and when it would have fitted.
#[test]
fn observe_mode_admits_and_json_says_what_would_have_refused() {
    on_each_store(HOURLY_3, |d, kind| {
        d.write(&config(kind, HOURLY_3).replace("  solo:\n", "  solo:\n    mode: observe\n"));
        let solo = |args: &[&str]| d.portion(&[&["charge", "solo", "--json"][..], args].concat());
        for n in 1..=5 {
            let r = solo(&["--cost", "calls=1"]);
            assert_eq!(r.code, 0, "{kind}: {r:?}");
            assert_eq!(json(&r)["observed"], Value::Null, "{kind}: charge {n} fits");
        }
        let r = solo(&["--cost", "calls=1"]);
        assert_eq!(r.code, 0, "{kind}: observe mode never refuses: {r:?}");
        let j = json(&r);
        assert_eq!(j["decision"], "admitted", "{kind}");
        assert_eq!(j["charges_recorded"], 6, "{kind}: recorded all the same");
        let o = &j["observed"];
        assert_eq!(
            (o["pool"].as_str(), o["window"].as_str()),
            (Some("calls"), Some("1h")),
            "{kind}: {j}"
        );
        assert_eq!(o["per_seconds"], 3600, "{kind}");
        let retry = o["retry_after_ms"].as_u64().unwrap();
        assert!(retry > 3_500_000 && retry <= 3_600_000, "{kind}: {retry}");
        assert!(r.stderr.contains("observe mode"), "{kind}: {r:?}");
    });
}

/// A `--wait` longer than the clock can count means "as long as needed":
/// a charge that fits is admitted at once, and `exec` runs its command.
#[test]
fn a_wait_past_any_clock_is_as_long_as_needed() {
    on_each_store(HOURLY_3, |d, kind| {
        let forever = u64::MAX.to_string() + "s";
        let r = charge(d, &["--cost", "units=1", "--wait", &forever, "--json"]);
        assert_eq!(r.code, 0, "{kind}: {r:?}");
        assert_eq!(json(&r)["waited_ms"], 0, "{kind}");
        let r = d.portion(&[
            "exec", "main", "--cost", "units=1", "--wait", &forever, "--", "sh", "-c", "exit 7",
        ]);
        assert_eq!(r.code, 7, "{kind}: {r:?}");
    });
}

#[test]
fn a_blocked_credential_is_refused_with_the_reason() {
    on_each_store(HOURLY_3, |d, kind| {
        let location = StoreLocation::parse(kind).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let store = Store::open(&location).await.unwrap();
            let end = BlockEnd::After(Duration::from_secs(600));
            store
                .block(
                    "main",
                    end,
                    "upstream 403 quotaExceeded (test)",
                    At::StoreClock,
                )
                .await
                .unwrap();
        });
        let r = charge(d, &["--cost", "units=1", "--json"]);
        assert_eq!(r.code, 75, "{kind}: {r:?}");
        assert!(
            r.stderr.contains("the credential is blocked until"),
            "{kind}: {r:?}"
        );
        assert!(
            r.stderr.contains("upstream 403 quotaExceeded (test)"),
            "{kind}: {r:?}"
        );
        let j = json(&r);
        assert_eq!(j["decision"], "blocked");
        assert!(
            j["retry_after_ms"].as_u64().unwrap() > 590_000,
            "{kind}: {j}"
        );
        assert_eq!(window(d, "units")["used"], 0, "{kind}");
    });
}

#[test]
fn a_store_that_lost_the_log_is_refused_as_log_lost() {
    let redis = RedisServer::start();
    let d = Deployment::new(&config(&redis.url(), HOURLY_3));
    // This host saw the credential reach 50 charges in that Redis (a run
    // writes this); the Redis now holds none: it lost the log.
    let dir = d.path().join("state/portion");
    std::fs::create_dir_all(&dir).unwrap();
    let history = serde_json::json!({ redis.url(): { "main": { "serial": 50 } } });
    std::fs::write(dir.join("history.json"), history.to_string()).unwrap();
    let r = charge(&d, &["--cost", "units=1", "--json"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(r.stderr.contains("LOG LOST"), "{r:?}");
    assert_eq!(json(&r)["decision"], "log_lost");
}

#[test]
fn exec_runs_the_command_and_passes_its_exit_code_through() {
    on_each_store(&["{ limit: 10, per: 1h }"], |d, kind| {
        let exec = |cmd: &[&str]| {
            d.portion(&[&["exec", "main", "--cost", "units=1", "--"][..], cmd].concat())
        };
        let r = exec(&["sh", "-c", "echo out; echo err >&2"]);
        assert_eq!(r.code, 0, "{kind}: {r:?}");
        assert_eq!(r.stdout, "out\n", "{kind}: the command's own stdout");
        assert!(r.stderr.contains("err"), "{kind}: {r:?}");
        assert_eq!(exec(&["sh", "-c", "exit 3"]).code, 3, "{kind}");
        assert_eq!(exec(&["sh", "-c", "kill -KILL $$"]).code, 128 + 9, "{kind}");
        // Arguments pass as given, spaces and dashes included.
        let r = exec(&["printf", "%s|", "a b", "--json", "-c"]);
        assert_eq!(r.stdout, "a b|--json|-c|", "{kind}: {r:?}");
        assert_eq!(window(d, "units")["used"], 4, "{kind}: one charge each");
    });
}

#[test]
fn exec_refused_does_not_run_the_command() {
    on_each_store(HOURLY_3, |d, kind| {
        assert_eq!(charge(d, &["--cost", "units=3"]).code, 0, "{kind}");
        let ran = d.path().join("ran");
        let touch = format!("touch {}", ran.display());
        let r = d.portion(&[
            "exec", "main", "--cost", "units=1", "--", "sh", "-c", &touch,
        ]);
        assert_eq!(r.code, 75, "{kind}: {r:?}");
        assert!(r.stderr.contains("pool 'units' is full"), "{kind}: {r:?}");
        assert!(!ran.exists(), "{kind}: the command ran");
        // Admitted, it does run.
        let r = d.portion(&[
            "exec", "main", "--cost", "search=1", "--", "sh", "-c", &touch,
        ]);
        assert_eq!(r.code, 0, "{kind}: {r:?}");
        assert!(ran.exists(), "{kind}");
    });
}

#[test]
fn exec_of_a_command_that_cannot_start_exits_127_or_126_after_charging() {
    on_each_store(&["{ limit: 10, per: 1h }"], |d, kind| {
        let r = d.portion(&[
            "exec",
            "main",
            "--cost",
            "units=1",
            "--",
            "no-such-command-here",
        ]);
        assert_eq!(r.code, 127, "{kind}: {r:?}");
        assert!(
            r.stderr.contains("cannot run no-such-command-here"),
            "{kind}: {r:?}"
        );
        assert!(r.stderr.contains("charge was made"), "{kind}: {r:?}");
        let plain = d.path().join("not-executable");
        std::fs::write(&plain, "#!/bin/sh\n").unwrap();
        let r = d.portion(&[
            "exec",
            "main",
            "--cost",
            "units=1",
            "--",
            plain.to_str().unwrap(),
        ]);
        assert_eq!(r.code, 126, "{kind}: {r:?}");
        assert_eq!(window(d, "units")["used"], 2, "{kind}: both charged");
    });
}

/// `portion exec` running `script` in `d`'s folder, once `ready` exists there.
fn exec_until_ready(d: &Deployment, script: &str, ready: &Path) -> std::process::Child {
    let mut cmd = d.cmd(&[
        "exec", "main", "--cost", "units=1", "--", "sh", "-c", script,
    ]);
    cmd.current_dir(d.path());
    let child = spawn(&mut cmd);
    wait_until(Duration::from_secs(10), "the command started", || {
        ready.exists()
    });
    child
}

/// Every signal that would end `portion` reaches the command, and `portion`
/// exits with the command's code once it has finished: SIGUSR1, SIGUSR2,
/// SIGQUIT, SIGALRM, then SIGABRT, SIGTRAP and SIGBUS used to kill `portion`
/// and leave the command running, orphaned, without the signal.
#[test]
fn exec_passes_stop_signals_on_to_the_command() {
    let d = Deployment::new("");
    d.write(&config(&embedded_store(&d), &["{ limit: 20, per: 1h }"]));
    // (40: a real-time signal, SIGRTMIN+6 under glibc.)
    let names = [
        "TERM", "INT", "HUP", "USR1", "USR2", "QUIT", "ALRM", "ABRT", "TRAP", "BUS", "40",
    ];
    for name in names {
        let sig = format!("-{name}");
        let sig = sig.as_str();
        let ready = d.path().join(format!("ready-{name}"));
        let got = d.path().join(format!("got-{name}"));
        // The command notes the signal and exits 7: only a forwarded
        // signal reaches it (it is not in a terminal's process group).
        let script = format!(
            "trap 'touch got-{name}; kill $!; exit 7' {name}; touch ready-{name}; sleep 30 & wait"
        );
        let child = exec_until_ready(&d, &script, &ready);
        let started = Instant::now();
        kill(sig, child.id());
        let r = finish(child);
        assert_eq!(r.code, 7, "{name}: {r:?}");
        assert!(got.exists(), "{name}: the command never got it");
        assert!(started.elapsed() < Duration::from_secs(10), "{name}");
    }
    // A command that dies of the signal: 128 + 15, like a shell.
    let ready = d.path().join("ready-plain");
    let child = exec_until_ready(&d, "touch ready-plain; exec sleep 30", &ready);
    kill("-TERM", child.id());
    let r = finish(child);
    assert_eq!(r.code, 128 + 15, "{r:?}");
}

/// Every SIGBUS sent reaches the command, not only the first: Rust's
/// runtime handler (for stack overflows), chained behind the forwarding
/// one, uncaught SIGBUS after the first, and a second ended `portion`.
#[test]
fn exec_passes_every_sigbus_on() {
    let d = Deployment::new("");
    d.write(&config(&embedded_store(&d), &["{ limit: 20, per: 1h }"]));
    // Counts each SIGBUS; exits 7 after the second (or after two minutes,
    // should it never come, so that nothing is left behind).
    let script = "n=0; trap 'n=$((n+1)); touch got-$n' BUS; touch ready; i=0; \
        while [ $n -lt 2 ] && [ $i -lt 4 ]; do \
        i=$((i+1)); sleep 30 & wait $!; kill $! 2>/dev/null; done; exit 7";
    let child = exec_until_ready(&d, script, &d.path().join("ready"));
    kill("-BUS", child.id());
    wait_until(
        Duration::from_secs(10),
        "the first SIGBUS passed on",
        || d.path().join("got-1").exists(),
    );
    kill("-BUS", child.id());
    let r = finish(child);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(d.path().join("got-2").exists(), "{r:?}");
}

#[test]
fn tags_show_who_spent_in_status() {
    on_each_store(&["{ limit: 10, per: 1h }"], |d, kind| {
        let r = charge(
            d,
            &[
                "--cost",
                "units=2",
                "--endpoint",
                "search.api",
                "--job",
                "nightly",
            ],
        );
        assert_eq!(r.code, 0, "{kind}: {r:?}");
        assert_eq!(charge(d, &["--cost", "units=1"]).code, 0, "{kind}");
        let r = d.portion(&["exec", "main", "--cost", "units=4", "--", "true"]);
        assert_eq!(r.code, 0, "{kind}: {r:?}");
        let w = window(d, "units");
        assert_eq!(
            w["by_endpoint"],
            serde_json::json!({"search.api": 2, "charge": 1, "exec": 4}),
            "{kind}"
        );
        assert_eq!(
            w["by_job"],
            serde_json::json!({"nightly": 2, "cli": 5}),
            "{kind}"
        );
        for tag in ["a\tb", "a\u{202e}b"] {
            let r = charge(d, &["--cost", "units=1", "--job", tag]);
            assert_eq!(r.code, 2, "{kind}: a tag no report could show: {r:?}");
        }
    });
}

/// A tag is at most 64 characters (a 5,000-character one was recorded and
/// shown); past 100 distinct tags of a kind on a credential, `status`
/// warns, whatever its format, as each is a series of its OpenMetrics.
#[test]
fn tags_are_bounded_and_many_of_them_are_warned_about() {
    let d = Deployment::new("");
    d.write(&config(&embedded_store(&d), &["{ limit: 1000, per: 1h }"]));
    let long = "é".repeat(65);
    for flag in ["--job", "--endpoint"] {
        let r = charge(&d, &["--cost", "units=1", flag, &long]);
        assert_eq!(r.code, 2, "{flag}: {r:?}");
        assert!(
            r.stderr.contains(&format!(
                "{flag}: a tag of 65 characters is too long: at most 64"
            )),
            "{r:?}"
        );
        let r = d.portion(&[
            "exec", "main", "--cost", "units=1", flag, &long, "--", "true",
        ]);
        assert_eq!(r.code, 2, "{flag}: {r:?}");
    }
    assert_eq!(window(&d, "units")["used"], 0);
    let r = charge(&d, &["--cost", "units=1", "--job", &"é".repeat(64)]);
    assert_eq!(r.code, 0, "{r:?}");

    let warning = "distinct job tags in the windows of credential main (more than 100)";
    for i in 1..=100 {
        let r = charge(&d, &["--cost", "units=1", "--job", &format!("item-{i}")]);
        assert_eq!(r.code, 0, "{r:?}");
    }
    // 101 tags: one is the long one.
    let r = d.portion(&["status", "--format", "openmetrics"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains(&format!("101 {warning}")), "{r:?}");
    assert!(!r.stdout.contains(warning), "stdout stays metrics only");
    assert!(!r.stderr.contains("endpoint tags"), "{r:?}");
    let r = d.portion(&["status", "solo"]);
    assert!(!r.stderr.contains(warning), "{r:?}");
}

/// A wrong `PORTION_FILE_MODE` stops `charge` and `exec` (exit 2) before the
/// store file is made: `charge` used to create it with the default mode.
#[test]
fn a_wrong_file_mode_stops_before_the_store_is_made() {
    let d = Deployment::new("");
    d.write(&config(&embedded_store(&d), HOURLY_3));
    for args in [
        &["charge", "main", "--cost", "units=1"][..],
        &["exec", "main", "--cost", "units=1", "--", "true"],
    ] {
        let r = crate::common::deployment::run(d.cmd(args).env("PORTION_FILE_MODE", "0777"));
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(r.stderr.contains("PORTION_FILE_MODE=0777: "), "{r:?}");
        assert!(!d.path().join("ledger.sqlite3").exists(), "{args:?}");
        assert!(!d.path().join("state").exists(), "{args:?}");
    }
}
