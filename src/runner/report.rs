//! How a run ended: why it stopped ([`Stop`]), what it did ([`JobReport`]),
//! and the one summary line it ends with.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use tracing::{error, info, warn};

use super::cursor::Cursor;
use crate::Error;
use crate::error::ExitStatus;
use crate::ledger::{Held, Micros};
use crate::timefmt::{PRECISE_BELOW, clock_time, fmt_duration, fmt_retry, local_datetime};

mod spent;

/// Why a run stopped before serving every region (all exit 75).
#[derive(Clone, Debug, PartialEq)]
pub enum Stop {
    /// The ledger said no: `pool`'s `per` window is full for `retry_after`.
    QuotaSaidNo {
        pool: String,
        per: Duration,
        retry_after: Duration,
        /// Shares: the units left are another share's, or this job's
        /// share is at its limit.
        held: Option<Held>,
    },
    /// The credential is blocked (the upstream reported its quota spent).
    Blocked { until: Micros, reason: String },
    /// The upstream reported its own quota spent during this run.
    UpstreamExhausted { reason: String, until: Micros },
    /// The store lost the log of `credential`'s `pool` at `since`: the
    /// pool counts as spent until `until`.
    LogLost {
        credential: String,
        pool: String,
        since: Micros,
        until: Micros,
    },
    /// Another run of the job holds the lock.
    LockBusy {
        holder: String,
        expires_in: Duration,
    },
    /// This run's lock expired under it (the store was away too long).
    LockLost,
    /// SIGTERM or SIGINT.
    Signal,
}

/// What a refused window is: full, or what is left in it is held for a
/// share (issue 28: "kept for trending: 12 units").
pub fn held_text(held: Option<&Held>) -> String {
    match held {
        None => "full".to_string(),
        Some(h) => format!("not full, but {h}"),
    }
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::QuotaSaidNo {
                pool,
                per,
                retry_after,
                held,
            } => write!(
                f,
                "the quota said no: the {} window of pool '{pool}' is {}; units free up in {} (at {})",
                fmt_duration(*per),
                held_text(held.as_ref()),
                fmt_retry(*retry_after),
                local_time_in(*retry_after)
            ),
            Self::Blocked { until, reason } => write!(
                f,
                "the credential is blocked until {} ({})",
                local_datetime(*until),
                // (stored text, perhaps by another host or an older build)
                crate::logging::printable(reason)
            ),
            Self::UpstreamExhausted { reason, until } => write!(
                f,
                "the upstream reported its quota spent ({}); credential blocked until {}",
                crate::logging::printable(reason),
                local_datetime(*until)
            ),
            Self::LogLost {
                credential,
                pool,
                since,
                until,
            } => write!(
                f,
                "LOG LOST: the store lost the log of credential {credential} pool {pool} at {}; \
                 the pool counts as spent until {} (its longest window after the loss)",
                local_datetime(*since),
                local_datetime(*until)
            ),
            Self::LockBusy { holder, expires_in } => write!(
                f,
                "another run holds the lock: {holder} (lock expires in {} unless renewed)",
                fmt_duration(*expires_in)
            ),
            Self::LockLost => write!(
                f,
                "the run lock expired under this run (store away too long)"
            ),
            Self::Signal => write!(f, "a stop signal arrived"),
        }
    }
}

impl Stop {
    /// Every [`Stop::kind`], for a metric that lists them all.
    pub const KINDS: [&'static str; 7] = [
        "quota",
        "blocked",
        "upstream_exhausted",
        "log_lost",
        "lock_busy",
        "lock_lost",
        "signal",
    ];

    /// A short, stable name of the kind of stop, without its details (the
    /// `reason` label of `portion run --metrics-file`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::QuotaSaidNo { .. } => "quota",
            Self::Blocked { .. } => "blocked",
            Self::UpstreamExhausted { .. } => "upstream_exhausted",
            Self::LogLost { .. } => "log_lost",
            Self::LockBusy { .. } => "lock_busy",
            Self::LockLost => "lock_lost",
            Self::Signal => "signal",
        }
    }
}

/// How a run of one job ended, and what it did.
#[derive(Debug, Default)]
pub struct JobReport {
    pub job: String,
    pub stop: Option<Stop>,
    /// Requests sent (retries included).
    pub calls: u64,
    /// Requests sent without a charge (store unreachable, fail_open).
    pub unmetered: u64,
    /// Units per pool, settled costs at their actual.
    pub units: BTreeMap<String, u64>,
    /// Settled costs that kept their estimate (the response did not say,
    /// or no response came).
    pub estimates_kept: u64,
    /// Calls answered 304 (`conditional` steps).
    pub not_modified: u64,
    /// Pages whose kept validators were not sent, what they stand for (a
    /// page file, rows) gone.
    pub validators_lost: u64,
    /// Units per pool those calls gave back (their endpoint's `not_modified`).
    pub units_saved: BTreeMap<String, u64>,
    /// Observe mode: calls the ledger would have stopped, sent all the same.
    pub observed_rejections: u64,
    pub regions_done: usize,
    /// Regions whose walk ended with an error (a next page on another
    /// origin, a request the upstream refused for itself), and fan-out
    /// batches skipped so (`REGION step S batch K`): the run went on with
    /// the others, and exits 1.
    pub failed_regions: Vec<String>,
    /// The regions among [`Self::failed_regions`], each once (a region with
    /// several refused batches is one).
    pub failed_in: BTreeSet<String>,
    /// Inputs whose first page the upstream refused for themselves,
    /// recorded as failed (`portion status` lists them): the run exits 1.
    pub failed_inputs: u64,
    /// Walks ended by a next link or token that cannot be read (a `Link`
    /// header, a token or URL in the page: warned each).
    pub unreadable_links: u64,
    /// Walks cut at their step's `max_pages` while the upstream had more
    /// (warned each).
    pub walks_cut: u64,
    pub regions_total: usize,
    pub pages: u64,
    /// The pages are written as files (a `folder`); else only as rows.
    pub page_files: bool,
    /// `output.sqlite`: what the pages gave the table.
    pub rows: Option<RowCounts>,
    /// Rows upserted per sink of rows the job writes (`sqlite`,
    /// `postgres`), for the metrics.
    pub upserted: BTreeMap<&'static str, u64>,
    /// `output.sqlite`: pages with nothing at `items` (warned each).
    pub pages_without_items: u64,
    /// Fan-out values found in pages that could not be read (a lone
    /// surrogate escape), or not yet sent when their stored list was
    /// gone: the run exits 1 and says so, never "finished".
    pub values_lost: u64,
    /// Where the next run starts.
    pub resume: Option<Cursor>,
    /// A job of inputs not `once` that reached its file's end this run:
    /// the inputs done and skipped in that walk of it (the cursor then
    /// starts the next walk at line 1, its counts at 0).
    pub walk_ended: Option<(u64, u64)>,
}

/// `output.sqlite`: what a run's pages gave their table.
#[derive(Debug, Default)]
pub struct RowCounts {
    pub table: String,
    /// Rows upserted (a key twice: two), and of them those whose key the
    /// table did not have (the rest replaced the row of their key).
    pub upserted: u64,
    pub new: u64,
    /// Items skipped for want of a key.
    pub without_key: u64,
    /// Values of typed columns that did not fit their type (written NULL).
    pub unfit: crate::sink::columns::UnfitCounts,
}

/// Failed entries the summary names; past them, how many more.
const FAILED_SHOWN: usize = 5;

impl JobReport {
    /// Stop the run (the first reason stays): no request is sent after
    /// it; those in flight finish.
    pub fn stop_with(&mut self, stop: Stop) {
        self.stop.get_or_insert(stop);
    }

    /// Whether the run stops.
    pub fn stopping(&self) -> bool {
        self.stop.is_some()
    }

    /// A region, or a batch of it (`entry`), that ended with an error.
    pub fn fail(&mut self, region: &str, entry: String) {
        self.failed_in.insert(region.to_string());
        self.failed_regions.push(entry);
    }

    /// Exit 0 when the job served every region, 75 when it stopped
    /// cleanly, 1 when a region failed (which outranks a clean stop).
    pub fn exit_code(&self) -> ExitStatus {
        if self.failed() {
            ExitStatus::FAILURE
        } else if self.stop.is_some() {
            ExitStatus::STOPPED
        } else {
            ExitStatus::OK
        }
    }

    /// A region, batch or input failed, or fan-out values were lost.
    fn failed(&self) -> bool {
        !self.failed_regions.is_empty() || self.failed_inputs > 0 || self.values_lost > 0
    }

    /// The one summary line a run ends with.
    pub fn summary(&self) -> String {
        let units: Vec<String> = self.units.iter().map(|(p, u)| format!("{p} {u}")).collect();
        let why = match &self.stop {
            None if self.values_lost > 0 => format!(
                "done, {} fan-out value(s) LOST (unreadable in their pages, or their stored list gone)",
                self.values_lost
            ),
            None => "finished".to_string(),
            Some(s) => format!("stopped: {s}"),
        };
        format!(
            "job {}: {why}; {} calls{}, spent {}; {}{}; {}{}; next run starts at {}",
            self.job,
            self.calls,
            self.calls_notes(),
            if units.is_empty() {
                "none".into()
            } else {
                units.join(", ")
            },
            self.done(),
            self.failed_notes(),
            self.written(),
            self.rows_notes(),
            self.resume_at(),
        )
    }

    /// After the calls: unmetered, at their estimate, observed, and 304s
    /// with the units they saved.
    fn calls_notes(&self) -> String {
        let mut notes = String::new();
        if self.unmetered > 0 {
            notes += &format!(" ({} UNMETERED)", self.unmetered);
        }
        if self.estimates_kept > 0 {
            notes += &format!(" ({} at their estimate)", self.estimates_kept);
        }
        if self.observed_rejections > 0 {
            notes += &format!(
                " ({} OBSERVED: the ledger would have stopped them)",
                self.observed_rejections
            );
        }
        if self.not_modified > 0 {
            let saved: Vec<String> = (self.units_saved.iter())
                .map(|(p, u)| format!("{p} {u}"))
                .collect();
            let saved = if saved.is_empty() {
                "none".into()
            } else {
                saved.join(", ")
            };
            notes += &format!(
                " ({} answered 304, not modified: units saved {saved})",
                self.not_modified
            );
        }
        notes
    }

    /// After how far the job is: regions failed (the first few named),
    /// inputs failed, walks ended at a link that cannot be read or cut at
    /// `max_pages`.
    fn failed_notes(&self) -> String {
        let mut notes = match self.failed_regions.len() {
            0 => String::new(),
            n => {
                let shown = &self.failed_regions[..n.min(FAILED_SHOWN)];
                let more = match n.saturating_sub(FAILED_SHOWN) {
                    0 => String::new(),
                    k => format!(" and {k} more"),
                };
                format!(" ({n} FAILED: {}{more})", shown.join(", "))
            }
        };
        if self.failed_inputs > 0 {
            notes += &format!(
                ", {} of them failed this run (listed by `portion status`)",
                self.failed_inputs
            );
        }
        if self.unreadable_links > 0 {
            notes += &format!(
                " ({} ended at a next link or token that cannot be read)",
                self.unreadable_links
            );
        }
        if self.walks_cut > 0 {
            notes += &format!(" ({} walks cut at max_pages)", self.walks_cut);
        }
        notes
    }

    /// The pages: files written, or (no `folder`) pages whose rows went
    /// into the table, and nothing else.
    fn written(&self) -> String {
        match &self.rows {
            Some(r) if !self.page_files => {
                format!("{} pages' rows committed to table {}", self.pages, r.table)
            }
            _ => format!("{} pages written", self.pages),
        }
    }

    /// After the pages: the rows upserted (`output.sqlite`), new and
    /// replacing the row of their key, items without a key, values that
    /// did not fit their typed column, pages with nothing at `items`.
    fn rows_notes(&self) -> String {
        let mut notes = match &self.rows {
            None => String::new(),
            Some(r) => format!(
                ", {} rows upserted ({} new, {} replaced{})",
                r.upserted,
                r.new,
                r.upserted.saturating_sub(r.new),
                match r.without_key {
                    0 => String::new(),
                    n => format!("; {n} items without a key skipped"),
                }
            ),
        };
        if let Some(r) = self.rows.as_ref().filter(|r| !r.unfit.is_empty()) {
            notes += &format!(
                ", values not fitting their column's type written NULL: {}",
                r.unfit
            );
        }
        if self.pages_without_items > 0 {
            notes += &format!(
                ", {} page(s) with nothing at `items`",
                self.pages_without_items
            );
        }
        notes
    }

    /// How far the job is: regions this run, or a job of inputs' inputs
    /// as its cursor counts them (ever, for a once-job; in this walk of
    /// its file, for one that is not, or in the walk this run ended).
    fn done(&self) -> String {
        if let Some((done, skipped)) = self.walk_ended {
            return format!(
                "inputs done {done}, {skipped} skipped (the whole file: its next walk starts over)"
            );
        }
        match self.resume.as_ref().and_then(|c| c.input.as_ref()) {
            Some(at) => format!("inputs done {}, {} skipped", at.done, at.skipped),
            None => format!("regions done {}/{}", self.regions_done, self.regions_total),
        }
    }

    /// Where the next run starts (a job of inputs: with its line).
    fn resume_at(&self) -> String {
        let Some(c) = &self.resume else {
            return "the first region".into();
        };
        let (step, page) = (c.place.step, c.place.page);
        match (&c.input, c.key.is_empty()) {
            (Some(at), true) => format!("line {} of its inputs", at.line.max(1)),
            (Some(at), false) => format!("{} (line {}) step {step} page {page}", c.key, at.line),
            (None, true) => format!("step {step} page {page}"),
            (None, false) => format!("{} step {step} page {page}", c.key),
        }
    }
}

/// Log a job's summary line at the level its outcome deserves.
pub fn log_summary(report: &JobReport) {
    match report.stop {
        _ if report.failed() => {
            error!("{}", report.summary())
        }
        None => info!("{}", report.summary()),
        Some(_) => warn!("{}", report.summary()),
    }
}

/// Log a job's error.
pub fn log_error(job: &str, e: &Error) {
    error!(job, "{e}");
}

pub(super) fn local_time_in(d: Duration) -> String {
    // (a wait past the calendar, which a store written by an older build
    // may still hold, is shown as such rather than overflow)
    chrono::TimeDelta::from_std(d)
        .ok()
        .and_then(|d| chrono::Local::now().checked_add_signed(d))
        .map_or_else(
            || "beyond the calendar".to_string(),
            |t| clock_time(&t, d < PRECISE_BELOW),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal a fraction of a second from its end says so, and its
    /// instant to the tenth (issue 36, item 24): not "in 1s (at
    /// 19:48:55)" while the clock reads 19:48:55.55.
    #[test]
    fn a_refusal_under_a_few_seconds_says_its_wait_to_the_tenth() {
        let stop = |ms| Stop::QuotaSaidNo {
            pool: "units".into(),
            per: Duration::from_secs(20),
            retry_after: Duration::from_millis(ms),
            held: None,
        };
        let text = stop(400).to_string();
        let (_, tail) = text.split_once("units free up in ").unwrap();
        let (wait, at) = tail.split_once(" (at ").unwrap();
        assert_eq!(wait, "0.4s", "{text}");
        let at = at.trim_end_matches(')');
        // HH:MM:SS.t
        assert!(
            at.len() == 10
                && at.as_bytes()[8] == b'.'
                && at[9..].bytes().all(|b| b.is_ascii_digit()),
            "{text}"
        );
        assert!(
            stop(3_600_000)
                .to_string()
                .contains("units free up in 1h (at ")
        );
    }
}
