//! A job of inputs' progress, the operator's "end in sight": inputs done,
//! skipped, failed (the first few listed) and left, and when the rest will
//! be done at the pace the credential's windows allow
//! ([`crate::inputs::pace`]). `status` (every format) and `run --dry-run`
//! show the same numbers, read without writing anything.
//!
//! Done and skipped come from the cursor; left is counted by reading the
//! rest of the file from the cursor's place (the part done is not read
//! again); failed from the store's map of failed inputs.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::{Inputs, Job};
use crate::inputs::done_part::FileStamp;
use crate::inputs::pace::{Runs, finish, pools_now};
use crate::inputs::{Item, Reader, RecordStart};
use crate::ledger::{CredentialUsage, Micros, Store, StoreError};
pub use crate::runner::job_state::FailedInput;
use crate::runner::job_state::{JobState, Map};
use crate::runner::{self, cursor::Cursor};
use crate::timefmt::rfc3339;

/// How many failed inputs are listed (the count says how many there are).
pub const FAILURES_LISTED: usize = 5;

/// A job of inputs' progress (see the module's text).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct InputsProgress {
    /// Inputs done (failed ones among them): ever, for a once-job; in
    /// this walk of the file for one that is not.
    pub done: u64,
    /// Records skipped (unreadable, a repeated key), uncharged.
    pub skipped: u64,
    pub failed: u64,
    /// The first failed inputs, by line.
    pub failures: Vec<FailedInput>,
    /// Records after the cursor's place in the file, not yet done.
    pub left: u64,
    /// Units one input costs, per pool (the worst case: every page): a
    /// request's units over the inputs it carries (`inputs.batch`), so a
    /// fraction when batched (`0.02`), else a whole number.
    pub units_per_input: BTreeMap<String, serde_json::Number>,
    /// Inputs a request carries (`inputs.batch`, else 1).
    pub inputs_per_request: u64,
    /// A settled cost is counted at its estimate: the time is an estimate
    /// of an estimate.
    pub cost_estimated: bool,
    /// Seconds until the inputs left are done at the pace the windows
    /// allow (`None`: never, an input costs more than a window holds).
    pub done_in_seconds: Option<u64>,
    pub done_by: Option<String>,
    /// The same as Unix time (for the metric).
    #[serde(skip)]
    pub done_by_micros: Option<Micros>,
    /// A once-job whose done part changed in its file: its next run stops
    /// (78) before its first call, whatever `left` says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked: Option<Blocked>,
}

/// Why a once-job's next run stops before its first call, and the fix;
/// or (`restarts`) why a job that is not once walks its file again from
/// the first line.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Blocked {
    pub file: String,
    /// The first line that changed in the part done (0: the cursor keeps
    /// no record of it).
    pub line: u64,
    pub reason: String,
    pub fix: String,
    /// Not blocked: the next run starts this walk of the file again.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub restarts: bool,
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.restarts {
            return write!(
                f,
                "restarts: {} changed at line {} since the last run, in the part this walk has done: the next run walks it again from its first line",
                self.file, self.line
            );
        }
        write!(
            f,
            "blocked: {} line {}: {}; a run exits 78 until `{}`",
            self.file, self.line, self.reason, self.fix
        )
    }
}

/// The run's own check of a once-job's done part, made only when the file
/// is not the one the last run read (its stamp), so cheap when unchanged:
/// where the part done changed, if it did. A file that cannot be read is
/// `None` (the count of those left warns of it).
pub async fn blocked(
    store: &Store,
    job: &Job,
    cursor: Option<&Cursor>,
) -> Result<Option<Blocked>, StoreError> {
    let (Some(inputs), Some(at)) = (&job.inputs, cursor.and_then(|c| c.input.as_ref())) else {
        return Ok(None);
    };
    let Ok(meta) = std::fs::metadata(&inputs.file) else {
        return Ok(None);
    };
    if !runner::needs_check(at, &FileStamp::of(&meta)) {
        return Ok(None);
    }
    let restart = |line| Blocked {
        file: inputs.file.display().to_string(),
        line,
        reason: "the part of the file this walk has done changed".into(),
        fix: String::new(),
        restarts: true,
    };
    if !job.once && runner::unrecorded(at) {
        return Ok(Some(restart(0)));
    }
    let kept = (JobState::new(store, &job.name).read(Map::Done)).await?;
    let Some(chunks) = runner::kept_chunks(&kept, at) else {
        return Ok(None);
    };
    let Ok(Err(changed)) = runner::check_file(inputs, &chunks, &at.tail) else {
        return Ok(None);
    };
    if !job.once {
        return Ok(Some(restart(changed.line)));
    }
    Ok(Some(Blocked {
        file: inputs.file.display().to_string(),
        line: changed.line,
        reason:
            "the part of the file the job has done changed here (edited, truncated or replaced)"
                .into(),
        fix: format!("portion reset {} --yes", job.name),
        restarts: false,
    }))
}

/// The number of `job`'s failed inputs and the first [`FAILURES_LISTED`]
/// of them by line.
pub async fn failures(store: &Store, job: &Job) -> Result<(u64, Vec<FailedInput>), StoreError> {
    let state = JobState::new(store, &job.name);
    let n = state.len(Map::Failed).await?;
    if n == 0 {
        return Ok((0, Vec::new()));
    }
    let mut all = state.failed(Map::Failed).await?;
    all.sort_by_key(|f| f.line);
    all.truncate(FAILURES_LISTED);
    Ok((n, all))
}

/// Records in `inputs` after the cursor's place (a job that never ran:
/// all of them), less those a run with requests side by side already did.
pub fn left(inputs: &Inputs, cursor: Option<&Cursor>) -> std::io::Result<u64> {
    let at = cursor.and_then(|c| c.input.as_ref());
    let from = at.map_or_else(RecordStart::default, |a| RecordStart {
        offset: a.offset,
        line: a.line.max(1),
    });
    let mut n = 0u64;
    for item in Reader::open(inputs, from)? {
        if let Item::Record(_) = item? {
            n += 1;
        }
    }
    Ok(n.saturating_sub(ahead_done(cursor)))
}

/// Inputs after the cursor's place that are done (in its `ahead`).
fn ahead_done(cursor: Option<&Cursor>) -> u64 {
    cursor.map_or(0, |c| c.ahead.iter().filter(|a| a.done).count() as u64)
}

/// `units` a request over the `per_request` inputs it carries: a whole
/// number when it divides, else a fraction.
fn per_input(units: u64, per_request: u64) -> serde_json::Number {
    if units.is_multiple_of(per_request) {
        (units / per_request).into()
    } else {
        serde_json::Number::from_f64(units as f64 / per_request as f64).unwrap_or_else(|| 0.into())
    }
}

/// `job`'s progress from its cursor, its failures and the credential's
/// usage now. `None` for a job without inputs.
pub fn progress(
    job: &Job,
    cursor: Option<&Cursor>,
    failed: (u64, Vec<FailedInput>),
    usage: &CredentialUsage,
) -> std::io::Result<Option<InputsProgress>> {
    let Some(inputs) = &job.inputs else {
        return Ok(None);
    };
    let at = cursor.and_then(|c| c.input.clone()).unwrap_or_default();
    let left = left(inputs, cursor)?;
    // (the windows pace requests: a batch of inputs costs a request's
    // units, so the inputs left take their batches' requests)
    let per_request = inputs.per_request();
    // (as the plan counts it: the budgets' pace where a run waits out a
    // refusal, the timer's ticks where it stops at one)
    let runs = Runs {
        max_wait: job.max_wait,
        every: job.schedule,
    };
    let finish = finish(left.div_ceil(per_request), &pools_now(job, usage), runs).map(|f| f.time);
    let by = finish.map(|d| {
        usage
            .at
            .saturating_add(d.as_micros().min(i64::MAX as u128) as i64)
    });
    Ok(Some(InputsProgress {
        done: at.done + ahead_done(cursor),
        skipped: at.skipped,
        failed: failed.0,
        failures: failed.1,
        left,
        units_per_input: job
            .units_per_run()
            .into_iter()
            .map(|(pool, u)| (pool, per_input(u, per_request)))
            .collect(),
        inputs_per_request: per_request,
        cost_estimated: job.steps.iter().any(|s| !s.settle.is_empty()),
        done_in_seconds: finish.map(|d| d.as_secs_f64().ceil() as u64),
        done_by: by.map(rfc3339),
        done_by_micros: by,
        blocked: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Secrets};
    use crate::ledger::{CredentialLog, summarize};

    /// A once-job of 12 inputs, each a settled cost of 2,000 tokens at its
    /// estimate, in a calendar day (UTC) of 10,000.
    const CONFIG: &str = r#"
credentials:
  llm:
    secret: { env: PORTION_TEST_NEVER_SET }
    pools:
      tokens: [{ limit: 10000, per: 1d, aligned: UTC }]
endpoints:
  chat: { cost: { tokens: { estimate: 2000, actual: /usage/total_tokens } } }
jobs:
  summaries:
    credential: llm
    inputs: { file: ids.txt }
    once: true
    steps:
      - endpoint: chat
        request: { url: "http://127.0.0.1:9/chat/{key}" }
    output: out/s
"#;

    #[test]
    fn a_calendar_window_and_a_settled_cost_give_the_time_to_finish() {
        let dir = tempfile::tempdir().unwrap();
        let keys: Vec<String> = (0..12).map(|i| format!("K{i}")).collect();
        std::fs::write(dir.path().join("ids.txt"), keys.join("\n") + "\n").unwrap();
        let file = dir.path().join("portion.yaml");
        let config = Config::parse(&file, CONFIG, Secrets::Skip).expect("valid");
        let cred = &config.credentials[0];
        // 18:00 UTC: the day starts afresh in 6 hours.
        let at = chrono::DateTime::parse_from_rfc3339("2026-11-25T18:00:00Z")
            .unwrap()
            .timestamp_micros();
        let log = CredentialLog {
            at,
            serial: 0,
            blocked_until: 0,
            blocked_reason: String::new(),
            retain: 0,
            tags: Vec::new(),
            pools: vec![Vec::new()],
            lost: vec![0],
            others: vec![Default::default()],
            observed: vec![(0, 0)],
            reserved: vec![Vec::new()],
        };
        let usage = summarize(&cred.name, &cred.pools, &log);
        let p = progress(&config.jobs[0], None, Default::default(), &usage)
            .unwrap()
            .expect("a job of inputs");
        assert_eq!((p.done, p.left), (0, 12));
        assert!(p.cost_estimated);
        assert_eq!(
            p.units_per_input,
            [("tokens".to_string(), 2000.into())].into()
        );
        // 5 inputs fit today, 5 tomorrow (which starts in 6 hours), the
        // last 2 the day after, from its start.
        assert_eq!(p.done_in_seconds, Some(30 * 3600));
        assert_eq!(p.done_by.as_deref(), Some("2026-11-27T00:00:00Z"));
    }
}
