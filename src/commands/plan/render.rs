//! The plan as the table an operator reads: per credential, each job's
//! cost per run, its next run and its schedule against each window, then
//! the pacing proposals. Everything it says is in the [`Plan`] already, so
//! the text and `--json` cannot disagree.

use std::collections::BTreeMap;
use std::time::Duration;

use super::model::{
    CredentialPlan, FinishAssumes, JobPlan, NextRun, ObservedShare, Plan, PoolPlan, RunsAtRefusal,
    SchedulePlan,
};
use crate::commands::common::inputs::InputsProgress;
use crate::commands::table::Paint;
use crate::ledger::Micros;
use crate::timefmt::{fmt_duration, from_rfc3339, local_datetime, local_time};

/// "1 call", "2 calls".
fn count(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn secs(s: u64) -> String {
    fmt_duration(Duration::from_secs(s))
}

/// The plan as text.
pub fn render(plan: &Plan, p: Paint) -> String {
    let now = from_rfc3339(&plan.at);
    let mut out = format!(
        "plan as of {}  ·  store: {}\n",
        local_datetime(now),
        plan.store
    );
    if !plan.store_reachable {
        out.push_str(&format!(
            "{}\n",
            p.yellow("the store is unreachable: remaining budgets are assumed full")
        ));
    }
    for c in &plan.credentials {
        out.push_str(&credential(c, p, now));
    }
    out
}

/// One credential: its block, its jobs, then its pools' pacing proposals.
fn credential(c: &CredentialPlan, p: Paint, now: Micros) -> String {
    let mut out = format!("\n{}\n", p.bold(&format!("credential {}", c.credential)));
    if let Some(until) = &c.blocked_until {
        out.push_str(&format!(
            "  {} until {}\n",
            p.red("BLOCKED by the upstream"),
            local_datetime(from_rfc3339(until))
        ));
    }
    for j in &c.jobs {
        out.push_str(&job(j, p, now));
    }
    for pool in &c.pools {
        out.push_str(&pacing(pool));
    }
    out
}

/// One job: its cost per run, its next run and its schedule.
fn job(j: &JobPlan, p: Paint, now: Micros) -> String {
    let units: Vec<String> = j
        .units_per_run
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let mut out = format!(
        "  job {}: per {} at most {}, spending {}\n",
        p.bold(&j.job),
        if j.inputs.is_some() { "input" } else { "run" },
        count(j.calls_per_run, "call"),
        units.join(", ")
    );
    if let Some(i) = &j.inputs {
        let at_share =
            (j.not_modified.as_ref()).is_some_and(|o| o.expected_units_per_run.is_some());
        out.push_str(&inputs(i, at_share, j.finish.as_ref()));
    }
    if let Some(rows) = &j.rows {
        out.push_str(&format!("    rows into {rows}\n"));
    }
    match &j.not_modified {
        Some(o) => out.push_str(&observed(o, j)),
        None if j.conditional => out.push_str(
            "    conditional steps: a page answered 304 (unchanged) costs its endpoint's not_modified, so a run may cost less than planned\n",
        ),
        None => {}
    }
    out.push_str(&format!("    next run: {}\n", next_run(&j.next_run, p)));
    match &j.schedule {
        Some(s) => out.push_str(&schedule(s, p, now)),
        None => {
            out.push_str("    no schedule: add `schedule: every DURATION` to plan a day of runs\n")
        }
    }
    out
}

/// A conditional job's share of 304s, and what its runs are planned at.
fn observed(o: &ObservedShare, j: &JobPlan) -> String {
    let per = if j.inputs.is_some() {
        "a request"
    } else {
        "a run"
    };
    let Some(expected) = &o.expected_units_per_run else {
        return "    conditional steps: no share of 304s known yet (none of their calls in the store's log): full pages assumed\n".into();
    };
    let units = |of: &BTreeMap<String, u64>| {
        let each: Vec<String> = of.iter().map(|(k, v)| format!("{k} {v}")).collect();
        each.join(", ")
    };
    format!(
        "    conditional steps: {} of their {} in the store's log answered 304 ({:.0}%): {per} planned at {} (full pages: {}), its schedule and time to finish too\n",
        o.answered_304,
        count(o.calls, "call"),
        100.0 * o.answered_304 as f64 / o.calls.max(1) as f64,
        units(expected),
        units(&j.units_per_run),
    )
}

/// A job of inputs' progress: counts, and when the rest will be done
/// (`at_share`: each request at a conditional job's share of 304s; its
/// runs meeting a refusal as `finish` says).
fn inputs(i: &InputsProgress, at_share: bool, finish: Option<&FinishAssumes>) -> String {
    let when = match (i.left, i.done_by_micros, i.done_in_seconds) {
        _ if i.blocked.is_some() => i
            .blocked
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        (0, _, _) => "nothing left to do".to_string(),
        (_, Some(t), Some(secs)) => format!(
            "the rest done by {} (in {}) {}{}{}",
            local_datetime(t),
            fmt_duration(Duration::from_secs(secs)),
            finish.map_or_else(|| PACED.to_string(), runs_at_refusal),
            if at_share {
                ", each request at its share of 304s"
            } else {
                ""
            },
            if i.cost_estimated {
                ", settled costs counted at their estimate"
            } else {
                ""
            }
        ),
        _ => "never: one input costs more than a window's budget".to_string(),
    };
    format!(
        "    inputs: {} done, {} skipped, {} failed, {} left; {when}\n",
        i.done, i.skipped, i.failed, i.left
    )
}

/// The time to finish of runs started whenever units free up.
const PACED: &str = "at the pace the budgets allow";

/// How the runs of a job of inputs go on, as its time to finish assumes.
fn runs_at_refusal(f: &FinishAssumes) -> String {
    let wait = fmt_duration(Duration::from_secs(f.max_wait_seconds));
    let tick = (f.every_seconds)
        .map(|s| fmt_duration(Duration::from_secs(s)))
        .unwrap_or_default();
    match f.runs {
        RunsAtRefusal::Paced => PACED.to_string(),
        RunsAtRefusal::Waits => format!("{PACED}, the run waiting up to {wait} inside itself"),
        RunsAtRefusal::Stops => {
            format!("each run stopping at a refusal until the next tick (every {tick})")
        }
        RunsAtRefusal::WaitsOrStops => format!(
            "the run waiting up to {wait} inside itself, stopping at a longer refusal until the next tick (every {tick})"
        ),
    }
}

/// The verdict on the next run, coloured by how it ends.
fn next_run(next: &NextRun, p: Paint) -> String {
    match next {
        NextRun::Fits { calls } => p.green(&format!(
            "fits what remains now ({})",
            count(*calls, "call")
        )),
        NextRun::Stops {
            region,
            step,
            page,
            calls,
            pool,
            per_seconds,
        } => p.yellow(&format!(
            "would stop at {}step {step} page {page} after {}: the {} window of pool {pool} is full",
            region_before(region),
            count(*calls, "call"),
            secs(*per_seconds)
        )),
        NextRun::Inputs {
            inputs,
            calls,
            left_after: 0,
        } => p.green(&format!(
            "does the {} left: fits what remains now ({} at most)",
            count(*inputs, "input"),
            count(*calls, "call")
        )),
        NextRun::Inputs {
            inputs,
            calls,
            left_after,
        } => p.yellow(&format!(
            "does {} ({} at most), as many as fit what remains now; {left_after} left for later runs",
            count(*inputs, "input"),
            count(*calls, "call")
        )),
        NextRun::Blocked { until } => p.red(&format!(
            "sends nothing: blocked until {}",
            local_datetime(from_rfc3339(until))
        )),
        NextRun::Observes {
            calls,
            refused,
            region,
            step,
            page,
            pool,
            per_seconds,
        } => p.yellow(&format!(
            "sends all {} (observe mode: the ledger stops nothing); {} would have been refused, from {}step {step} page {page} on: the {} window of pool {pool} is full",
            count(*calls, "call"),
            refused,
            region_before(region),
            secs(*per_seconds)
        )),
    }
}

/// A job's schedule: a day of runs, each window, when it runs out, and the
/// fastest schedule that fits.
fn schedule(s: &SchedulePlan, p: Paint, now: Micros) -> String {
    let per_day: Vec<String> = s
        .units_per_day
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let mut out = format!(
        "    schedule every {}: {:.1} runs a day, {} a day\n",
        secs(s.every_seconds),
        s.runs_per_day,
        per_day.join(", ")
    );
    for w in &s.windows {
        let verdict = if w.fits {
            p.green("fits")
        } else {
            p.red("does not fit")
        };
        out.push_str(&format!(
            "      {} {}: {} start in a window; all scheduled jobs need {} of {} ({} of this job alone fit): {verdict}\n",
            w.pool,
            secs(w.per_seconds),
            count(w.runs_per_window, "run"),
            w.units_needed,
            w.budget,
            count(w.runs_budget_holds, "run")
        ));
    }
    match &s.runs_out {
        None => out.push_str("      over the next 24h every scheduled run fits\n"),
        Some(r) => out.push_str(&format!(
            "      {} at {} (the {} window of pool {})\n",
            p.yellow("the budget runs out"),
            local_time(from_rfc3339(&r.at), now),
            secs(r.per_seconds),
            r.pool
        )),
    }
    match s.fastest_every_seconds {
        Some(f) => out.push_str(&format!(
            "      fastest schedule that fits: every {}\n",
            secs(f)
        )),
        None => out.push_str(&format!(
            "      {}\n",
            p.red("no schedule fits: one run alone needs more than a window's budget")
        )),
    }
    out
}

/// The pool's pacing proposal, if it has one (else nothing).
fn pacing(pool: &PoolPlan) -> String {
    let Some(pc) = &pool.pacing else {
        return String::new();
    };
    let budget_rate = format!("{} per {}", pc.budget, secs(pc.longest_seconds));
    // (compared as products: limit/per against budget/longest)
    let exact = u128::from(pc.propose_limit) * u128::from(pc.longest_seconds)
        == u128::from(pc.budget) * u128::from(pc.propose_per_seconds);
    let rate = if exact {
        format!("the budget's own rate, {budget_rate}")
    } else {
        format!("a little above the budget's rate, {budget_rate}, which its own window still caps")
    };
    format!(
        "  pool {}: nothing spreads its {}-unit {} budget: its windows let it all go in {}, so a burst repeats every {}.\n    To spread it, add a pacing window: {{ limit: {}, per: {} }} ({rate}; a run of the largest job, {}, fits in one).\n",
        pool.pool,
        pc.budget,
        secs(pc.longest_seconds),
        if pc.spendable_in_seconds == 0 {
            "one burst".into()
        } else {
            secs(pc.spendable_in_seconds)
        },
        secs(pc.longest_seconds),
        pc.propose_limit,
        secs(pc.propose_per_seconds),
        count(pc.round, "unit"),
    )
}

/// "US " before a step and page, nothing for a job without regions.
fn region_before(region: &str) -> String {
    if region.is_empty() {
        String::new()
    } else {
        format!("{region} ")
    }
}
