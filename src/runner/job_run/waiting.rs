//! Waiting inside a run (`max_wait`, `run --wait`): when the ledger
//! refuses a charge and says when the units free up, within the job's
//! bound, the run sleeps until then and charges again rather than
//! stopping with 75 and leaving the freed units to the next tick. Its lock
//! is renewed meanwhile, as always (`lock.rs`); a stop signal ends the wait
//! at once.
//!
//! With requests side by side, one waits and the others line up behind it
//! ([`Waiting::turn`]), in the order they were refused or came to charge,
//! so N requests do not each poll the store; once the waiter is admitted
//! the next in line charges.

use std::cell::Cell;
use std::time::Duration;

use tracing::{debug, info};

use super::terminal::ProgressLine;
use crate::config::Step;
use crate::runner::job_state::{JobState, RunWaiting};
use crate::runner::{Shutdown, Stop};

/// The shortest wait: a time the ledger says has passed (another clock's
/// reading) is waited this long, never spun on.
const LEAST: Duration = Duration::from_millis(10);

/// The run's line of requests waiting for units.
#[derive(Default)]
pub(super) struct Waiting {
    /// The longest wait (`run --wait`, else the job's `max_wait`).
    bound: Duration,
    line: tokio::sync::Mutex<()>,
    /// Requests holding or awaiting the line's turn.
    in_line: Cell<usize>,
}

/// A request's turn at the front of the line: the others wait behind it
/// until it is dropped.
pub(super) struct WaitTurn<'w> {
    _held: tokio::sync::MutexGuard<'w, ()>,
    _counted: InLine<'w>,
}

/// A request counted in the line, from when it asks for its turn until
/// its turn ends or it stops asking (its future dropped).
struct InLine<'w>(&'w Cell<usize>);

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

impl Waiting {
    pub(super) fn new(bound: Duration) -> Self {
        Self {
            bound,
            ..Self::default()
        }
    }

    /// The longest wait.
    pub(super) fn bound(&self) -> Duration {
        self.bound
    }

    /// How long to wait for what `stop` refused ([`pause_for`], within
    /// this run's bound); `None`: the run stops.
    pub(super) fn pause(&self, stop: &Stop, now: i64) -> Option<Duration> {
        pause_for(stop, self.bound, now)
    }

    /// Whether a request waits for units (a charge now would go ahead of
    /// it).
    pub(super) fn anyone(&self) -> bool {
        self.in_line.get() > 0
    }

    /// Take the front of the line (at once when nobody is in it).
    pub(super) async fn turn(&self) -> WaitTurn<'_> {
        self.in_line.set(self.in_line.get() + 1);
        let counted = InLine(&self.in_line);
        let held = self.line.lock().await;
        WaitTurn {
            _held: held,
            _counted: counted,
        }
    }
}

impl Waiting {
    /// Wait `pause` for the units `stop` refused to `step` (or until a
    /// stop signal), said in the log, on the terminal and in the job's
    /// store (`state`, for `status`).
    pub(super) async fn sit_out(
        &self,
        (job, state): (&str, Option<JobState<'_>>),
        progress: &ProgressLine<'_>,
        shutdown: &Shutdown,
        (step, stop, pause): (&Step, &Stop, Duration),
    ) {
        let pool = match stop {
            Stop::QuotaSaidNo { pool, .. } | Stop::LogLost { pool, .. } => pool.clone(),
            _ => String::new(),
        };
        let units = (step.cost.iter())
            .find(|c| c.pool.name == pool)
            .map_or(0, |c| c.units);
        let until = chrono::Local::now() + pause;
        let waiting = RunWaiting {
            pool,
            units,
            until: until.timestamp_micros(),
            why: waiting_for(stop),
        };
        // (noted before it is said: what the log says, `status` shows)
        note(job, state.as_ref(), Some(&waiting)).await;
        info!(
            job,
            "{}: waiting {} for the units (until {}), then charging again",
            waiting.why,
            crate::timefmt::fmt_wait(pause),
            crate::timefmt::clock_time(&until, true)
        );
        progress.waiting(job, &waiting);
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = shutdown.wait() => {}
        }
        note(job, state.as_ref(), None).await;
    }
}

/// What a run waiting inside itself waits for, as its log line says.
fn waiting_for(stop: &Stop) -> String {
    match stop {
        Stop::QuotaSaidNo { pool, per, .. } => {
            format!(
                "pool {pool}'s {} window is full",
                crate::timefmt::fmt_duration(*per)
            )
        }
        Stop::Blocked { reason, .. } => format!("the credential is blocked ({reason})"),
        Stop::LogLost { pool, .. } => format!("pool {pool}'s log was lost"),
        other => other.to_string(),
    }
}

/// What the run waits for, noted in the store for `status` (a store that
/// does not take it: only the log says it).
async fn note(job: &str, state: Option<&JobState<'_>>, waiting: Option<&RunWaiting>) {
    if let Some(state) = state
        && let Err(e) = state.set_waiting(waiting).await
    {
        debug!(job, "cannot note the wait in the store: {e}");
    }
}

/// How long to wait for what `stop` refused, when the run may (`bound`:
/// the longest wait; `now`: the time, in microseconds since the epoch, to
/// read a block's end against): a full window or a block that ends within
/// the bound. `None`: the run stops.
pub(super) fn pause_for(stop: &Stop, bound: Duration, now: i64) -> Option<Duration> {
    let until = |end: i64| Duration::from_micros(end.saturating_sub(now).max(0) as u64);
    let pause = match stop {
        Stop::QuotaSaidNo { retry_after, .. } => *retry_after,
        Stop::Blocked { until: end, .. } | Stop::LogLost { until: end, .. } => until(*end),
        _ => return None,
    };
    let pause = pause.max(LEAST);
    (!bound.is_zero() && pause <= bound).then_some(pause)
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    fn full(retry_ms: u64) -> Stop {
        Stop::QuotaSaidNo {
            pool: "requests".into(),
            per: Duration::from_secs(60),
            retry_after: Duration::from_millis(retry_ms),
            held: None,
        }
    }

    #[test]
    fn a_refusal_is_waited_for_within_the_bound_only() {
        let bound = Duration::from_secs(2);
        assert_eq!(
            pause_for(&full(300), bound, 0),
            Some(Duration::from_millis(300))
        );
        assert_eq!(pause_for(&full(2000), bound, 0), Some(bound));
        assert_eq!(pause_for(&full(2001), bound, 0), None);
        // No bound (the default): today's stop.
        assert_eq!(pause_for(&full(1), Duration::ZERO, 0), None);
        // A time already past is waited a little, never spun on.
        assert_eq!(pause_for(&full(0), bound, 0), Some(LEAST));
    }

    #[test]
    fn a_block_is_waited_for_until_its_end_and_a_lock_or_signal_never() {
        let bound = Duration::from_secs(60);
        let blocked = Stop::Blocked {
            until: 5_000_000,
            reason: "remaining 0".into(),
        };
        assert_eq!(
            pause_for(&blocked, bound, 2_000_000),
            Some(Duration::from_secs(3))
        );
        assert_eq!(pause_for(&blocked, bound, 9_000_000), Some(LEAST));
        assert_eq!(pause_for(&Stop::Signal, bound, 0), None);
        assert_eq!(pause_for(&Stop::LockLost, bound, 0), None);
    }

    #[tokio::test]
    async fn requests_line_up_behind_the_one_that_waits() {
        let w = Waiting::default();
        assert!(!w.anyone());
        let first = w.turn().await;
        assert!(w.anyone());
        let second = w.turn();
        tokio::pin!(second);
        // (the second cannot have its turn while the first holds it)
        assert!(second.as_mut().now_or_never().is_none());
        drop(first);
        let second = second.await;
        assert!(w.anyone());
        drop(second);
        assert!(!w.anyone());
        // One that stops asking (its future dropped) leaves the line.
        let third = w.turn().await;
        {
            let mut fourth = Box::pin(w.turn());
            assert!(fourth.as_mut().now_or_never().is_none());
            assert_eq!(w.in_line.get(), 2);
        }
        assert_eq!(w.in_line.get(), 1);
        drop(third);
        assert!(!w.anyone());
    }
}
