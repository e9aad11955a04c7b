//! The results database (`output.sqlite`) under what the host and the
//! configuration throw at it (issue 36): its files made with quota's modes
//! like every other (Class 5), its names quoted and `check` refusing what
//! `run` would (Class 6), a database busy at a run's start a clean stop
//! (Class 7).

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use crate::common::deployment::{Deployment, embedded_store, kill, spawn};
use crate::common::standin::Standin;
use crate::common::wait_until;
use crate::run_sqlite::trending;

/// The mode of a file, permission bits only.
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// The database was made by SQLite (0644, whatever `QUOTA_FILE_MODE`: any
/// local user read every result) and its missing folders by
/// `create_dir_all` (0777 under umask 000). Now the database, its `-wal`
/// and `-shm` (seen while the run holds them open) take `QUOTA_FILE_MODE`,
/// its folders the folder mode, whatever the umask.
#[test]
fn the_database_its_wal_and_shm_and_its_folders_take_quota_s_modes() {
    let umask = ["bash", "-c", "umask 000 && exec \"$0\" \"$@\""];
    // (the second page answers in 60 s: the run is killed while it waits,
    // its files open)
    let slow = Standin::start(&["--slow", "pageToken=CAUQ1=60s"]);
    let d = Deployment::new("");
    let output = "{ sqlite: { path: deep/er/videos.db, table: videos, items: /items/*, key: /id, search: [/snippet/title] } }";
    d.write(&trending(
        &embedded_store(&d),
        &slow.base(),
        &["US"],
        output,
    ));
    let db = d.path().join("deep/er/videos.db");
    let files = ["", "-wal", "-shm"].map(|end| format!("{}{end}", db.display()));
    let mut run = d.cmd_via(&umask, &["run"]);
    run.env("QUOTA_FILE_MODE", "0600");
    let mut victim = spawn(&mut run);
    wait_until(Duration::from_secs(30), "page 2 never asked for", || {
        slow.seen().iter().any(|s| s.page == 1)
    });
    for file in &files {
        assert_eq!(mode(Path::new(file)), 0o600, "{file}");
    }
    for folder in ["deep", "deep/er"] {
        assert_eq!(mode(&d.path().join(folder)), 0o700, "{folder}");
    }
    kill("-KILL", victim.id());
    victim.wait().unwrap();
    let rows: i64 = Connection::open(&db)
        .unwrap()
        .query_row("SELECT count(*) FROM videos", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 5, "the first page's rows");
}
