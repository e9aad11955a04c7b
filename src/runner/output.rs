//! Output files: one JSON document per fetched page, written atomically
//! (hidden temporary file, fsync, rename, fsync of the folder), so a run
//! killed at any moment leaves no partial file under a visible name.
//!
//! Names are deterministic: `JOB.rRUN.REGION.sSTEP.pPAGE.json`, e.g.
//! `trending.r000042.US.s0.p1.json` (no region part for a job without
//! regions). Temporary files are `.JOB.….json.tmp`; a later run of the same
//! job removes any that a killed run left.

use std::fs;
use std::path::Path;

/// Where a page goes, and what it is called.
pub struct PageName<'a> {
    pub job: &'a str,
    pub run: u64,
    pub region: &'a str,
    pub step: usize,
    pub page: u32,
}

impl PageName<'_> {
    pub fn file_name(&self) -> String {
        if self.region.is_empty() {
            format!(
                "{}.r{:06}.s{}.p{}.json",
                self.job, self.run, self.step, self.page
            )
        } else {
            format!(
                "{}.r{:06}.{}.s{}.p{}.json",
                self.job, self.run, self.region, self.step, self.page
            )
        }
    }
}

/// Create the output folder and remove temporary files a killed run of
/// `job` left there. Returns how many were removed.
pub fn prepare(dir: &Path, job: &str) -> std::io::Result<usize> {
    fs::create_dir_all(dir)?;
    let prefix = format!(".{job}.r");
    let mut removed = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(&prefix) && name.ends_with(".json.tmp") {
            fs::remove_file(entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::atomic_file::write_atomically;

    #[test]
    fn names_are_deterministic_and_sort_by_run() {
        let n = PageName {
            job: "trending",
            run: 42,
            region: "US",
            step: 0,
            page: 1,
        };
        assert_eq!(n.file_name(), "trending.r000042.US.s0.p1.json");
        let n = PageName { region: "", ..n };
        assert_eq!(n.file_name(), "trending.r000042.s0.p1.json");
    }

    #[test]
    fn writes_atomically_and_cleans_only_this_jobs_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_atomically(dir.path(), "j.r000001.US.s0.p0.json", b"{}").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"{}");
        fs::write(
            dir.path().join(".j.r000002.US.s0.p0.json.tmp"),
            "{\"partial",
        )
        .unwrap();
        fs::write(dir.path().join(".other.r000002.US.s0.p0.json.tmp"), "x").unwrap();
        assert_eq!(prepare(dir.path(), "j").unwrap(), 1);
        let mut left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ".other.r000002.US.s0.p0.json.tmp",
                "j.r000001.US.s0.p0.json"
            ]
        );
    }
}
