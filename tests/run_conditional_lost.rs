//! Spending less (issue 27), a lost or rebuilt output: every output has an
//! id, every kept validator and incremental value names the output its page
//! went to, and a run whose output has another id forgets what names the
//! old one and fetches those pages in full (other hosts' kept). Apart from
//! `run_conditional.rs`, whose job and stand-in helpers it shares.

use crate::common::deployment::{Deployment, Ran, embedded_store};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;

use crate::run_conditional::{CONDITIONAL, calls, statuses, touch, yaml};

/// Where a test's job writes: its page folder, or a table in SQLite.
#[derive(Clone, Copy, Debug)]
enum Output {
    Folder,
    Sqlite,
}

const DB: &str = "out/issues.db";

/// `yaml` with the job writing to `output`.
fn yaml_to(output: Output, store: &str, base: &str) -> String {
    yaml_with(output, store, base, CONDITIONAL)
}

/// `yaml` with the job's step `extra` and writing to `output`.
fn yaml_with(output: Output, store: &str, base: &str, extra: &str) -> String {
    let y = yaml(store, base, 100, extra);
    match output {
        Output::Folder => y,
        Output::Sqlite => y.replace(
            "output: out/issues",
            &format!(
                "output: {{ sqlite: {{ path: {DB}, table: issues, items: \"/*\", key: /id }} }}"
            ),
        ),
    }
}

/// Pages (or rows) of the job in its output.
fn written(d: &Deployment, output: Output) -> usize {
    match output {
        Output::Folder => d.outputs("issues").len(),
        Output::Sqlite => rusqlite::Connection::open(d.path().join(DB))
            .unwrap()
            .query_row("SELECT count(*) FROM issues", [], |r| r.get::<_, i64>(0))
            .unwrap() as usize,
    }
}

/// Lose the job's output, as a restore, a move or a rebuild does.
fn lose(d: &Deployment, output: Output) {
    match output {
        Output::Folder => std::fs::remove_dir_all(d.path().join("out/issues")).unwrap(),
        Output::Sqlite => {
            for end in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(d.path().join(format!("{DB}{end}")));
            }
        }
    }
}

/// Run the job (two pages of three issues in each of two repositories, all
/// written), lose its output, run it again: what it writes in all, and
/// that second run (exit 0).
fn run_lose_run(d: &Deployment, output: Output) -> (usize, Ran) {
    let all = match output {
        Output::Folder => 4,
        Output::Sqlite => 12,
    };
    let r = d.portion(&["run"]);
    assert_eq!((r.code, written(d, output)), (0, all), "{output:?} {r:?}");
    lose(d, output);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{output:?} {r:?}");
    (all, r)
}

/// The output lost between runs (probe finding F-304): the next run
/// forgets the validators of the lost output, says so, fetches its pages
/// in full and writes them (else every answer is a 304 and the new output
/// stays empty for good); the run after that gets 304s again.
fn a_lost_output_is_fetched_again_in_full(output: Output, store: &str, d: &Deployment) {
    let up = Standin::start(&["--pages", "2", "--items", "3"]);
    d.write(&yaml_to(output, store, &up.base()));
    // (two pages of three issues in each of two repositories)
    let (all, r) = run_lose_run(d, output);
    assert!(
        r.stderr.contains(
            "the output of job issues was replaced since its last run here: its 4 validator(s) and 0 incremental value(s) are forgotten, the pages are fetched in full"
        ),
        "{output:?} {r:?}"
    );
    let asked = statuses(&up, 4);
    assert_eq!(asked.len(), 4, "{output:?} {asked:?}");
    assert!(asked.iter().all(|s| s.2 == 200), "{output:?} {asked:?}");
    assert_eq!(written(d, output), all, "{output:?}");
    // Kept again, naming the new output: the next run is all 304s.
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{output:?} {r:?}");
    assert!(!r.stderr.contains("forgotten"), "{output:?} {r:?}");
    assert_eq!(
        statuses(&up, 8),
        [("a/one".into(), 1, 304), ("a/two".into(), 1, 304)],
        "{output:?}"
    );
}

/// `test` on the embedded store, then on a Redis, each with a fresh
/// deployment.
fn on_each_store(test: impl Fn(&str, &Deployment)) {
    let d = Deployment::new("");
    test(&embedded_store(&d), &d);
    let redis = RedisServer::start();
    let d = Deployment::new("");
    test(&redis.url(), &d);
}

#[test]
fn a_lost_folder_is_fetched_again_in_full() {
    on_each_store(|store, d| a_lost_output_is_fetched_again_in_full(Output::Folder, store, d));
}

#[test]
fn a_lost_database_is_fetched_again_in_full() {
    on_each_store(|store, d| a_lost_output_is_fetched_again_in_full(Output::Sqlite, store, d));
}

/// Two hosts on one store, host A's output lost: A forgets the validators
/// of its lost output and fetches in full; host B's, naming its own
/// output, kept all along, still get 304s (and A's new ones do too).
#[test]
fn a_lost_output_forgets_only_its_own_validators() {
    let redis = RedisServer::start();
    let up = Standin::start(&["--pages", "2", "--items", "3"]);
    let (a, b) = (Deployment::new(""), Deployment::new(""));
    for d in [&a, &b] {
        d.write(&yaml(&redis.url(), &up.base(), 100, CONDITIONAL));
    }
    assert_eq!(a.portion(&["run"]).code, 0);
    // a/one changed: B fetches its page 1, so that validator is B's.
    touch(&up, "a/one");
    assert_eq!(b.portion(&["run"]).code, 0);
    assert_eq!(
        statuses(&up, 4),
        [
            ("a/one".into(), 1, 200),
            ("a/one".into(), 2, 304),
            ("a/two".into(), 1, 304)
        ]
    );
    lose(&a, Output::Folder);
    let r = a.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr
            .contains("its 3 validator(s) and 0 incremental value(s) are forgotten"),
        "{r:?}"
    );
    // a/one's page 1 is B's (304: it is in B's folder); its page 2 and
    // a/two's pages were A's: fetched in full.
    assert_eq!(
        statuses(&up, 7),
        [
            ("a/one".into(), 1, 304),
            ("a/two".into(), 1, 200),
            ("a/two".into(), 2, 200)
        ]
    );
    assert_eq!(a.outputs("issues").len(), 2);
    let r = b.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        statuses(&up, 10),
        [("a/one".into(), 1, 304), ("a/two".into(), 1, 304)]
    );
}

/// (repository, page, `since=` value or "-") of each request from the
/// `from`th on.
fn sinces(up: &Standin, from: usize) -> Vec<(String, u32, String)> {
    calls(up)[from..]
        .iter()
        .map(|s| {
            let q = s.query.clone().unwrap_or_default();
            let v = q
                .split('&')
                .find_map(|p| p.strip_prefix("since="))
                .unwrap_or("-")
                .replace("%3A", ":");
            (s.region.clone(), s.page, v)
        })
        .collect()
}

/// The output of an incremental job lost between runs (F-304 as for
/// validators): the next run forgets the values its walks saw, says so,
/// asks from the start as a first run does (no `since=`) and writes the
/// older items again (else only what changed since would be, for good);
/// the run after that asks with `since=` again.
fn a_lost_output_forgets_incremental_values(output: Output, store: &str, d: &Deployment) {
    let up = Standin::start(&["--pages", "2", "--items", "3"]);
    // (one issue of each newer than the rest: `since=` then asks for it only)
    touch(&up, "a/one");
    touch(&up, "a/two");
    let inc = "        incremental: { from: /*/updated_at, param: since }\n";
    d.write(&yaml_with(output, store, &up.base(), inc));
    let (all, r) = run_lose_run(d, output);
    assert!(
        r.stderr.contains(
            "the output of job issues was replaced since its last run here: its 0 validator(s) and 2 incremental value(s) are forgotten"
        ),
        "{output:?} {r:?}"
    );
    let asked = sinces(&up, 4);
    assert_eq!(asked.len(), 4, "{output:?} {asked:?}");
    assert!(asked.iter().all(|s| s.2 == "-"), "{output:?} {asked:?}");
    assert_eq!(written(d, output), all, "{output:?}");
    // The values seen again, naming the new output: asked with since=.
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{output:?} {r:?}");
    assert!(!r.stderr.contains("forgotten"), "{output:?} {r:?}");
    assert_eq!(
        sinces(&up, 8),
        [
            ("a/one".into(), 1, "2024-01-01T00:00:01Z".into()),
            ("a/two".into(), 1, "2024-01-01T00:00:02Z".into())
        ],
        "{output:?}"
    );
}

#[test]
fn a_lost_folder_forgets_incremental_values() {
    on_each_store(|store, d| a_lost_output_forgets_incremental_values(Output::Folder, store, d));
}

#[test]
fn a_lost_database_forgets_incremental_values() {
    on_each_store(|store, d| a_lost_output_forgets_incremental_values(Output::Sqlite, store, d));
}

/// Validators kept before outputs had ids: a host whose output holds pages
/// of the job takes them as its own (no refetch on upgrading); one whose
/// output holds nothing of the job (lost before the upgrade, or new)
/// forgets them and fetches in full, once.
#[test]
fn validators_kept_before_outputs_had_ids() {
    use portion::ledger::{EmbeddedLedger, JobStore};
    let up = Standin::start(&["--pages", "2", "--items", "3"]);
    let d = Deployment::new("");
    d.write(&yaml(&embedded_store(&d), &up.base(), 100, CONDITIONAL));
    assert_eq!(d.portion(&["run"]).code, 0);
    // As an older portion kept them: no output's id, no place's.
    let downgrade = || {
        let ledger = EmbeddedLedger::open(&d.path().join("ledger.sqlite3")).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            for (f, v) in ledger.map_read("issues:conditional").await.unwrap() {
                let new = if f.starts_with("output ") {
                    String::new()
                } else {
                    let mut v: serde_json::Value = serde_json::from_str(&v).unwrap();
                    assert!(v["out"].is_string(), "{v}");
                    v.as_object_mut().unwrap().remove("out");
                    v.to_string()
                };
                ledger
                    .map_put("issues:conditional", &[(f.clone(), new)])
                    .await
                    .unwrap();
            }
        });
    };
    downgrade();
    std::fs::remove_file(d.path().join("out/issues/.portion-output")).unwrap();
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        statuses(&up, 4),
        [("a/one".into(), 1, 304), ("a/two".into(), 1, 304)],
        "{r:?}"
    );
    // Taken as this output's: losing it now forgets them.
    lose(&d, Output::Folder);
    let r = d.portion(&["run"]);
    assert!(
        r.stderr.contains("was replaced since its last run here"),
        "{r:?}"
    );
    assert_eq!(statuses(&up, 6).len(), 4, "{r:?}");
    // Lost before the upgrade: forgotten, fetched in full.
    downgrade();
    lose(&d, Output::Folder);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr
            .contains("holds nothing of it, and validators were kept before outputs had ids"),
        "{r:?}"
    );
    assert!(statuses(&up, 10).iter().all(|s| s.2 == 200), "{r:?}");
    assert_eq!(d.outputs("issues").len(), 4);
}

/// `check` and `run --dry-run` read only: no output id is made.
#[test]
fn check_and_dry_run_make_no_output_id() {
    let up = Standin::start(&["--pages", "1", "--items", "1"]);
    let d = Deployment::new("");
    d.write(&yaml(&embedded_store(&d), &up.base(), 100, CONDITIONAL));
    assert_eq!(d.portion(&["check"]).code, 0);
    assert_eq!(d.portion(&["run", "--dry-run"]).code, 0);
    assert!(!d.path().join("out/issues/.portion-output").exists());
    assert_eq!(d.portion(&["run"]).code, 0);
    assert!(d.path().join("out/issues/.portion-output").exists());
}

/// Incremental values kept before outputs had ids (a bare value): taken
/// as the output's when it holds pages of the job (`since=` still sent),
/// else forgotten (asked from the start), as validators are.
#[test]
fn incremental_values_kept_before_outputs_had_ids() {
    use portion::ledger::{EmbeddedLedger, JobStore};
    let up = Standin::start(&["--pages", "2", "--items", "3"]);
    touch(&up, "a/one");
    let d = Deployment::new("");
    let inc = "        incremental: { from: /*/updated_at, param: since }\n";
    d.write(&yaml(&embedded_store(&d), &up.base(), 100, inc));
    assert_eq!(d.portion(&["run"]).code, 0);
    // As an older portion kept them: bare values, no place's id.
    let downgrade = || {
        let ledger = EmbeddedLedger::open(&d.path().join("ledger.sqlite3")).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            for (f, v) in ledger.map_read("issues:conditional").await.unwrap() {
                let new = if f.starts_with("since ") {
                    // (bare already when it was never taken as an output's)
                    serde_json::from_str::<serde_json::Value>(&v)
                        .ok()
                        .and_then(|j| j["value"].as_str().map(str::to_string))
                        .unwrap_or(v)
                } else {
                    String::new()
                };
                ledger
                    .map_put("issues:conditional", &[(f.clone(), new)])
                    .await
                    .unwrap();
            }
        });
    };
    downgrade();
    std::fs::remove_file(d.path().join("out/issues/.portion-output")).unwrap();
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stderr.contains("forgotten"), "{r:?}");
    let epoch = "2024-01-01T00:00:00Z".to_string();
    assert_eq!(
        sinces(&up, 4),
        [
            ("a/one".into(), 1, "2024-01-01T00:00:01Z".into()),
            ("a/two".into(), 1, epoch.clone()),
            ("a/two".into(), 2, epoch.clone())
        ],
        "{r:?}"
    );
    // Lost before the upgrade: forgotten, asked from the start.
    downgrade();
    lose(&d, Output::Folder);
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr
            .contains("its 0 validator(s) and 2 incremental value(s) are forgotten"),
        "{r:?}"
    );
    let asked = sinces(&up, 7);
    assert_eq!(asked.len(), 4, "{asked:?}");
    assert!(asked.iter().all(|s| s.2 == "-"), "{asked:?}");
    assert_eq!(d.outputs("issues").len(), 4);
}
