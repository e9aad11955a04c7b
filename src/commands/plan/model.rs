//! The plan as data: what `portion run --dry-run` found, per credential and
//! job, in one serialisable tree. `--json` prints it as it is and the table
//! is rendered from it, so both always say the same thing.

use std::collections::BTreeMap;

use serde::Serialize;

pub use super::observed::ObservedShare;
use crate::commands::common::inputs::InputsProgress;

/// The whole plan: when it was made, against what, per credential.
#[derive(Debug, Serialize)]
pub struct Plan {
    pub at: String,
    /// Where the remaining budgets came from.
    pub store: String,
    /// False when the store was unreachable: the plan assumes full budgets.
    pub store_reachable: bool,
    pub credentials: Vec<CredentialPlan>,
}

/// One credential's jobs, planned together, and its pools.
#[derive(Debug, Serialize)]
pub struct CredentialPlan {
    pub credential: String,
    pub blocked_until: Option<String>,
    pub jobs: Vec<JobPlan>,
    pub pools: Vec<PoolPlan>,
}

/// One job: the worst case of a run, the next run, its schedule.
#[derive(Debug, Serialize)]
pub struct JobPlan {
    pub job: String,
    pub calls_per_run: u64,
    pub units_per_run: BTreeMap<String, u64>,
    pub next_run: NextRun,
    pub schedule: Option<SchedulePlan>,
    /// A job of inputs: done, failed, left and when the rest will be done
    /// (its `calls_per_run` and `units_per_run` are per input).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inputs: Option<InputsProgress>,
    /// `output.sqlite`: where the rows go (database, table, index).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<String>,
    /// A step is `conditional`: a call answered 304 costs its endpoint's
    /// `not_modified`, so a run may cost less than planned.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub conditional: bool,
    /// A conditional step whose 304 costs less: the share of its calls
    /// answered 304 in the store's log, and what a run is expected to
    /// spend with it (what the schedule and the inputs' time to finish
    /// count; none known yet: full pages).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_modified: Option<ObservedShare>,
    /// A job of inputs: what its time to finish assumes of its runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish: Option<FinishAssumes>,
}

/// How a job of inputs' runs meet a refusal, as its time to finish counts
/// them.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct FinishAssumes {
    pub runs: RunsAtRefusal,
    /// The longest a run waits inside itself (`max_wait`, `run --wait`).
    pub max_wait_seconds: u64,
    /// `schedule: every D`, where a run that stopped is followed.
    pub every_seconds: Option<u64>,
}

/// What a run does when the ledger refuses a charge, for the rest to be
/// done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunsAtRefusal {
    /// It waits inside itself for the units of every window it needs more
    /// of: the rest at the budgets' pace.
    Waits,
    /// It stops; the units freed meanwhile wait for the next tick.
    Stops,
    /// It waits for some windows' units, and stops at the others' (whose
    /// waits are longer than its bound) until the next tick.
    WaitsOrStops,
    /// No schedule to count ticks by: at the budgets' pace, as if a run
    /// started whenever units free up.
    Paced,
}

/// What the next run would do with what remains now.
#[derive(Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum NextRun {
    /// The whole run fits what remains.
    Fits { calls: u64 },
    /// It would stop here, after `calls` calls, because `pool`'s `per_seconds` window is full.
    Stops {
        region: String,
        step: usize,
        page: u32,
        calls: u64,
        pool: String,
        per_seconds: u64,
    },
    /// A job of inputs: the next run does `inputs` of those left (as many
    /// as fit what remains now), `calls` at most; `left_after` wait for
    /// later runs.
    Inputs {
        inputs: u64,
        calls: u64,
        left_after: u64,
    },
    /// The credential is blocked: it would send nothing.
    Blocked { until: String },
    /// An observe-mode credential's run: the ledger stops nothing, so all
    /// `calls` go out; `refused` of them would not have fitted, the first
    /// at this place, where `pool`'s `per_seconds` window is full.
    Observes {
        calls: u64,
        refused: u64,
        region: String,
        step: usize,
        page: u32,
        pool: String,
        per_seconds: u64,
    },
}

/// How a job's `schedule` meets the credential's windows over a day.
#[derive(Debug, Serialize)]
pub struct SchedulePlan {
    pub every_seconds: u64,
    pub runs_per_day: f64,
    pub units_per_day: BTreeMap<String, u64>,
    /// Per window the job spends from: what a steady schedule needs of it.
    pub windows: Vec<WindowNeed>,
    /// The first scheduled run in the next 24 hours that would not fit (all
    /// of the credential's scheduled jobs together, from today's log).
    pub runs_out: Option<RunsOut>,
    /// The shortest `every` that fits every window, the other jobs' schedules
    /// as they are; `None` when one run alone is more than a window's budget.
    pub fastest_every_seconds: Option<u64>,
}

/// One window a scheduled job spends from, in steady state.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct WindowNeed {
    pub pool: String,
    pub per_seconds: u64,
    pub budget: u64,
    /// Runs of this job that start inside one window.
    pub runs_per_window: u64,
    /// Runs of this job that one window's budget holds, alone.
    pub runs_budget_holds: u64,
    /// Units all scheduled jobs of the credential need in one window.
    pub units_needed: u64,
    pub fits: bool,
}

/// The first scheduled run that would not fit, and the window that is full.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct RunsOut {
    pub at: String,
    pub pool: String,
    pub per_seconds: u64,
}

/// One pool of the credential over a day of scheduled runs.
#[derive(Debug, Serialize)]
pub struct PoolPlan {
    pub pool: String,
    /// Units a day all scheduled jobs need from this pool.
    pub units_per_day: u64,
    /// Set when no window is short enough to spread the pool's budget.
    pub pacing: Option<Pacing>,
}

/// A pool whose budget can go in one burst, and the window that would spread it.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct Pacing {
    pub longest_seconds: u64,
    pub budget: u64,
    /// How fast the windows let the whole budget go.
    pub spendable_in_seconds: u64,
    /// The proposed window: at most `limit` units per `per_seconds`, the
    /// budget's rate (or, when no window of a few rounds is at exactly
    /// that rate, a little above it: never below).
    pub propose_limit: u64,
    pub propose_per_seconds: u64,
    /// The largest job's units per run, which the window holds.
    pub round: u64,
}
