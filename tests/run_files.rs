//! The files a run writes, through the real binary: pages are never
//! replaced, temporary files belong to one job, and what portion creates is
//! not readable by everyone.

use crate::common::deployment::{Deployment, WIDE, deployment_yaml, embedded_store, videos_job};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;

/// Moving a deployment to a new store (here from the embedded file to a
/// Redis) loses the job's cursor, so the store would start again at run 1:
/// the pages already in the folder decide the run number instead, and a
/// page planted under run 1's name survives.
#[test]
fn a_new_store_never_replaces_a_page() {
    let up = Standin::start(&["--pages", "1"]);
    let d = Deployment::new("");
    let job = videos_job("trending", "main", &["US", "GB"], 1, &up.base());
    d.write(&deployment_yaml(
        &embedded_store(&d),
        WIDE,
        "fail_closed",
        std::slice::from_ref(&job),
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        d.outputs("trending"),
        [
            "trending.r000001.GB.s0.p000000.json",
            "trending.r000001.US.s0.p000000.json"
        ]
    );
    let marker = d
        .path()
        .join("out/trending/trending.r000001.US.s0.p000000.json");
    std::fs::write(&marker, "{\"marker\": \"must survive\"}").unwrap();

    let redis = RedisServer::start();
    d.write(&deployment_yaml(&redis.url(), WIDE, "fail_closed", &[job]));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains(
            "holds pages of run 1 but the store's cursor says run 0 (a new or reset store?): this run is run 2, so no page is replaced"
        ),
        "{r:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "{\"marker\": \"must survive\"}"
    );
    assert_eq!(
        d.outputs("trending"),
        [
            "trending.r000001.GB.s0.p000000.json",
            "trending.r000001.US.s0.p000000.json",
            "trending.r000002.GB.s0.p000000.json",
            "trending.r000002.US.s0.p000000.json"
        ]
    );
    // The store's own numbering goes on from there.
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("run 3 starts at region US"), "{r:?}");
    assert_eq!(d.outputs("trending").len(), 6);
}

/// Hidden files of a folder, sorted.
/// A stray file named as a page of the last run number there can be stops
/// the job with a clear error, before any charge: no run can be numbered
/// after it (it panicked on the overflow).
#[test]
fn a_page_of_the_last_run_number_stops_the_job_clearly() {
    let up = Standin::start(&["--pages", "1"]);
    let d = Deployment::new("");
    let job = videos_job("trending", "main", &["US"], 1, &up.base());
    d.write(&deployment_yaml(
        &embedded_store(&d),
        WIDE,
        "fail_closed",
        &[job],
    ));
    let out = d.path().join("out/trending");
    std::fs::create_dir_all(&out).unwrap();
    let stray = out.join(format!("trending.r{}.US.s0.p000000.json", u64::MAX));
    std::fs::write(&stray, "{}").unwrap();
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("the last run number there can be"),
        "{r:?}"
    );
    assert!(up.seen().is_empty(), "nothing sent");
    assert!(stray.exists());
}

fn hidden(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    v.sort();
    v
}

/// Two jobs write to one folder, `feed` and `feed.reddit`: a run of `feed`
/// removes what a killed run of `feed` left, and nothing of `feed.reddit`'s,
/// whatever its temporary files are called.
#[test]
fn a_job_removes_only_its_own_leftovers() {
    let up = Standin::start(&["--pages", "1"]);
    let d = Deployment::new("");
    let jobs = ["feed", "feed.reddit"].map(|name| {
        videos_job(name, "main", &["US"], 1, &up.base())
            .replace(&format!("output: out/{name}"), "output: out/shared")
    });
    d.write(&deployment_yaml(
        &embedded_store(&d),
        WIDE,
        "fail_closed",
        &jobs,
    ));
    let shared = d.path().join("out/shared");
    std::fs::create_dir_all(&shared).unwrap();
    let others = [
        // What builds before this one left (a `feed` prefix, but
        // feed.reddit's page), and what a killed run of feed.reddit leaves.
        ".feed.reddit.r000001.US.s0.p000000.json.tmp",
        ".feed.reddit~feed.reddit.r000001.US.s0.p000000.json.tmp",
    ];
    for name in others
        .iter()
        .chain([&".feed~feed.r000009.US.s0.p000000.json.tmp"])
    {
        std::fs::write(shared.join(name), "{\"partial").unwrap();
    }

    let r = d.portion(&["run", "feed"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr
            .contains("removed 1 temporary file(s) a killed run left"),
        "{r:?}"
    );
    assert_eq!(hidden(&shared), others.map(String::from));
    assert!(shared.join("feed.r000001.US.s0.p000000.json").exists());
}

/// A run that holds no lock (the store is unreachable and the job is
/// fail_open, so it runs unmetered) leaves every temporary file alone: a
/// run that holds the lock may be writing it. The next run with the lock
/// removes it.
#[test]
fn leftovers_are_removed_only_under_the_lock() {
    let up = Standin::start(&["--pages", "1"]);
    let d = Deployment::new("");
    let job = videos_job("trending", "main", &["US"], 1, &up.base());
    d.write(&deployment_yaml(
        "redis://127.0.0.1:1/0",
        WIDE,
        "fail_open",
        std::slice::from_ref(&job),
    ));
    let out = d.path().join("out/trending");
    std::fs::create_dir_all(&out).unwrap();
    let leftover = ".trending~trending.r000009.US.s0.p000000.json.tmp";
    std::fs::write(out.join(leftover), "{\"partial").unwrap();

    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("UNMETERED RUN"), "{r:?}");
    assert_eq!(hidden(&out), [leftover]);

    d.write(&deployment_yaml(
        &embedded_store(&d),
        WIDE,
        "fail_open",
        &[job],
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(hidden(&out).is_empty(), "{:?}", hidden(&out));
}

/// The mode of a file, permission bits only.
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// Under the usual umask 022 (which left pages and the ledger 0644, API
/// answers readable by every user of the host), what portion creates is 0640;
/// `PORTION_FILE_MODE` sets another mode, and a wrong one stops the run
/// before anything is charged or sent (exit 2).
#[test]
fn pages_the_ledger_and_the_history_are_not_world_readable() {
    let umask = ["bash", "-c", "umask 022 && exec \"$0\" \"$@\""];
    for (file_mode, want) in [(None, 0o640), (Some("0600"), 0o600), (Some("0644"), 0o644)] {
        let up = Standin::start(&["--pages", "1"]);
        let d = Deployment::new("");
        let job = videos_job("trending", "main", &["US"], 1, &up.base());
        d.write(&deployment_yaml(
            &embedded_store(&d),
            WIDE,
            "fail_closed",
            &[job],
        ));
        let mut cmd = d.cmd_via(&umask, &["run"]);
        if let Some(m) = file_mode {
            cmd.env("PORTION_FILE_MODE", m);
        }
        let r = crate::common::deployment::run(&mut cmd);
        assert_eq!(r.code, 0, "{r:?}");
        for file in [
            "out/trending/trending.r000001.US.s0.p000000.json",
            "ledger.sqlite3",
            "state/portion/history.json",
        ] {
            assert_eq!(
                mode(&d.path().join(file)),
                want,
                "{file} with PORTION_FILE_MODE={file_mode:?}"
            );
        }
    }

    let up = Standin::start(&["--pages", "1"]);
    let d = Deployment::new("");
    let job = videos_job("trending", "main", &["US"], 1, &up.base());
    d.write(&deployment_yaml(
        &embedded_store(&d),
        WIDE,
        "fail_closed",
        &[job],
    ));
    let r = crate::common::deployment::run(d.cmd(&["run"]).env("PORTION_FILE_MODE", "0755"));
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .contains("PORTION_FILE_MODE=0755: only read and write bits may be given"),
        "{r:?}"
    );
    // Found before anything is made: no store file, no folder.
    assert!(!d.path().join("ledger.sqlite3").exists(), "{r:?}");
    assert!(!d.path().join("state").exists(), "{r:?}");
    // Files every user could write (0666 made 0777 folders under umask
    // 000, which portion then warned about) are refused the same way.
    for bad in ["0666", "0602"] {
        let r = crate::common::deployment::run(d.cmd(&["run"]).env("PORTION_FILE_MODE", bad));
        assert_eq!(r.code, 2, "{r:?}");
        let why = format!("PORTION_FILE_MODE={bad}: files writable by every user are refused");
        assert!(r.stderr.contains(&why), "{r:?}");
        assert!(!d.path().join("state").exists(), "{r:?}");
    }
    assert!(up.seen().is_empty(), "{:?}", up.seen());
    assert_eq!(d.status_json()["credentials"][0]["charges_recorded"], 0);
}

/// Under umask 000 the folders portion creates (the output folder and its
/// parent, the store's folder, the history's) were 0777: another user could
/// move the ledger aside (the next run starts with the full budget) or
/// plant a page file. They are 0750 (0700 for `PORTION_FILE_MODE=0600`,
/// 0770 for `0660`: the group that may write the files may write beside
/// them) whatever the umask; a folder that exists keeps its mode, and one
/// every user may write to is warned about.
#[test]
fn folders_are_not_writable_by_others_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let umask = ["bash", "-c", "umask 000 && exec \"$0\" \"$@\""];
    let modes = [(None, 0o750), (Some("0600"), 0o700), (Some("0660"), 0o770)];
    for (file_mode, want) in modes {
        let up = Standin::start(&["--pages", "1"]);
        let d = Deployment::new("");
        let job = videos_job("trending", "main", &["US"], 1, &up.base());
        let store = format!(
            "embedded:{}",
            d.path().join("store/ledger.sqlite3").display()
        );
        d.write(&deployment_yaml(&store, WIDE, "fail_closed", &[job]));
        let mut cmd = d.cmd_via(&umask, &["run"]);
        if let Some(m) = file_mode {
            cmd.env("PORTION_FILE_MODE", m);
        }
        let r = crate::common::deployment::run(&mut cmd);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(!r.stderr.contains("writable by every user"), "{r:?}");
        for folder in ["out", "out/trending", "store", "state", "state/portion"] {
            assert_eq!(
                mode(&d.path().join(folder)),
                want,
                "{folder} with PORTION_FILE_MODE={file_mode:?}"
            );
        }
    }

    let up = Standin::start(&["--pages", "1"]);
    let d = Deployment::new("");
    let job = videos_job("trending", "main", &["US"], 1, &up.base());
    d.write(&deployment_yaml(
        &embedded_store(&d),
        WIDE,
        "fail_closed",
        &[job],
    ));
    let out = d.path().join("out/trending");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let r = crate::common::deployment::run(&mut d.cmd_via(&umask, &["run"]));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains(&format!(
            "{} is writable by every user (mode 0777)",
            out.display()
        )),
        "{r:?}"
    );
    assert_eq!(mode(&out), 0o777, "an existing folder keeps its mode");
}

/// In a folder that others can write to, someone plants symlinks under the
/// names temporary files had (`.PAGE.tmp` before, `.JOB~PAGE.tmp`), aimed
/// at a file of theirs or of root's. A run (here one that holds no lock, so
/// it removes no leftover) writes its pages beside them, never through
/// them.
#[test]
fn a_planted_symlink_is_never_written_through() {
    let up = Standin::start(&["--pages", "1"]);
    let d = Deployment::new("");
    let job = videos_job("trending", "main", &["US", "GB"], 1, &up.base());
    d.write(&deployment_yaml(
        "redis://127.0.0.1:1/0",
        WIDE,
        "fail_open",
        &[job],
    ));
    let out = d.path().join("out/trending");
    std::fs::create_dir_all(&out).unwrap();
    let victim = d.path().join("victim");
    std::fs::write(&victim, "root's secret").unwrap();
    let mut planted = Vec::new();
    for region in ["US", "GB"] {
        let page = format!("trending.r000001.{region}.s0.p000000.json");
        for name in [format!(".{page}.tmp"), format!(".trending~{page}.tmp")] {
            std::os::unix::fs::symlink(&victim, out.join(&name)).unwrap();
            planted.push(name);
        }
    }

    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's secret");
    for region in ["US", "GB"] {
        let page = out.join(format!("trending.r000001.{region}.s0.p000000.json"));
        let meta = std::fs::symlink_metadata(&page).unwrap();
        assert!(meta.is_file(), "{} is not a plain file", page.display());
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&page).unwrap()).unwrap();
        assert_eq!(v["kind"], "youtube#videoListResponse");
    }
    planted.sort();
    assert_eq!(
        hidden(&out),
        planted,
        "the run left no temporary file of its own"
    );
}

/// Remove an embedded store's file (and SQLite's companions, if any).
fn remove_store(file: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = file.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(name);
    }
}

/// What `bash jobs/demo.sh` does twice: the embedded store and the pages
/// are deleted and made afresh. The new file is a new store (this host's
/// history knows an embedded store by its path and the id written inside
/// it), so nothing is reported lost, and the run spends its budget.
#[test]
fn an_embedded_store_made_afresh_is_a_new_store_not_a_lost_log() {
    let up = Standin::start(&["--pages", "1"]);
    let d = Deployment::new("");
    let job = videos_job("trending", "main", &["US", "GB"], 1, &up.base());
    d.write(&deployment_yaml(
        &embedded_store(&d),
        WIDE,
        "fail_closed",
        &[job],
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(d.status_json()["credentials"][0]["charges_recorded"], 2);

    remove_store(&d.path().join("ledger.sqlite3"));
    std::fs::remove_dir_all(d.path().join("out")).unwrap();
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stderr.contains("LOG LOST"), "{r:?}");
    assert!(r.stderr.contains("2 calls, spent units 2"), "{r:?}");
    let r = d.portion(&["status"]);
    assert!(!r.stdout.contains("LOG LOST"), "{r:?}");
    assert!(d.status_json()["credentials"][0]["log_lost"].is_null());
}

/// An older copy of the same embedded store put back (a backup restored)
/// has forgotten charges: LOG LOST, with advice that fits a file (not
/// Redis's "appendonly").
#[test]
fn an_older_copy_of_the_embedded_store_is_a_lost_log_with_advice_for_a_file() {
    let up = Standin::start(&["--pages", "1"]);
    let d = Deployment::new("");
    let job = videos_job("trending", "main", &["US", "GB"], 1, &up.base());
    d.write(&deployment_yaml(
        &embedded_store(&d),
        WIDE,
        "fail_closed",
        &[job],
    ));
    let file = d.path().join("ledger.sqlite3");
    assert_eq!(d.portion(&["run"]).code, 0);
    let backup = d.path().join("backup.sqlite3");
    std::fs::copy(&file, &backup).unwrap();
    assert_eq!(d.portion(&["run"]).code, 0);
    assert_eq!(d.status_json()["credentials"][0]["charges_recorded"], 4);

    remove_store(&file);
    std::fs::rename(&backup, &file).unwrap();
    let advice =
        "The store's file was replaced by an older copy of itself (restored from a backup?)";
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 75, "{r:?}");
    assert!(
        r.stderr.contains(
            "LOG LOST: the store has forgotten credential main's log: it had recorded 4 charges, it reported 2"
        ),
        "{r:?}"
    );
    assert!(r.stderr.contains(advice), "{r:?}");
    assert!(!r.all().contains("appendonly"), "{r:?}");
    let r = d.portion(&["status"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("LOG LOST: the store had recorded 4 charges and reported 2"),
        "{r:?}"
    );
    assert!(r.stdout.contains(advice), "{r:?}");
    assert!(!r.stdout.contains("appendonly"), "{r:?}");
}
