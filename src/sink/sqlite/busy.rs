//! A database another writer holds when a run (or `check`) opens it: not
//! the configuration's error but a busy moment, so the open waits a few
//! seconds ([`OPEN_BUSY_TIMEOUT`]), not the rows' minute, and ends the
//! run cleanly (75, nothing charged yet: the next tick tries again),
//! saying which process holds the lock when the kernel can tell.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use super::SinkError;

/// How long opening the database waits for another writer: a run of
/// another job commits its pages' rows in far less; a writer that holds
/// the lock longer (a reader's `BEGIN IMMEDIATE` left open, a long
/// import) is not waited out before the first charge.
pub(crate) const OPEN_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// `open()`'s error, a busy database told as [`SinkError::Busy`] with its
/// write lock's holder. `open` must have dropped its connection by the
/// time it returns: looking at the lock opens the file, and closing that
/// would drop every POSIX lock this process holds on it (SQLite's own
/// included).
pub(super) fn or_holder<T>(
    path: &Path,
    open: impl FnOnce() -> Result<T, SinkError>,
) -> Result<T, SinkError> {
    match open() {
        Err(SinkError::Db(e)) if crate::atomic_file::is_busy(&e) => Err(SinkError::Busy(
            write_lock_holder(path).unwrap_or_else(|| "another process".to_string()),
        )),
        other => other,
    }
}

/// The process that holds the database's write lock, as `process PID
/// (NAME)`, if the kernel says: SQLite's locks are POSIX record locks, on
/// byte 120 of the `-shm` file in WAL mode (its write lock), on the
/// reserved and pending bytes of the file itself in a rollback journal's.
/// Only the program's name is shown: another program's command line may
/// hold a password.
fn write_lock_holder(db: &Path) -> Option<String> {
    let mut shm = db.as_os_str().to_owned();
    shm.push("-shm");
    let pid = (lock_holder(Path::new(&shm), 120))
        .or_else(|| lock_holder(db, 0x4000_0001))
        .or_else(|| lock_holder(db, 0x4000_0000))?;
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok();
    Some(match name.as_deref().map(str::trim) {
        Some(name) if !name.is_empty() => {
            format!("process {pid} ({})", crate::logging::printable(name))
        }
        _ => format!("process {pid}"),
    })
}

/// The process holding a lock on byte `byte` of `path` that a write lock
/// there would meet (`F_GETLK`).
fn lock_holder(path: &Path, byte: i64) -> Option<i32> {
    let file = std::fs::File::open(path).ok()?;
    // SAFETY: a zeroed `flock` is a valid value of the plain C struct.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = byte;
    lock.l_len = 1;
    // SAFETY: F_GETLK on an open descriptor, with a pointer to a live flock.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut lock) };
    (rc == 0 && lock.l_type != libc::F_UNLCK as libc::c_short && lock.l_pid > 0)
        .then_some(lock.l_pid)
}
