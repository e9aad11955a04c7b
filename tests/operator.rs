//! The operator's surface, through the real binary: `portion status` and
//! `portion run --dry-run` on a known ledger state (snapshots of the table and
//! the JSON, taken with the process's wall clock frozen by libfaketime),
//! dry-run sending and charging nothing, output to a closed pipe, log
//! formats, completions, the man page and the systemd units.

use std::time::Duration;

use portion::ledger::{At, EmbeddedLedger, Ledger, LockOutcome};

use crate::common::deployment::{
    Deployment, WIDE, deployment_yaml, portion, portion_bin, run, trending, videos_job,
};
use crate::common::known::{
    REPORT_TIME, at_report_time, frozen_clock_cmd, known_config, known_ledger, report_time_us,
};
use crate::common::standin::Standin;
use portion::ledger::JobStore;

fn scrub(d: &Deployment, text: &str) -> String {
    text.replace(&d.path().display().to_string(), "[DIR]")
}

#[test]
fn status_on_a_known_ledger() {
    let d = Deployment::new(&known_config("http://127.0.0.1:9"));
    known_ledger(&d);
    let r = at_report_time(&d, &["status"]);
    assert_eq!(r.code, 0, "{r:?}");
    insta::assert_snapshot!("status_table", scrub(&d, &r.stdout));
    let r = at_report_time(&d, &["status", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let json: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        json["at"], REPORT_TIME,
        "the status was not made on the frozen clock"
    );
    insta::assert_snapshot!(
        "status_json",
        scrub(&d, &serde_json::to_string_pretty(&json).unwrap())
    );
    assert_eq!(json["store_exists"], true);
    // Spot checks that do not depend on the snapshot being reviewed.
    let units_1h = &json["credentials"][0]["pools"][0]["windows"][1];
    assert_eq!(units_1h["used"], 5);
    assert_eq!(units_1h["remaining"], 25);
    assert_eq!(units_1h["ratelimit"]["header"], "\"units-1h\";r=25;t=1800");
    assert_eq!(json["credentials"][0]["pools"][0]["windows"][0]["used"], 20);

    // One credential by name; an unknown one is a usage error.
    assert_eq!(at_report_time(&d, &["status", "main"]).code, 0);
    let r = at_report_time(&d, &["status", "nope"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("no credential named 'nope'"), "{r:?}");
}

#[test]
fn a_sub_second_window_is_shown_as_it_is_configured() {
    // `per: 1s 500ms` used to show as "2s" in the table and its name, with
    // `w=1` in the RateLimit policy: three different windows for one.
    let d = Deployment::new(&known_config("http://127.0.0.1:9").replace(
        "      search:\n",
        "      burst:\n        - { limit: 5, per: 1s 500ms }\n      search:\n",
    ));
    let r = d.portion(&["status"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.lines().any(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.starts_with(&["burst", "1s500ms", "5"])
        }),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("burst  2s"), "{}", r.stdout);
    let json = d.status_json();
    let burst = &json["credentials"][0]["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pool"] == "burst")
        .unwrap()["windows"][0]["ratelimit"];
    assert_eq!(burst["policy"], "burst-1s500ms");
    // `w` is whole seconds: the window rounded up, the span over which at
    // most `q` still holds (never down, which would promise more).
    assert_eq!(burst["w"], 2);
    assert_eq!(burst["policy_header"], "\"burst-1s500ms\";q=5;w=2");
}

#[test]
fn windows_of_one_length_get_distinct_ratelimit_policy_names() {
    // Two 1h windows in pool units were both named "units-1h".
    let d = Deployment::new(&known_config("http://127.0.0.1:9").replace(
        "        - { limit: 30, per: 1h }\n",
        "        - { limit: 30, per: 1h }\n        - { limit: 50, per: 1h }\n        \
         - { limit: 50, per: 1h }\n",
    ));
    let names = || -> Vec<String> {
        let json = d.status_json();
        json["credentials"][0]["pools"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["windows"].as_array().unwrap().clone())
            .map(|w| w["ratelimit"]["policy"].as_str().unwrap().to_string())
            .collect()
    };
    let first = names();
    assert_eq!(
        first,
        [
            "units-24h",
            "units-1h-30",
            "units-1h-50-3",
            "units-1h-50-4",
            "search-24h"
        ],
    );
    assert_eq!(names(), first, "the names must not change between calls");
}

#[test]
fn the_host_name_is_read_without_proc_sys() {
    // The unit sets ProcSubset=pid, which hides /proc/sys: the host name in
    // a block's reason (and a lock's holder) must not come from there. Run
    // with /proc/sys hidden (a private mount namespace, as an unprivileged
    // user too) into the upstream's GitHub-style rate-limit answer.
    let up = Standin::start(&["--units", "1", "--answer-github", "--window", "10m"]);
    let d = trending(&up, "embedded", &["US"], 3, "fail_closed");
    let r = run(&mut d.cmd_via(
        &[
            "unshare",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            "mount -t tmpfs none /proc/sys && exec \"$0\" \"$@\"",
        ],
        &["run"],
    ));
    assert_eq!(r.code, 75, "{r:?}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let json = d.status_json();
    let reason = json["credentials"][0]["blocked_reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!(", {} pid ", host.trim())),
        "{reason}"
    );
}

#[test]
fn dry_run_plans_on_a_known_ledger() {
    let d = Deployment::new(&known_config("http://127.0.0.1:9"));
    known_ledger(&d);
    let r = at_report_time(&d, &["run", "--dry-run"]);
    assert_eq!(r.code, 0, "{r:?}");
    insta::assert_snapshot!("plan_table", scrub(&d, &r.stdout));
    let r = at_report_time(&d, &["run", "--dry-run", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let json: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        json["at"], REPORT_TIME,
        "the plan was not made on the frozen clock"
    );
    insta::assert_snapshot!(
        "plan_json",
        scrub(&d, &serde_json::to_string_pretty(&json).unwrap())
    );
    // trending resumes at GB page 1 and has 25 units left in the 1h window:
    // its 8 remaining pages (GB 1-2, DE 0-2, US 0-2) fit.
    let trending = &json["credentials"][0]["jobs"][0];
    assert_eq!(trending["calls_per_run"], 9);
    assert_eq!(trending["next_run"]["outcome"], "fits");
    assert_eq!(trending["next_run"]["calls"], 8);
    // 48 runs a day of 9 units cannot fit a 90-unit day.
    assert_eq!(trending["schedule"]["windows"][0]["fits"], false);
}

#[test]
fn dry_run_sends_nothing_charges_nothing_and_leaves_cursor_and_lock() {
    let up = Standin::start(&[]);
    let d = Deployment::new(&known_config(&up.base()));
    known_ledger(&d);
    let before = at_report_time(&d, &["status", "--json"]).stdout;
    // Someone else holds trending's lock: planning does not need it.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ledger = EmbeddedLedger::open(&d.path().join("ledger.sqlite3")).unwrap();
    let ttl = Duration::from_secs(600);
    assert_eq!(
        rt.block_on(ledger.take_lock("trending", "someone", ttl))
            .unwrap(),
        LockOutcome::Held
    );

    for args in [
        &["run", "--dry-run"][..],
        &["run", "--dry-run", "--json"],
        &["run", "trending", "--dry-run"],
    ] {
        let r = run(&mut d.cmd(args));
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
    }
    assert!(up.seen().is_empty(), "a dry run sent {:?}", up.seen());
    assert_eq!(
        at_report_time(&d, &["status", "--json"]).stdout,
        before,
        "nothing charged, cursor unchanged"
    );
    match rt
        .block_on(ledger.take_lock("trending", "me", ttl))
        .unwrap()
    {
        LockOutcome::Busy { holder, .. } => assert_eq!(holder, "someone"),
        other => panic!("the lock changed hands: {other:?}"),
    }
    assert!(!d.path().join("out").exists(), "no output written");
}

/// On a fresh machine, `status` and `run --dry-run` name the store they
/// read and say that it does not exist yet; they create nothing (no store
/// file, no folder, no history), so that a status run as root before the
/// service's first run leaves nothing the service cannot write.
#[test]
fn status_and_dry_run_never_create_a_store() {
    let up = Standin::start(&["--pages", "1"]);
    for store in ["embedded:ledger.sqlite3", "embedded"] {
        let d = Deployment::new(
            &known_config(&up.base())
                .replace("store: embedded:ledger.sqlite3", &format!("store: {store}")),
        );
        let file = if store == "embedded" {
            d.path().join("state/portion/ledger.sqlite3")
        } else {
            d.path().join("ledger.sqlite3")
        };
        let before = std::fs::read_dir(d.path()).unwrap().count();

        let r = d.portion(&["status"]);
        assert_eq!(r.code, 0, "{store}: {r:?}");
        assert!(
            r.stdout.starts_with(&format!(
                "store: embedded {} does not exist yet: no run has charged anything through it",
                file.display()
            )),
            "{store}: {r:?}"
        );
        assert!(r.stdout.contains("0 charges recorded"), "{r:?}");
        assert!(r.stdout.contains("job trending has not run yet"), "{r:?}");
        let json = d.status_json();
        assert_eq!(json["store"], format!("embedded {}", file.display()));
        assert_eq!(json["store_exists"], false);
        assert_eq!(
            json["credentials"][0]["pools"][0]["windows"][0]["remaining"],
            90
        );

        let r = d.portion(&["run", "--dry-run"]);
        assert_eq!(r.code, 0, "{store}: {r:?}");
        assert!(
            r.stdout.contains(&format!(
                "store: embedded {} (does not exist yet: nothing charged, planned against full budgets; the dry run created nothing)",
                file.display()
            )),
            "{store}: {r:?}"
        );
        assert!(
            r.stdout
                .contains("next run: fits what remains now (9 calls)"),
            "{r:?}"
        );
        assert_eq!(
            std::fs::read_dir(d.path()).unwrap().count(),
            before,
            "{store}: status and the dry run created something in {}",
            d.path().display()
        );
        assert!(!file.exists() && !d.path().join("state").exists());

        // The first run creates it; status then reads it.
        let r = run(d
            .cmd(&["run", "trending"])
            .env("PORTION_TEST_NEVER_SET", "demo-key"));
        assert_eq!(r.code, 0, "{r:?}");
        assert!(file.exists());
        let r = d.portion(&["status"]);
        assert!(
            r.stdout
                .starts_with(&format!("store: embedded {}\n\n", file.display())),
            "{r:?}"
        );
        assert!(r.stdout.contains("3 charges recorded"), "{r:?}");
        assert_eq!(d.status_json()["store_exists"], true);
    }
}

#[test]
fn dry_run_with_the_store_down_plans_against_full_budgets() {
    let d = Deployment::new(
        &known_config("http://127.0.0.1:9")
            .replace("embedded:ledger.sqlite3", "redis://127.0.0.1:1/0"),
    );
    let r = run(&mut d.cmd(&["run", "--dry-run"]));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("the store is unreachable: remaining budgets are assumed full"),
        "{r:?}"
    );
    assert!(
        r.stdout
            .contains("next run: fits what remains now (9 calls)"),
        "{r:?}"
    );
    // status has nothing to report without its store: 69.
    let r = run(&mut d.cmd(&["status"]));
    assert_eq!(r.code, 69, "{r:?}");
}

#[test]
fn a_blocked_credential_shows_in_status_and_plan() {
    let d = Deployment::new(&known_config("http://127.0.0.1:9"));
    known_ledger(&d);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ledger = EmbeddedLedger::open(&d.path().join("ledger.sqlite3")).unwrap();
    let until = report_time_us() + 5 * 3_600_000_000;
    rt.block_on(ledger.block(
        "main",
        until,
        "upstream 403 quotaExceeded (job trending)",
        At::Fixed(report_time_us()),
    ))
    .unwrap();
    let r = at_report_time(&d, &["status"]);
    assert!(
        r.stdout.contains("BLOCKED by the upstream until 2026-11-20 17:00:00 +00:00 (in 5h (17:00:00)): upstream 403 quotaExceeded (job trending)"),
        "{r:?}"
    );
    let r = at_report_time(&d, &["run", "--dry-run"]);
    assert!(
        r.stdout
            .contains("next run: sends nothing: blocked until 2026-11-20 17:00:00 +00:00"),
        "{r:?}"
    );
}

/// Text the store holds reaches the terminal inert: a tag stored by an
/// older build or another host (this one refuses it), a block's reason and
/// a cursor's region, each with a tab, a right-to-left override and an
/// escape sequence, were printed raw by `status` (the reason by `charge`
/// too). The JSON keeps them as
/// they are (JSON escapes the controls).
#[test]
fn status_shows_the_stores_text_inert() {
    let d = Deployment::new(&known_config("http://127.0.0.1:9"));
    known_ledger(&d);
    let evil = "evil\u{202e}txt.exe\x1b[31mRED";
    let db = rusqlite::Connection::open(d.path().join("ledger.sqlite3")).unwrap();
    // Tags are ENDPOINT<TAB>JOB.
    db.execute(
        "UPDATE log SET tag = ?1 WHERE rowid = (SELECT MAX(rowid) FROM log WHERE pool = 'units')",
        [format!("exec\t{evil}")],
    )
    .unwrap();
    db.execute(
        "UPDATE log SET tag = ?1 WHERE pool = 'search'",
        [format!("{evil}\tmusic")],
    )
    .unwrap();
    db.execute(
        "UPDATE credential SET blocked_until = ?1, blocked_reason = ?2 WHERE name = 'main'",
        rusqlite::params![
            report_time_us() + 3_600_000_000,
            format!("said {evil}\tand\nmore")
        ],
    )
    .unwrap();
    db.execute(
        "UPDATE job_cursor SET cursor = json_set(cursor, '$.region', ?1) WHERE job = 'trending'",
        [evil],
    )
    .unwrap();
    drop(db);

    let r = at_report_time(&d, &["status"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stdout.contains(['\x1b', '\u{202e}', '\t']), "{r:?}");
    let shown = "evil\\u{202e}txt.exe\\u{1b}[31mRED";
    for (line, want) in [
        ("spent by endpoint:", format!("search 24h: {shown} 3")),
        (
            "spent by job:",
            format!("units 24h: {shown} 1, trending 19"),
        ),
        ("BLOCKED", format!("said {shown} and more")),
        ("job trending", format!("resumes at {shown} step 0 page 1")),
    ] {
        let found = r.stdout.lines().find(|l| l.contains(line));
        assert!(found.is_some_and(|l| l.contains(&want)), "{line}: {r:?}");
    }

    // `charge` says why it is refused the same way.
    let r = at_report_time(&d, &["charge", "main", "--cost", "units=1"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(
        r.stderr.contains(&format!("said {shown} and more")),
        "{r:?}"
    );
    // So does a run that meets the block.
    let r =
        run(frozen_clock_cmd(&d, &["run", "trending"]).env("PORTION_TEST_NEVER_SET", "demo-key"));
    assert_eq!(r.code, 75, "{r:?}");
    assert!(!r.stderr.contains(['\x1b', '\u{202e}']), "{r:?}");
    assert!(r.stderr.contains(&format!("said {shown}")), "{r:?}");

    let r = at_report_time(&d, &["status", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let units_24h = &json["credentials"][0]["pools"][0]["windows"][0];
    assert_eq!(units_24h["by_job"][evil], 1, "{r:?}");
}

#[test]
fn output_to_a_closed_pipe_exits_quietly() {
    let d = Deployment::new(&known_config("http://127.0.0.1:9"));
    known_ledger(&d);
    let err = d.path().join("stderr");
    // `true` exits without reading: every write of portion meets a closed pipe.
    let script = format!(
        "set -o pipefail; {} -c {} status 2>{} | true; echo $?",
        portion_bin().display(),
        d.config().display(),
        err.display()
    );
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env("HOME", d.path())
        .output()
        .unwrap();
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0", "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn logs_follow_the_journal_and_the_json_format() {
    use std::os::unix::fs::MetadataExt;
    let up = Standin::start(&[]);
    let d = Deployment::new(&deployment_yaml(
        "embedded:ledger.sqlite3",
        WIDE,
        "fail_closed",
        &[videos_job("trending", "main", &["US"], 1, &up.base())],
    ));
    // stderr is "the journal" when JOURNAL_STREAM names its device and inode.
    let log = d.path().join("journal");
    let file = std::fs::File::create(&log).unwrap();
    let m = file.metadata().unwrap();
    let status = d
        .cmd(&["run"])
        .env("JOURNAL_STREAM", format!("{}:{}", m.dev(), m.ino()))
        .stderr(file)
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("INFO job trending: finished"), "{text}");
    assert!(
        text.lines().all(|l| !l.starts_with("20")),
        "no timestamps under the journal: {text}"
    );
    assert!(
        !text.contains('\x1b'),
        "no colour under the journal: {text}"
    );

    // Elsewhere (cron, a file): timestamps; with --log-format json, JSON lines.
    let r = d.portion(&["run"]);
    assert!(r.stderr.lines().all(|l| l.starts_with("20")), "{r:?}");
    let r = d.portion(&["--log-format", "json", "run"]);
    assert_eq!(r.code, 0, "{r:?}");
    for line in r.stderr.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["fields"]["message"].is_string(), "{line}");
    }
}

#[test]
fn completions_and_man_page_come_from_the_cli_definition() {
    let home = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let r = run(portion(home.path()).args(["completions", shell]));
        assert_eq!(r.code, 0, "{r:?}");
        assert!(r.stdout.contains("dry-run"), "{shell}: {}", r.stdout);
    }
    let r = run(portion(home.path()).arg("man"));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.starts_with(".ie") || r.stdout.contains(".TH portion"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("status"), "{}", r.stdout);
}

#[test]
fn systemd_units_verify() {
    // Tests never skip: a machine without systemd-analyze fails here (`.ci/run`
    // installs it, from Debian's package systemd).
    let out = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .expect("systemd-analyze is missing (Debian package systemd; bash .ci/run installs it)");
    assert!(out.status.success());
    // verify wants an instance and an executable ExecStart: use this build.
    let dir = tempfile::tempdir().unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let service = std::fs::read_to_string(format!("{root}/systemd/portion@.service")).unwrap();
    let service = service.replace(
        "/usr/local/bin/portion",
        &portion_bin().display().to_string(),
    );
    std::fs::write(dir.path().join("portion@demo.service"), &service).unwrap();
    std::fs::copy(
        format!("{root}/systemd/portion@.timer"),
        dir.path().join("portion@demo.timer"),
    )
    .unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .args([
            "verify",
            "--man=no",
            "./portion@demo.service",
            "./portion@demo.timer",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    // systemd-analyze reports a bad directive as a warning, still exiting 0.
    assert!(
        !text.contains("portion@demo"),
        "systemd-analyze found problems:\n{text}"
    );

    // The hardening: an overall exposure of 1.1 or better (`--threshold`
    // counts tenths: the command fails above 11), with the directives that
    // get it there and bound a run. ProcSubset=pid took away one more
    // finding but the rounded level stays 1.1 (`--threshold=10` fails).
    let out = std::process::Command::new("systemd-analyze")
        .args([
            "security",
            "--offline=true",
            "--threshold=11",
            "--no-pager",
            "./portion@demo.service",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let exposure = text
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("no overall exposure in:\n{text}"));
    assert!(out.status.success(), "{exposure}\n{text}");
    for directive in [
        "TimeoutStartSec=25min",
        "MemoryMax=256M",
        "PrivateUsers=yes",
        "PrivateMounts=yes",
        "UMask=0077",
        "ProcSubset=pid",
    ] {
        assert!(
            service.lines().any(|l| l == directive),
            "portion@.service lacks {directive}"
        );
    }
}

/// `systemd/crontab.example`'s line, run as cron runs it (`bash -c`, since
/// the file sets `SHELL=/bin/bash`) with a fake `portion` that exits 0, 75 and
/// 1 and a fake `logger`: 0 and 75 are success and print nothing (cron
/// mails nothing); 1 fails the line and prints the run's log, which cron
/// mails; the log goes to syslog every time.
#[test]
fn the_crontab_line_treats_75_as_success_and_mails_failures() {
    let root = env!("CARGO_MANIFEST_DIR");
    let crontab = std::fs::read_to_string(format!("{root}/systemd/crontab.example")).unwrap();
    assert!(crontab.lines().any(|l| l == "SHELL=/bin/bash"), "{crontab}");
    let line = crontab
        .lines()
        .find(|l| l.starts_with("*/30"))
        .expect("a */30 line");
    // Cron's five time fields, then the command, given to the shell as is.
    let mut rest = line;
    for _ in 0..5 {
        rest = rest.trim_start();
        rest = &rest[rest.find(char::is_whitespace).unwrap()..];
    }
    let command = rest.trim();
    assert!(
        !command.contains('%'),
        "cron turns an unescaped % into a newline: {command}"
    );

    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let script = |name: &str, body: &str| {
        use std::os::unix::fs::PermissionsExt;
        let p = bin.join(name);
        std::fs::write(&p, format!("#!/bin/bash\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    };
    let fake_portion = script(
        "portion",
        "echo \"fake portion $*, key $YT_API_KEY\"; echo 'a log line on stderr' >&2; exit \"$FAKE_EXIT\"",
    );
    let syslog = dir.path().join("syslog");
    script(
        "logger",
        &format!("{{ echo \"[$*]\"; cat; }} >> {}", syslog.display()),
    );
    let key = dir.path().join("youtube.key");
    std::fs::write(&key, "the-key\n").unwrap();
    let command = command
        .replace(
            "/usr/local/bin/portion",
            &fake_portion.display().to_string(),
        )
        .replace("/etc/portion/youtube.key", &key.display().to_string());
    assert!(
        command.contains(&*fake_portion.display().to_string()),
        "{command}"
    );

    for (code, want) in [(0, 0), (75, 0), (1, 1)] {
        let _ = std::fs::remove_file(&syslog);
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(&command)
            .env(
                "PATH",
                format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
            )
            .env("FAKE_EXIT", code.to_string())
            .output()
            .unwrap();
        let mailed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            out.status.code(),
            Some(want),
            "portion exit {code}: {mailed}"
        );
        let logged = std::fs::read_to_string(&syslog).unwrap();
        assert!(
            logged.starts_with(
                "[-t portion]\nfake portion -c /etc/portion/youtube.yaml run, key the-key\n"
            ) && logged.contains("a log line on stderr"),
            "portion exit {code}: {logged}"
        );
        if want == 0 {
            assert_eq!(mailed, "", "portion exit {code}: cron would mail this");
        } else {
            assert!(
                mailed.starts_with(&format!("portion exited {code}:\nfake portion -c"))
                    && mailed.contains("a log line on stderr"),
                "portion exit {code}: cron mails {mailed:?}"
            );
        }
    }
}

#[test]
fn a_progress_line_only_on_a_terminal() {
    let up = Standin::start(&["--pages", "2"]);
    let d = trending(&up, "embedded", &["US", "GB"], 2, "fail_closed");
    // Under cron or systemd (stderr a pipe here): no progress line.
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stderr.contains("\x1b[2K"), "{r:?}");
    // On a terminal (`script` gives the run a pseudo-terminal): one line, redrawn.
    let cmd = format!(
        "{} -c {} run",
        portion_bin().display(),
        d.config().display()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("HOME", d.path())
        .output()
        .expect("script(1), from util-linux, gives the run a terminal");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("\r\x1b[2Ktrending: regions 1/2, 3 calls, spent units 3"),
        "{text:?}"
    );
}

#[test]
fn status_is_coloured_on_a_terminal_unless_no_color() {
    let d = Deployment::new(&known_config("http://127.0.0.1:9"));
    known_ledger(&d);
    let status = |no_color: bool| {
        let cmd = format!(
            "{} -c {} status",
            portion_bin().display(),
            d.config().display()
        );
        let mut c = std::process::Command::new("script");
        c.args(["-qec", &cmd, "/dev/null"]).env("HOME", d.path());
        if no_color {
            c.env("NO_COLOR", "1");
        } else {
            c.env_remove("NO_COLOR");
        }
        let out = c.output().expect("script(1)");
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let coloured = status(false);
    assert!(coloured.contains("\x1b[1mmain\x1b[0m"), "{coloured:?}");
    let plain = status(true);
    assert!(!plain.contains('\x1b'), "{plain:?}");
    assert!(plain.contains("main  ·  "), "{plain:?}");
}
