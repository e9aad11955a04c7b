//! The fsync of a folder that makes a new name in it durable, shared by
//! the writers of that folder (group commit): a writer whose file has its
//! name waits for the next fsync of the folder that *begins after* its
//! rename, whoever makes it, and one fsync serves every name given before
//! it began. With 64 pages in flight, each page's own fsync of the output
//! folder was one of the two disk flushes on its request's way (issue 25,
//! BENCHMARKS.md "Requests in flight at once"); now the pages written while
//! one folder fsync runs share the next. A name is never reported durable
//! before an fsync that began after it returned success.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

/// Names made durable, and the folder fsyncs that did it, in this process:
/// what the grouping saves (logged at a run's end, and tested).
static NAMES: AtomicU64 = AtomicU64::new(0);
static FSYNCS: AtomicU64 = AtomicU64::new(0);

/// `(names, fsyncs)`: new names made durable in folders, and the fsyncs
/// of folders that did it, since the process started.
pub fn counts() -> (u64, u64) {
    (
        NAMES.load(Ordering::Relaxed),
        FSYNCS.load(Ordering::Relaxed),
    )
}

/// Make every name given in `dir` so far durable: return once an fsync of
/// `dir` that began after this call did (this writer's, or another's that
/// it waited for). `Err`: that fsync failed.
pub fn sync(dir: &Path) -> io::Result<()> {
    folder(dir).sync_with(|| File::open(dir)?.sync_all())
}

/// The one [`Folder`] of `dir` in this process (as spelled: another
/// spelling of the same folder only shares less).
fn folder(dir: &Path) -> Arc<Folder> {
    static FOLDERS: OnceLock<Mutex<HashMap<PathBuf, Arc<Folder>>>> = OnceLock::new();
    let mut all = lock(FOLDERS.get_or_init(Mutex::default));
    all.entry(dir.to_path_buf()).or_default().clone()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One folder's fsyncs: numbered as they begin, one at a time.
#[derive(Default)]
struct Folder {
    state: Mutex<State>,
    finished: Condvar,
}

#[derive(Default)]
struct State {
    /// The number of the last fsync begun, and of the last finished.
    begun: u64,
    done: u64,
    running: bool,
    /// Writers waiting for an fsync to finish.
    waiting: usize,
    /// The last fsync that failed: its number and its error.
    failed: Option<(u64, io::ErrorKind, String)>,
}

impl Folder {
    /// Wait for the first fsync (`fsync`, run by whichever writer finds
    /// none running) numbered after those begun by now, or run it.
    fn sync_with(&self, fsync: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        NAMES.fetch_add(1, Ordering::Relaxed);
        let mut s = lock(&self.state);
        // The one running, if any, may have begun before the name was
        // given: only a later one counts.
        let need = s.begun + 1;
        loop {
            if s.done >= need {
                return match &s.failed {
                    Some((at, kind, why)) if *at >= need => Err(io::Error::new(*kind, why.clone())),
                    _ => Ok(()),
                };
            }
            if !s.running {
                break;
            }
            s.waiting += 1;
            s = self.finished.wait(s).unwrap_or_else(|p| p.into_inner());
            s.waiting -= 1;
        }
        s.running = true;
        s.begun += 1;
        let mine = s.begun;
        drop(s);
        let result = fsync();
        FSYNCS.fetch_add(1, Ordering::Relaxed);
        let mut s = lock(&self.state);
        s.running = false;
        s.done = mine;
        if let Err(e) = &result {
            s.failed = Some((mine, e.kind(), e.to_string()));
        }
        self.finished.notify_all();
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;

    /// Writers that come while an fsync runs share the next one: 1 + 15
    /// writers, 2 fsyncs, not 16.
    #[test]
    fn writers_during_an_fsync_share_the_next() {
        let folder = Arc::new(Folder::default());
        let fsyncs = Arc::new(AtomicUsize::new(0));
        let (release, held) = mpsc::channel::<()>();
        let (began, first_began) = mpsc::channel::<()>();
        let first = {
            let (folder, fsyncs) = (folder.clone(), fsyncs.clone());
            std::thread::spawn(move || {
                folder.sync_with(|| {
                    fsyncs.fetch_add(1, Ordering::SeqCst);
                    began.send(()).unwrap();
                    held.recv().unwrap();
                    Ok(())
                })
            })
        };
        first_began.recv().unwrap();
        let returned = Arc::new(AtomicUsize::new(0));
        let others: Vec<_> = (0..15)
            .map(|_| {
                let (folder, fsyncs) = (folder.clone(), fsyncs.clone());
                let returned = returned.clone();
                std::thread::spawn(move || {
                    let r = folder.sync_with(|| {
                        fsyncs.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    });
                    returned.fetch_add(1, Ordering::SeqCst);
                    r
                })
            })
            .collect();
        // All 15 wait behind the first (which began before their names),
        // none returns before it ends.
        while lock(&folder.state).waiting + returned.load(Ordering::SeqCst) < 15 {
            std::thread::yield_now();
        }
        assert_eq!(returned.load(Ordering::SeqCst), 0);
        release.send(()).unwrap();
        first.join().unwrap().unwrap();
        for t in others {
            t.join().unwrap().unwrap();
        }
        assert_eq!(fsyncs.load(Ordering::SeqCst), 2);
        let s = lock(&folder.state);
        assert_eq!((s.begun, s.done, s.waiting), (2, 2, 0));
    }

    /// A writer alone makes its own fsync, and gets its error.
    #[test]
    fn a_writer_alone_syncs_itself_and_gets_its_error() {
        let folder = Folder::default();
        folder.sync_with(|| Ok(())).unwrap();
        // Nothing running: each writer alone makes its own.
        let mut ran = false;
        folder
            .sync_with(|| {
                ran = true;
                Ok(())
            })
            .unwrap();
        assert!(ran);
        let e = folder
            .sync_with(|| Err(io::Error::other("disk gone")))
            .unwrap_err();
        assert_eq!(e.to_string(), "disk gone");
        // A later fsync that works says nothing of the failed one's
        // writers, but serves the next ones.
        folder.sync_with(|| Ok(())).unwrap();
    }

    #[test]
    fn a_real_folder_is_synced() {
        let dir = tempfile::tempdir().unwrap();
        let (names, fsyncs) = counts();
        sync(dir.path()).unwrap();
        let (names2, fsyncs2) = counts();
        assert!(names2 > names && fsyncs2 > fsyncs);
        assert!(sync(&dir.path().join("missing")).is_err());
    }
}
