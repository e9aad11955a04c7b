//! The progress bar a run of a job of inputs draws on a terminal
//! (`indicatif`, which redraws it at most a few times a second): inputs
//! done of those in the file, the run's rate and when the rest will be
//! done at that rate. None under cron or systemd: the run's `progress`
//! flag (stderr a terminal) decides before anything here is called.

use std::collections::BTreeMap;
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Each job's bar while it runs, by job: the run's progress hook calls in
/// with what it knows at each page, and the bar keeps the rate between
/// calls.
static BARS: Mutex<BTreeMap<String, ProgressBar>> = Mutex::new(BTreeMap::new());

/// Draw `job`'s bar at `done` (done and skipped, as the cursor counts
/// them) of `total`, asked for once, when the bar is first drawn.
pub(crate) fn inputs(job: &str, done: u64, total: impl FnOnce() -> u64, message: String) {
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
    bar.set_message(message);
}

/// Take `job`'s bar off the terminal; whether it had one.
pub(crate) fn clear(job: &str) -> bool {
    let bar = BARS.lock().unwrap_or_else(|e| e.into_inner()).remove(job);
    bar.map(|b| b.finish_and_clear()).is_some()
}

/// One line that fits 80 columns for a short job name: the count, the
/// rate (one decimal: the default's four flicker) and the time left.
fn style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{prefix}: {bar:20} {pos}/{len} inputs, {rate}, the rest in ~{eta}; spent {msg}",
    )
    .expect("the template is valid")
    .with_key(
        "rate",
        |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{:.1}/s", s.per_sec());
        },
    )
}
