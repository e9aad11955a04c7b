//! Writing a file so that no reader ever sees part of it: a hidden
//! temporary file beside it, fsync, then the final name, then fsync of the
//! folder. Page files (`runner::output`) and this host's history
//! (`history`) both write this way.
//!
//! A temporary file is named `.OWNER~NAME.tmp`: `OWNER` is the job whose
//! page it is (or, for files that are no job's, something no job name can
//! be, such as `+history`), and `~` appears in no name, so a later run of a
//! job finds exactly its own leftovers ([`is_temp_of`]) and no other job's,
//! whatever their names (`feed` and `feed.reddit` sharing a folder).
//!
//! Two ways to give the file its name: [`write_atomically`] replaces what
//! was there (the history), [`write_new`] never does (pages: a page file,
//! once written, is never overwritten).

use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

/// Write `bytes` to `dir/name` atomically, replacing any file of that name;
/// returns the final path. `owner` names the temporary file (see the module).
pub fn write_atomically(
    dir: &Path,
    owner: &str,
    name: &str,
    bytes: &[u8],
) -> std::io::Result<PathBuf> {
    write(dir, owner, name, bytes, |tmp, path| fs::rename(tmp, path))
}

/// Write `bytes` to `dir/name` atomically, but only if nothing has that
/// name yet: an existing file (or symlink, or anything else) is left as it
/// is and the error is [`ErrorKind::AlreadyExists`]. Returns the final path.
pub fn write_new(dir: &Path, owner: &str, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    write(dir, owner, name, bytes, publish_new)
}

/// Whether `file_name` is a temporary file of `owner` (what a killed
/// writer of `owner` may have left), and of no one else.
pub fn is_temp_of(file_name: &str, owner: &str) -> bool {
    file_name
        .strip_prefix('.')
        .and_then(|rest| rest.split_once('~'))
        .is_some_and(|(o, rest)| o == owner && rest.ends_with(".tmp"))
}

fn write(
    dir: &Path,
    owner: &str,
    name: &str,
    bytes: &[u8],
    publish: impl FnOnce(&Path, &Path) -> std::io::Result<()>,
) -> std::io::Result<PathBuf> {
    let tmp = dir.join(format!(".{owner}~{name}.tmp"));
    let path = dir.join(name);
    let result = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        publish(&tmp, &path)?;
        // The new name itself is durable once the folder is synced.
        File::open(dir)?.sync_all()
    })();
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
        let p = write_new(d, "j", "page.json", b"{}").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"{}");
        let e = write_new(d, "j", "page.json", b"{\"other\":1}").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&p).unwrap(), b"{}");

        fs::write(d.join("victim"), "victim").unwrap();
        std::os::unix::fs::symlink(d.join("victim"), d.join("link.json")).unwrap();
        let e = write_new(d, "j", "link.json", b"{}").unwrap_err();
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
    fn write_atomically_replaces() {
        let dir = tempfile::tempdir().unwrap();
        write_atomically(dir.path(), "+h", "h.json", b"1").unwrap();
        let p = write_atomically(dir.path(), "+h", "h.json", b"2").unwrap();
        assert_eq!(fs::read(p).unwrap(), b"2");
    }
}
