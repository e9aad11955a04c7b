//! A job of inputs planned: its progress (done, failed, left, when the rest
//! will be done: [`crate::commands::status::inputs`]) and its next run,
//! the inputs left that fit what remains now, each at its cost per input.

use super::cost::Remaining;
use super::model::NextRun;
use crate::config::Job;

/// How many of `left` inputs the next run of `job` does with what remains
/// now (all of them in observe mode: the ledger stops nothing), spending
/// their units from `remaining` so the credential's later jobs see less.
pub fn next_run(job: &Job, left: u64, remaining: &mut Remaining, observe: bool) -> NextRun {
    let per_input = job.units_per_run();
    let fits = per_input
        .iter()
        .filter(|(_, u)| *u > 0)
        .flat_map(|(pool, u)| {
            remaining
                .iter()
                .filter(move |((p, _), _)| p == pool)
                .map(move |(_, r)| r / u)
        })
        .min()
        .unwrap_or(u64::MAX);
    let inputs = if observe { left } else { left.min(fits) };
    for (pool, u) in &per_input {
        for ((p, _), r) in remaining.iter_mut() {
            if p == pool {
                *r = r.saturating_sub(inputs.saturating_mul(*u));
            }
        }
    }
    NextRun::Inputs {
        inputs,
        calls: inputs.saturating_mul(job.calls_per_run()),
        left_after: left - inputs,
    }
}
