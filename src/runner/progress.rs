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
    let bar = bars
        .entry(job.to_string())
        .or_insert_with(|| new_bar(job, done, total(), ProgressDrawTarget::stderr()));
    bar.set_position(done);
    let pace = match pace {
        None => String::new(),
        Some(None) => ", never at the budgets' pace".into(),
        Some(Some(d)) => format!(", ~{} at the budgets' pace", fmt_duration(d)),
    };
    bar.set_message(format!("{pace}; spent {spent}"));
    bar.length().unwrap_or(done).saturating_sub(done)
}

/// A bar at `done` of `total`: its rate is this run's, inputs done before
/// it do not count (the style measures from `done`, at the bar's birth).
fn new_bar(job: &str, done: u64, total: u64, target: ProgressDrawTarget) -> ProgressBar {
    ProgressBar::with_draw_target(Some(total), target)
        .with_style(style(done))
        .with_prefix(job.to_string())
        .with_position(done)
}

/// Take `job`'s bar off the terminal; whether it had one.
pub(crate) fn clear(job: &str) -> bool {
    let bar = BARS.lock().unwrap_or_else(|e| e.into_inner()).remove(job);
    bar.map(|b| b.finish_and_clear()).is_some()
}

/// One line: the count, the rate (one decimal: the default's four
/// flicker), the time left at this rate and at the budgets' pace. The rate
/// and the time are this run's own (from `base`, the inputs done when it
/// began): indicatif's estimate would count a resumed job's earlier inputs
/// as done in the first instant.
fn style(base: u64) -> ProgressStyle {
    let at = move |s: &indicatif::ProgressState| {
        this_run(s.pos().saturating_sub(base), s.len(), s.pos(), s.elapsed())
    };
    ProgressStyle::with_template(
        "{prefix}: {bar:20} {pos}/{len} inputs, {rate}, the rest in ~{rest} at this rate{msg}",
    )
    .expect("the template is valid")
    .with_key(
        "rate",
        move |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{:.1}/s", at(s).0);
        },
    )
    .with_key(
        "rest",
        move |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = match at(s).1 {
                Some(d) => write!(w, "{}", fmt_duration(d)),
                None => write!(w, "?"),
            };
        },
    )
}

/// This run's rate (`done` inputs in `elapsed`) and the time the rest of
/// `len` after `pos` takes at it (`None`: no rate yet).
fn this_run(done: u64, len: Option<u64>, pos: u64, elapsed: Duration) -> (f64, Option<Duration>) {
    let secs = elapsed.as_secs_f64();
    if done == 0 || secs <= 0.0 {
        return (0.0, None);
    }
    let rate = done as f64 / secs;
    let rest = len.unwrap_or(pos).saturating_sub(pos) as f64 / rate;
    (rate, Some(Duration::from_secs(rest.ceil() as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A resumed job, 700 of 900 done before this run: 200 in 2 s is
    /// 100/s, the 0 left at once; none yet is no rate at all (the probe
    /// saw 12206013.1/s, the 700 taken as this run's first instant).
    #[test]
    fn the_rate_is_this_runs_inputs_over_its_time() {
        let two = Duration::from_secs(2);
        assert_eq!(
            this_run(200, Some(900), 900, two),
            (100.0, Some(Duration::ZERO))
        );
        assert_eq!(
            this_run(100, Some(900), 800, two),
            (50.0, Some(Duration::from_secs(2)))
        );
        assert_eq!(
            this_run(0, Some(900), 700, Duration::from_millis(1)),
            (0.0, None)
        );
    }

    /// A terminal that keeps what is drawn on it.
    #[derive(Debug, Default, Clone)]
    struct Screen(std::sync::Arc<Mutex<String>>);

    impl indicatif::TermLike for Screen {
        fn width(&self) -> u16 {
            200
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.write_str(&format!("{s}\n"))
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().unwrap().push_str(s);
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The first frame of a resumed job's bar (700 of 900 done before the
    /// run) shows no rate yet, not the 700 as done in an instant.
    #[test]
    fn a_resumed_bar_counts_only_this_runs_inputs_in_its_rate() {
        let screen = Screen::default();
        let target = ProgressDrawTarget::term_like(Box::new(screen.clone()));
        let bar = new_bar("j", 700, 900, target);
        bar.set_position(700);
        bar.force_draw();
        let text = screen.0.lock().unwrap().clone();
        assert!(
            text.contains("700/900 inputs, 0.0/s, the rest in ~?"),
            "{text:?}"
        );
    }
}
