//! Writing a file so that no reader ever sees part of it: a hidden
//! temporary file beside it, fsync, rename, fsync of the folder. Page files
//! (`runner::output`) and this host's history (`history`) both write this
//! way; the temporary name is `.NAME.tmp`, so a later run can find and
//! remove what a killed one left.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Write `bytes` to `dir/name` atomically; returns the final path.
pub fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let path = dir.join(name);
    let result = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, &path)?;
        // The rename itself is durable once the folder is synced.
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map(|()| path)
}
