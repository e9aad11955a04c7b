//! The progress bar a run of a job of inputs draws on a terminal
//! (`indicatif`, which redraws it at most a few times a second): inputs
//! done of those in the file, the run's rate, when the rest will be done
//! at that rate and when at the pace the budgets allow (the time `status`
//! shows: a run stopped by its budget goes on at the next ticks). None
//! under cron or systemd: the run's `progress` flag (stderr a terminal)
//! decides before anything here is called.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::timefmt::fmt_duration;

/// Each job's bar while it runs, by job: the run's progress hook calls in
/// with what it knows at each page, and the bar keeps the rate between
/// calls.
static BARS: Mutex<BTreeMap<String, ProgressBar>> = Mutex::new(BTreeMap::new());

/// Draw `job`'s bar at `done` (done and skipped, as the cursor counts
/// them) of `total`, asked for once, when the bar is first drawn; `pace`:
/// when the rest will be done at the budgets' pace, once known (`None`
/// inside: never). Returns the inputs left.
pub(crate) fn inputs(
    job: &str,
    done: u64,
    total: impl FnOnce() -> u64,
    pace: Option<Option<Duration>>,
    spent: &str,
) -> u64 {
    let mut bars = BARS.lock().unwrap_or_else(|e| e.into_inner());
    let bar = bars.entry(job.to_string()).or_insert_with(|| {
        let bar = ProgressBar::with_draw_target(Some(total()), ProgressDrawTarget::stderr())
            .with_style(style())
            .with_prefix(job.to_string())
            .with_position(done);
        // (the rate is this run's: inputs done before it do not count)
        bar.reset_eta();
        bar
    });
    bar.set_position(done);
    let pace = match pace {
        None => String::new(),
        Some(None) => ", never at the budgets' pace".into(),
        Some(Some(d)) => format!(", ~{} at the budgets' pace", fmt_duration(d)),
    };
    bar.set_message(format!("{pace}; spent {spent}"));
    bar.length().unwrap_or(done).saturating_sub(done)
}

/// Take `job`'s bar off the terminal; whether it had one.
pub(crate) fn clear(job: &str) -> bool {
    let bar = BARS.lock().unwrap_or_else(|e| e.into_inner()).remove(job);
    bar.map(|b| b.finish_and_clear()).is_some()
}

/// One line: the count, the rate (one decimal: the default's four
/// flicker), the time left at this rate and at the budgets' pace.
fn style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{prefix}: {bar:20} {pos}/{len} inputs, {rate}, the rest in ~{eta} at this rate{msg}",
    )
    .expect("the template is valid")
    .with_key(
        "rate",
        |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{:.1}/s", s.per_sec());
        },
    )
}
