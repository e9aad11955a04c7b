//! Writing a file so that no reader ever sees part of it: a hidden
//! temporary file beside it, fsync, then the final name, then fsync of the
//! folder (one fsync for the names given at once: [`crate::folder_sync`]).
//! Page files (`sink::folder`) and this host's history (`history`) both
//! write this way.
//!
//! A temporary file is named `.OWNER~NAME~RANDOM.tmp`: `OWNER` is the job
//! whose page it is (or, for files that are no job's, something no job name
//! can be, such as `+history`), and `~` appears in no name, so a later run
//! of a job finds exactly its own leftovers ([`is_temp_of`]) and no other
//! job's, whatever their names (`feed` and `feed.reddit` sharing a folder).
//! `RANDOM` is 64 random bits, so nobody can guess the name in advance, and
//! the file is created exclusively (`O_CREAT|O_EXCL`, which never follows a
//! symlink, nor opens a file someone planted under the name): in a folder
//! that others can write to, a planted symlink cannot make portion write
//! through it.
//!
//! Files are created with [`file_mode`] (0640 unless `PORTION_FILE_MODE` says
//! otherwise), less the process's umask: API responses are not readable by
//! every user of the host. Folders are created with [`folder_mode`] (0750),
//! not the umask's 0777: under umask 000 another user could otherwise move
//! the ledger aside or plant a page file ([`create_folder`]).
//!
//! Two ways to give the file its name: [`write_atomically`] replaces what
//! was there (the history), [`write_new`] never does (pages: a page file,
//! once written, is never overwritten).
//!
//! This is the one place that makes files and folders: a SQLite database
//! (the embedded ledger, a job's `output.sqlite`) is made here too, with
//! its folders ([`create_database`]), and then opened without SQLite's
//! `CREATE` ([`open_existing`]), so SQLite never makes one with its own
//! 0644; its `-wal`, `-shm` and `-journal` take the database file's mode
//! (SQLite sets it on them whatever the umask). `src/files_made.rs`
//! fails the build's tests on a file or folder made anywhere else.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The mode of the files portion creates (pages, the embedded ledger, the
/// history) unless `PORTION_FILE_MODE` says otherwise; the umask applies on top.
pub const DEFAULT_FILE_MODE: u32 = 0o640;

/// The environment variable that sets [`file_mode`].
pub const FILE_MODE_VAR: &str = "PORTION_FILE_MODE";

/// The mode portion creates its files with: `$PORTION_FILE_MODE` (octal, read
/// and write bits only, the owner's both included, never write for others:
/// `0600`, `0640`, `0660`, `0644`), else [`DEFAULT_FILE_MODE`]. Read once per process. `Err` says
/// what is wrong with the variable.
pub fn file_mode() -> Result<u32, String> {
    static MODE: OnceLock<Result<u32, String>> = OnceLock::new();
    MODE.get_or_init(|| parse_mode(std::env::var_os(FILE_MODE_VAR).as_deref()))
        .clone()
}

fn parse_mode(value: Option<&std::ffi::OsStr>) -> Result<u32, String> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Ok(DEFAULT_FILE_MODE);
    };
    let text = value.to_string_lossy();
    let digits = text.strip_prefix("0o").unwrap_or(&text);
    let wrong = |why: &str| format!("{FILE_MODE_VAR}={text}: {why}");
    let mode = u32::from_str_radix(digits, 8)
        .map_err(|_| wrong("not an octal file mode (such as 0640)"))?;
    if mode & !0o666 != 0 {
        return Err(wrong(
            "only read and write bits may be given (at most 0666: no execute or special bits)",
        ));
    }
    if mode & 0o600 != 0o600 {
        return Err(wrong(
            "the owner must be able to read and write (0600 at least)",
        ));
    }
    // Every user could rewrite a page or the ledger (and its budget).
    if mode & 0o002 != 0 {
        return Err(wrong(
            "files writable by every user are refused (0664 at most for others to read)",
        ));
    }
    Ok(mode)
}

/// The mode of the folders portion creates for files of `file_mode`: the
/// same bits, plus search (x) wherever read is given: 0750 for 0640, 0700
/// for 0600, 0755 for 0644, 0770 for 0660. Never writable by others,
/// whatever `file_mode` says (it would let anyone move the ledger aside).
/// Writable by the group only when its files are (`0660`: a group that
/// shares the embedded ledger must create SQLite's `-wal` and `-shm`
/// beside it) and it may read them (write without search does nothing).
pub fn folder_mode(file_mode: u32) -> u32 {
    let mut mode = file_mode & !0o002;
    if mode & 0o040 == 0 {
        mode &= !0o020;
    }
    mode | (mode & 0o444) >> 2
}

/// Create the folder `dir` and any missing parents with [`folder_mode`] of
/// [`file_mode`] (less the umask, which only ever takes bits away). A folder
/// that exists keeps its mode (the operator's choice); one that every user
/// may write to is warned about (once per process), as anyone could move
/// the files in it aside or plant one.
pub fn create_folder(dir: &Path) -> std::io::Result<()> {
    let mode = folder_mode(file_mode().unwrap_or(DEFAULT_FILE_MODE));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)?;
    let found = fs::metadata(dir)?.permissions().mode();
    static WARNED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut warned = WARNED.lock().unwrap_or_else(|p| p.into_inner());
    if found & 0o002 != 0 && !warned.iter().any(|d| d == dir) {
        warned.push(dir.to_path_buf());
        tracing::warn!(
            "{} is writable by every user (mode {:04o}): another user can move portion's files there aside or plant one; chmod o-w it",
            dir.display(),
            found & 0o7777
        );
    }
    Ok(())
}

/// Make the SQLite database file `path` if nothing has that name yet, with
/// [`file_mode`] (less the umask), and its missing folders with
/// [`create_folder`]; a file that is there keeps its mode (the operator's
/// choice, as a folder's). Open it afterwards with [`open_existing`].
pub fn create_database(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_folder(dir)?;
    }
    let mode = file_mode().map_err(std::io::Error::other)?;
    match create_exclusive(path, mode) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// SQLite's default flags without `SQLITE_OPEN_CREATE`: a database that
/// is not there is an error, never a file SQLite makes with its own mode.
pub fn open_existing() -> rusqlite::OpenFlags {
    rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
        | rusqlite::OpenFlags::SQLITE_OPEN_URI
        | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX
}

/// Put the database of `conn` in WAL mode (which makes its `-wal` and
/// `-shm`), waiting up to `within` for other processes: SQLite answers the
/// switch `SQLITE_BUSY` at once while another connection holds the file,
/// without its busy handler, so a new database opened by many processes at
/// once (a burst of `portion charge`) failed one of them in about 25 bursts
/// of 24. The error is SQLite's once `within` has passed.
pub fn wal_mode(conn: &rusqlite::Connection, within: std::time::Duration) -> rusqlite::Result<()> {
    let began = std::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Err(e) if is_busy(&e) && began.elapsed() < within => {
                std::thread::sleep(pause.min(within.saturating_sub(began.elapsed())));
                pause = (pause * 2).min(std::time::Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// Whether SQLite said another connection holds the file.
pub fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Write `bytes` to `dir/name` atomically, replacing any file of that name,
/// with `mode` (less the umask); returns the final path. `owner` names the
/// temporary file (see the module).
pub fn write_atomically(
    dir: &Path,
    owner: &str,
    name: &str,
    bytes: &[u8],
    mode: u32,
) -> std::io::Result<PathBuf> {
    write(dir, owner, name, bytes, mode, |tmp, path| {
        fs::rename(tmp, path)
    })
}

/// Write `bytes` to `dir/name` atomically, with `mode` (less the umask),
/// but only if nothing has that name yet: an existing file (or symlink, or
/// anything else) is left as it is and the error is
/// [`ErrorKind::AlreadyExists`]. Returns the final path.
pub fn write_new(
    dir: &Path,
    owner: &str,
    name: &str,
    bytes: &[u8],
    mode: u32,
) -> std::io::Result<PathBuf> {
    write(dir, owner, name, bytes, mode, publish_new)
}

/// Whether `file_name` is a temporary file of `owner` (what a killed
/// writer of `owner` may have left), and of no one else.
pub fn is_temp_of(file_name: &str, owner: &str) -> bool {
    file_name
        .strip_prefix('.')
        .and_then(|rest| rest.split_once('~'))
        .is_some_and(|(o, rest)| o == owner && rest.ends_with(".tmp"))
}

/// The name of a temporary file of `owner`'s `name`: `.OWNER~NAME~RANDOM.tmp`
/// (so it is longer than `name`: see [`crate::page_name::longest_name`]).
pub fn temp_name(owner: &str, name: &str, random: u64) -> String {
    format!(".{owner}~{name}~{random:016x}.tmp")
}

/// Create `path` with `mode` (less the umask) only if nothing has that name:
/// `O_CREAT|O_EXCL`, so an existing file is never opened and a symlink,
/// even one to nowhere, is never followed (the error is
/// [`ErrorKind::AlreadyExists`] either way).
pub fn create_exclusive(path: &Path, mode: u32) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
}

/// A fresh temporary file for `owner`'s `name` in `dir`, under a name
/// nobody could guess: a few tries, in case a name was taken.
fn create_temp(dir: &Path, owner: &str, name: &str, mode: u32) -> std::io::Result<(PathBuf, File)> {
    let mut tries = 0;
    loop {
        let tmp = dir.join(temp_name(owner, name, rand::random::<u64>()));
        match create_exclusive(&tmp, mode) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists && tries < 8 => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

fn write(
    dir: &Path,
    owner: &str,
    name: &str,
    bytes: &[u8],
    mode: u32,
    publish: impl FnOnce(&Path, &Path) -> std::io::Result<()>,
) -> std::io::Result<PathBuf> {
    let (tmp, mut f) = create_temp(dir, owner, name, mode)?;
    let path = dir.join(name);
    let result = (|| {
        f.write_all(bytes)?;
        f.sync_all()?;
        publish(&tmp, &path)?;
        // The new name itself is durable once the folder is synced (by
        // an fsync shared with the other writers of the folder).
        crate::folder_sync::sync(dir)
    })();
    drop(f);
    let _ = fs::remove_file(&tmp);
    result.map(|()| path)
}

/// Give `tmp` the name `path` unless `path` exists: a hard link is created
/// only if the name is free, in one step (no window in which another writer
/// could slip a file in between a check and a rename). On a filesystem
/// without hard links, a check then a rename.
fn publish_new(tmp: &Path, path: &Path) -> std::io::Result<()> {
    match fs::hard_link(tmp, path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(e),
        Err(_) => {
            if fs::symlink_metadata(path).is_ok() {
                return Err(ErrorKind::AlreadyExists.into());
            }
            fs::rename(tmp, path)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_new_never_replaces_a_file_or_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let p = write_new(d, "j", "page.json", b"{}", 0o640).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"{}");
        let e = write_new(d, "j", "page.json", b"{\"other\":1}", 0o640).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&p).unwrap(), b"{}");

        fs::write(d.join("victim"), "victim").unwrap();
        std::os::unix::fs::symlink(d.join("victim"), d.join("link.json")).unwrap();
        let e = write_new(d, "j", "link.json", b"{}", 0o640).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AlreadyExists);
        assert_eq!(fs::read(d.join("victim")).unwrap(), b"victim");

        // No temporary file is left behind either way.
        let mut left: Vec<_> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["link.json", "page.json", "victim"]);
    }

    #[test]
    fn temporary_files_belong_to_one_owner() {
        assert!(is_temp_of(".feed~feed.r000001.US.s0.p0.json.tmp", "feed"));
        assert!(!is_temp_of(
            ".feed.reddit~feed.reddit.r000001.US.s0.p0.json.tmp",
            "feed"
        ));
        assert!(is_temp_of(
            ".feed.reddit~feed.reddit.r000001.US.s0.p0.json.tmp",
            "feed.reddit"
        ));
        // The names of builds before this one: no owner, so no one's.
        assert!(!is_temp_of(".feed.r000001.US.s0.p0.json.tmp", "feed"));
        assert!(!is_temp_of("feed~x.tmp", "feed"));
        assert!(!is_temp_of(".feed~x.json", "feed"));
        assert!(!is_temp_of(".+history~history.json.tmp", "history"));
    }

    #[test]
    fn temporary_files_are_created_exclusively_never_through_a_symlink() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::write(d.join("victim"), "victim").unwrap();
        fs::set_permissions(d.join("victim"), fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(d.join("victim"), d.join("planted")).unwrap();
        std::os::unix::fs::symlink(d.join("nowhere"), d.join("dangling")).unwrap();
        for name in ["planted", "dangling", "victim"] {
            let e = create_exclusive(&d.join(name), 0o640).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{name}");
        }
        assert_eq!(fs::read(d.join("victim")).unwrap(), b"victim");
        assert!(!d.join("nowhere").exists());

        // Each write takes a fresh name: two temporary files for one page
        // never share one.
        let (a, _) = create_temp(d, "j", "p.json", 0o640).unwrap();
        let (b, _) = create_temp(d, "j", "p.json", 0o640).unwrap();
        assert_ne!(a, b);
        for t in [&a, &b] {
            let n = t.file_name().unwrap().to_string_lossy();
            assert!(n.starts_with(".j~p.json~") && is_temp_of(&n, "j"), "{n}");
        }
    }

    #[test]
    fn the_file_mode_is_0640_unless_the_variable_says_otherwise() {
        use std::ffi::OsStr;
        assert_eq!(parse_mode(None), Ok(0o640));
        assert_eq!(parse_mode(Some(OsStr::new(""))), Ok(0o640));
        assert_eq!(parse_mode(Some(OsStr::new("0600"))), Ok(0o600));
        assert_eq!(parse_mode(Some(OsStr::new("644"))), Ok(0o644));
        assert_eq!(parse_mode(Some(OsStr::new("0o660"))), Ok(0o660));
        for bad in [
            "0755",
            "4640",
            "0400",
            "rw-r-----",
            "0999",
            "0666",
            "0602",
            "0646",
        ] {
            let e = parse_mode(Some(OsStr::new(bad))).unwrap_err();
            assert!(e.starts_with(&format!("PORTION_FILE_MODE={bad}: ")), "{e}");
        }
    }

    #[test]
    fn files_get_the_mode_less_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = write_new(dir.path(), "j", "p.json", b"{}", 0o600).unwrap();
        assert_eq!(fs::metadata(p).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn folders_get_search_wherever_files_get_read() {
        assert_eq!(folder_mode(0o640), 0o750);
        assert_eq!(folder_mode(0o600), 0o700);
        assert_eq!(folder_mode(0o644), 0o755);
        assert_eq!(folder_mode(0o660), 0o770);
        assert_eq!(folder_mode(0o664), 0o775);
    }

    /// 0666 (refused as `PORTION_FILE_MODE`, but whatever reaches it) made
    /// 0777 folders under umask 000, which portion then warned about; 0602
    /// gave 0702.
    #[test]
    fn folders_are_never_writable_by_others() {
        assert_eq!(folder_mode(0o666), 0o775);
        assert_eq!(folder_mode(0o602), 0o700);
        assert_eq!(folder_mode(0o646), 0o755);
        // Group write without group read: no use in a folder.
        assert_eq!(folder_mode(0o620), 0o700);
        for mode in 0..=0o777 {
            assert_eq!(folder_mode(mode) & 0o002, 0, "{mode:04o}");
        }
        let e = parse_mode(Some(std::ffi::OsStr::new("0666"))).unwrap_err();
        assert!(e.contains("writable by every user are refused"), "{e}");
    }

    #[test]
    fn write_atomically_replaces() {
        let dir = tempfile::tempdir().unwrap();
        write_atomically(dir.path(), "+h", "h.json", b"1", 0o640).unwrap();
        let p = write_atomically(dir.path(), "+h", "h.json", b"2", 0o640).unwrap();
        assert_eq!(fs::read(p).unwrap(), b"2");
    }
}
