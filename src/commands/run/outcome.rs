//! `portion run --metrics-file PATH`: what a run did, kept as it goes
//! ([`RunOutcome`]), then written once it has ended as OpenMetrics text,
//! atomically (a hidden temporary file beside PATH, then a rename), so that
//! node_exporter's textfile collector never reads half a file. The names
//! and labels are documented in the README ("Metrics"). Label values are
//! names of jobs and pools and the fixed stop kinds: never a secret, a URL
//! or a message.

use std::path::Path;
use std::time::{Duration, Instant};

use tracing::error;

use crate::atomic_file::write_atomically;
use crate::metrics::{Family, MetricUnit, Value, encode, unix_seconds};
use crate::runner::{JobReport, Stop};
use crate::{Error, ExitStatus, Result};

/// The mode of the metrics file, less the umask: it holds only names and
/// numbers, and the collector reading it usually runs as another user.
const METRICS_FILE_MODE: u32 = 0o644;

/// What a run did so far, job by job.
pub struct RunOutcome {
    started: Instant,
    jobs: Vec<JobOutcome>,
}

struct JobOutcome {
    job: String,
    took: Duration,
    ended: Ended,
}

/// How one job of the run ended.
pub enum Ended {
    /// It ran to its end or stopped cleanly: its report.
    Report(Box<JobReport>),
    /// It ended with an error of this exit code (its counts are lost).
    Error(ExitStatus),
    /// A stop signal arrived before it started.
    NotStarted,
}

impl Default for RunOutcome {
    fn default() -> Self {
        Self::start()
    }
}

impl RunOutcome {
    /// A run starting now.
    pub fn start() -> Self {
        RunOutcome {
            started: Instant::now(),
            jobs: Vec::new(),
        }
    }

    /// `job` ended after `took`.
    pub fn record(&mut self, job: &str, took: Duration, ended: Ended) {
        self.jobs.push(JobOutcome {
            job: job.to_string(),
            took,
            ended,
        });
    }

    /// The command's result, after writing the outcome to `path` (if any).
    /// A file that cannot be written fails a run that had not failed (0, or
    /// 75: stopped cleanly) with 1; a run that failed (an error, or a job's
    /// exit code such as 69) keeps its own code, and the write's is logged.
    pub fn finish(&self, path: Option<&Path>, result: Result<ExitStatus>) -> Result<ExitStatus> {
        let Some(path) = path else { return result };
        let code = match &result {
            Ok(code) => *code,
            Err(e) => e.exit_code(),
        };
        let text = self.render(code, chrono::Utc::now().timestamp_micros());
        match (write(path, &text), result) {
            (Ok(()), result) => result,
            (Err(e), Ok(code)) if !code.is_error() => Err(e),
            (Err(e), Ok(code)) => {
                error!("{e}");
                Ok(code)
            }
            (Err(e), Err(run)) => {
                error!("{e}");
                Err(run)
            }
        }
    }

    /// The outcome as OpenMetrics text, for a run that exits `code` and
    /// ends at `end` (microseconds since the epoch).
    pub fn render(&self, code: ExitStatus, end: i64) -> String {
        let mut exit = Family::new(
            "portion_run_exit_code",
            "The exit code of the run (0 done, 75 stopped cleanly, 78 configuration, 69 store, 1 failed).",
            None,
        );
        exit.push(&[], u64::from(code.code()));
        let mut took = Family::new(
            "portion_run_duration",
            "How long the whole run took.",
            Some(MetricUnit::Seconds),
        );
        took.push(&[], Value::Float(self.started.elapsed().as_secs_f64()));
        let mut at = Family::new(
            "portion_run_end_timestamp",
            "When the run ended, as Unix time.",
            Some(MetricUnit::Seconds),
        );
        at.push(&[], unix_seconds(end));
        let mut families = vec![exit, took, at];
        families.extend(self.job_families());
        encode(families)
    }

    fn job_families(&self) -> Vec<Family> {
        let gauge = |name, help| Family::new(name, help, None);
        let mut exit = gauge(
            "portion_run_job_exit_code",
            "The exit code of the job's run.",
        );
        let mut took = Family::new(
            "portion_run_job_duration",
            "How long the job's run took.",
            Some(MetricUnit::Seconds),
        );
        let mut reason = gauge(
            "portion_run_job_stop_reason",
            "1 for why the job's run ended (none: it served every region), 0 for every other reason.",
        );
        let mut calls = gauge(
            "portion_run_job_calls",
            "Requests the job sent, retries included.",
        );
        let mut unmetered = gauge(
            "portion_run_job_unmetered_calls",
            "Requests the job sent without a charge (store unreachable, fail_open).",
        );
        let mut units = Family::new(
            "portion_run_job_charged",
            "Units the job charged, per pool.",
            Some(MetricUnit::Units),
        );
        let mut not_modified = gauge(
            "portion_run_job_not_modified",
            "Calls of the job answered 304 (not modified): nothing written.",
        );
        let mut saved = Family::new(
            "portion_run_job_saved",
            "Units the job's calls answered 304 gave back, per pool.",
            Some(MetricUnit::Units),
        );
        let mut pages = gauge(
            "portion_run_job_pages_written",
            "Pages the job wrote: as files, or as rows when it has no folder.",
        );
        let mut upserted = gauge(
            "portion_run_job_rows_upserted",
            "Rows the job upserted, per sink of rows (sqlite, postgres).",
        );
        let mut done = gauge(
            "portion_run_job_regions_done",
            "Regions the job served to their end.",
        );
        let mut total = gauge("portion_run_job_regions", "Regions the job walks.");
        let mut failed = gauge(
            "portion_run_job_failed_regions",
            "Regions whose walk ended with an error or whose fan-out batches the upstream refused, each once.",
        );
        for j in &self.jobs {
            let job = [("job", j.job.as_str())];
            let (code, kind) = match &j.ended {
                Ended::Report(r) => (r.exit_code(), r.stop.as_ref().map_or("none", Stop::kind)),
                Ended::Error(code) => (*code, "error"),
                Ended::NotStarted => (ExitStatus::STOPPED, "signal"),
            };
            exit.push(&job, u64::from(code.code()));
            took.push(&job, Value::Float(j.took.as_secs_f64()));
            for k in reasons() {
                reason.push(&[("job", j.job.as_str()), ("reason", k)], k == kind);
            }
            let Ended::Report(r) = &j.ended else { continue };
            calls.push(&job, r.calls);
            unmetered.push(&job, r.unmetered);
            for (pool, n) in &r.units {
                units.push(&[("job", j.job.as_str()), ("pool", pool.as_str())], *n);
            }
            not_modified.push(&job, r.not_modified);
            for (pool, n) in &r.units_saved {
                saved.push(&[("job", j.job.as_str()), ("pool", pool.as_str())], *n);
            }
            pages.push(&job, r.pages);
            for (sink, n) in &r.upserted {
                upserted.push(&[("job", j.job.as_str()), ("sink", sink)], *n);
            }
            done.push(&job, r.regions_done as u64);
            total.push(&job, r.regions_total as u64);
            failed.push(&job, r.failed_in.len() as u64);
        }
        vec![
            exit,
            took,
            reason,
            calls,
            unmetered,
            units,
            not_modified,
            saved,
            pages,
            upserted,
            done,
            total,
            failed,
        ]
    }
}

/// Every `reason` label: `none`, a clean stop's kinds, then `error`.
fn reasons() -> impl Iterator<Item = &'static str> {
    std::iter::once("none")
        .chain(Stop::KINDS)
        .chain(std::iter::once("error"))
}

/// Write `text` to `path` atomically, replacing what was there.
fn write(path: &Path, text: &str) -> Result<()> {
    let wrong = |source| Error::Io {
        what: "write the metrics file",
        path: path.to_path_buf(),
        source,
    };
    let name = path
        .file_name()
        .ok_or_else(|| wrong(std::io::ErrorKind::InvalidInput.into()))?
        .to_string_lossy();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    write_atomically(dir, "+metrics", &name, text.as_bytes(), METRICS_FILE_MODE)
        .map(drop)
        .map_err(wrong)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unwritable_file_fails_only_a_run_that_had_not_failed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("missing-folder").join("portion.prom");
        let finish = |result| RunOutcome::start().finish(Some(&file), result);
        for fine in [ExitStatus::OK, ExitStatus::STOPPED] {
            let e = finish(Ok(fine)).unwrap_err();
            assert_eq!(e.exit_code(), ExitStatus::FAILURE, "{e}");
        }
        let kept = finish(Ok(ExitStatus::UNAVAILABLE)).unwrap();
        assert_eq!(kept, ExitStatus::UNAVAILABLE);
        let run = Error::Usage("a wrong flag".into());
        let e = finish(Err(run)).unwrap_err();
        assert_eq!(e.exit_code(), ExitStatus::USAGE, "{e}");
    }
}
