//! [`Files`]: a job's page files in its folder as an [`Output`]: each
//! page written whole under a name no earlier page has (see [`folder`]),
//! what a validator stands for its file, the inputs done the keys of the
//! last step's pages.

use std::collections::HashSet;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use super::folder::{self, Prepared};
use super::output::{Output, OutputError, Page, ResultsHeld, Wrote};
use crate::page_name::PageName;

/// A job's folder of pages.
pub struct Files {
    dir: PathBuf,
    job: String,
    /// The mode pages are created with, less the umask.
    mode: u32,
    /// The highest run of the job's pages found there when it was opened.
    highest_run: u64,
}

impl Files {
    /// Make the folder and read it ([`folder::prepare`]: a killed run's
    /// temporary files removed when `clean`); pages are created `mode`.
    pub fn open(
        dir: &Path,
        job: &str,
        mode: u32,
        clean: bool,
    ) -> std::io::Result<(Self, Prepared)> {
        let prepared = folder::prepare(dir, job, clean)?;
        let files = Files {
            dir: dir.to_path_buf(),
            job: job.to_string(),
            mode,
            highest_run: prepared.highest_run,
        };
        Ok((files, prepared))
    }

    /// The file of `key`'s last step (`last`) page of run `run`.
    fn last_page(&self, key: &str, last: usize, run: u64) -> PathBuf {
        let name = PageName {
            job: &self.job,
            run,
            region: key,
            step: last,
            page: 0,
        };
        self.dir.join(name.file_name())
    }
}

impl Output for Files {
    fn write(&self, page: &Page<'_>, wrote: &mut Wrote) -> Result<(), OutputError> {
        let path =
            crate::atomic_file::write_new(&self.dir, &self.job, page.file, page.body, self.mode)
                .map_err(OutputError::File)?;
        wrote.path = Some(path);
        wrote.held.file = Some(page.file.to_string());
        Ok(())
    }

    fn holds(&self, held: &ResultsHeld) -> bool {
        held.file
            .as_ref()
            .is_some_and(|f| self.dir.join(f).is_file())
    }

    fn id(&self) -> Result<(String, bool), String> {
        let id = super::output_id::folder_id(&self.dir)
            .map_err(|e| format!("{}: {e}", self.dir.display()))?;
        Ok((id, self.highest_run > 0))
    }

    fn highest_run(&self) -> Result<u64, OutputError> {
        Ok(self.highest_run)
    }

    fn keys_held(&self, last: usize) -> HashSet<String> {
        if self.highest_run == 0 {
            return HashSet::new();
        }
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return HashSet::new();
        };
        dir.filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name();
                let (_, key, step, _) = crate::page_name::parse(&self.job, name.to_str()?)?;
                (step == last).then_some(key)
            })
            .collect()
    }

    fn has_key(&self, key: &str, last: usize, runs: &RangeInclusive<u64>) -> bool {
        runs.clone()
            .any(|run| self.last_page(key, last, run).exists())
    }
}
