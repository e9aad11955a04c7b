//! `quota run --dry-run`: planning. No request, no charge, no cursor or lock
//! change: the store is only read. For each job: calls and units per run
//! (the worst case: `max_pages` pages per paginated step); whether the next
//! run fits what remains now, and if not where it would stop; with a
//! `schedule`, how a day of runs meets each window, when the budget would
//! run out, and the fastest schedule that fits. Jobs sharing a credential
//! are planned together, in the file's order. A pool whose budget nothing
//! spreads over its longest window gets a proposed pacing window.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::table::{Paint, emit};
use crate::Result;
use crate::cli::RunArgs;
use crate::config::{Config, Credential, Job};
use crate::ledger::{
    At, CredentialLog, Ledger, Micros, Store, StoreError, StoreLocation, summarize,
};
use crate::runner::cursor::Cursor;
use crate::timefmt::{fmt_duration, from_rfc3339, local_datetime, local_time, rfc3339};

const DAY: Duration = Duration::from_secs(86_400);
/// How far ahead the schedule is simulated.
const HORIZON: Duration = DAY;

#[derive(Debug, Serialize)]
pub struct Plan {
    pub at: String,
    /// Where the remaining budgets came from.
    pub store: String,
    /// False when the store was unreachable: the plan assumes full budgets.
    pub store_reachable: bool,
    pub credentials: Vec<CredentialPlan>,
}

#[derive(Debug, Serialize)]
pub struct CredentialPlan {
    pub credential: String,
    pub blocked_until: Option<String>,
    pub jobs: Vec<JobPlan>,
    pub pools: Vec<PoolPlan>,
}

#[derive(Debug, Serialize)]
pub struct JobPlan {
    pub job: String,
    pub calls_per_run: u64,
    pub units_per_run: BTreeMap<String, u64>,
    pub next_run: NextRun,
    pub schedule: Option<SchedulePlan>,
}

#[derive(Debug, Serialize)]
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
    /// The credential is blocked: it would send nothing.
    Blocked { until: String },
}

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

#[derive(Debug, Serialize)]
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

#[derive(Debug, Serialize)]
pub struct RunsOut {
    pub at: String,
    pub pool: String,
    pub per_seconds: u64,
}

#[derive(Debug, Serialize)]
pub struct PoolPlan {
    pub pool: String,
    /// Units a day all scheduled jobs need from this pool.
    pub units_per_day: u64,
    /// Set when no window is short enough to spread the pool's budget.
    pub pacing: Option<Pacing>,
}

#[derive(Debug, Serialize)]
pub struct Pacing {
    pub longest_seconds: u64,
    pub budget: u64,
    /// How fast the windows let the whole budget go.
    pub spendable_in_seconds: u64,
    /// The proposed window: at most `limit` units per `per_seconds`.
    pub propose_limit: u64,
    pub propose_per_seconds: u64,
}

pub async fn run(config: &Config, location: &StoreLocation, args: &RunArgs) -> Result<u8> {
    let jobs = config.select_jobs(&args.jobs)?;
    let at = At::StoreClock;
    let (store, store_error) = match Store::open(location).await {
        Ok(s) => (Some(s), None),
        Err(StoreError::Unavailable(e)) => (None, Some(e)),
        Err(e) => return Err(e.into()),
    };
    let plan = build(config, &jobs, store.as_ref(), store_error, location, at).await?;
    if args.json {
        emit(&(serde_json::to_string_pretty(&plan).expect("a plan serializes") + "\n"))
    } else {
        let p = Paint {
            on: super::colour_on_stdout(),
        };
        emit(&render(&plan, p))
    }
}

/// Read what the plan needs from the store (nothing is written) and plan.
pub async fn build(
    config: &Config,
    jobs: &[&Job],
    store: Option<&Store>,
    mut store_error: Option<String>,
    location: &StoreLocation,
    at: At,
) -> Result<Plan> {
    let fallback_now = match at {
        At::Fixed(us) => us,
        At::StoreClock => chrono::Utc::now().timestamp_micros(),
    };
    let mut now = fallback_now;
    let mut credentials = Vec::new();
    for cred in &config.credentials {
        let cred_jobs: Vec<&Job> = jobs
            .iter()
            .copied()
            .filter(|j| config.credential(j).name == cred.name)
            .collect();
        if cred_jobs.is_empty() {
            continue;
        }
        let mut log = None;
        let mut cursors = BTreeMap::new();
        if let (Some(store), None) = (store, &store_error) {
            match read(store, cred, &cred_jobs, at).await {
                Ok((l, c)) => {
                    now = l.at;
                    log = Some(l);
                    cursors = c;
                }
                Err(StoreError::Unavailable(e)) => store_error = Some(e),
                Err(e) => return Err(e.into()),
            }
        }
        let log = log.unwrap_or_else(|| CredentialLog {
            at: fallback_now,
            serial: 0,
            blocked_until: 0,
            blocked_reason: String::new(),
            pools: vec![Vec::new(); cred.pools.len()],
        });
        credentials.push(plan_credential(cred, &cred_jobs, &log, &cursors));
    }
    let store_desc = super::store_name(location);
    Ok(Plan {
        at: rfc3339(now),
        store: match &store_error {
            None => store_desc,
            Some(e) => format!("{store_desc} unreachable ({e}): planned against full budgets"),
        },
        store_reachable: store_error.is_none(),
        credentials,
    })
}

async fn read(
    store: &Store,
    cred: &Credential,
    jobs: &[&Job],
    at: At,
) -> std::result::Result<(CredentialLog, BTreeMap<String, Cursor>), StoreError> {
    let log = store.read(&cred.name, &cred.pools, at).await?;
    let mut cursors = BTreeMap::new();
    for j in jobs {
        if let Some(c) = store
            .load_cursor(&j.name)
            .await?
            .as_deref()
            .and_then(Cursor::decode)
        {
            cursors.insert(j.name.clone(), c);
        }
    }
    Ok((log, cursors))
}

/// Units per run of `job`, per pool.
fn units_per_run(job: &Job) -> BTreeMap<String, u64> {
    let regions = job.regions.len().max(1) as u64;
    let mut units = BTreeMap::new();
    for s in &job.steps {
        for c in &s.cost {
            *units.entry(c.pool.name.clone()).or_insert(0) +=
                c.units * u64::from(s.max_pages()) * regions;
        }
    }
    units
}

fn calls_per_run(job: &Job) -> u64 {
    let regions = job.regions.len().max(1) as u64;
    job.steps
        .iter()
        .map(|s| u64::from(s.max_pages()))
        .sum::<u64>()
        * regions
}

fn plan_credential(
    cred: &Credential,
    jobs: &[&Job],
    log: &CredentialLog,
    cursors: &BTreeMap<String, Cursor>,
) -> CredentialPlan {
    let usage = summarize(&cred.name, &cred.pools, log);
    // What remains now, per (pool, window index); the jobs spend it in turn.
    let mut remaining: BTreeMap<(String, usize), u64> = BTreeMap::new();
    for p in &usage.pools {
        for (i, w) in p.windows.iter().enumerate() {
            remaining.insert((p.pool.clone(), i), w.remaining);
        }
    }
    let blocked = usage.blocked_until;
    let mut job_plans = Vec::new();
    for job in jobs {
        let next_run = match blocked {
            Some(until) => NextRun::Blocked {
                until: rfc3339(until),
            },
            None => next_run(job, cursors.get(&job.name), &mut remaining),
        };
        job_plans.push(JobPlan {
            job: job.name.clone(),
            calls_per_run: calls_per_run(job),
            units_per_run: units_per_run(job),
            next_run,
            schedule: job
                .schedule
                .map(|every| schedule_plan(cred, job, every, jobs, log)),
        });
    }
    let pools = cred
        .pools
        .iter()
        .map(|pool| {
            let units_per_day = jobs
                .iter()
                .filter_map(|j| Some((j.schedule?, *units_per_run(j).get(&pool.name)?)))
                .map(|(every, u)| {
                    (u as f64 * DAY.as_secs_f64() / every.as_secs_f64()).ceil() as u64
                })
                .sum();
            let round = jobs
                .iter()
                .filter_map(|j| units_per_run(j).get(&pool.name).copied())
                .max()
                .unwrap_or(0);
            PoolPlan {
                pool: pool.name.clone(),
                units_per_day,
                pacing: pacing(pool, round),
            }
        })
        .collect();
    CredentialPlan {
        credential: cred.name.clone(),
        blocked_until: blocked.map(rfc3339),
        jobs: job_plans,
        pools,
    }
}

/// Walk the next run page by page from the job's cursor, spending from
/// `remaining`, until it ends or a page would not fit.
fn next_run(
    job: &Job,
    cursor: Option<&Cursor>,
    remaining: &mut BTreeMap<(String, usize), u64>,
) -> NextRun {
    let regions: Vec<&str> = if job.regions.is_empty() {
        vec![""]
    } else {
        job.regions.iter().map(String::as_str).collect()
    };
    let start = cursor
        .cloned()
        .unwrap_or_default()
        .start(&job.regions, job.steps.len());
    let n = regions.len();
    let mut calls = 0;
    for i in 0..n {
        let region = regions[(start.index + i) % n];
        let first_step = if i == 0 { start.step } else { 0 };
        for (s, step) in job.steps.iter().enumerate().skip(first_step) {
            let first_page = if i == 0 && s == start.step {
                start.page
            } else {
                0
            };
            for page in first_page..step.max_pages() {
                for c in &step.cost {
                    for (w, window) in c.pool.windows.iter().enumerate() {
                        let left = remaining
                            .get(&(c.pool.name.clone(), w))
                            .copied()
                            .unwrap_or(0);
                        if left < c.units {
                            return NextRun::Stops {
                                region: region.to_string(),
                                step: s,
                                page,
                                calls,
                                pool: c.pool.name.clone(),
                                per_seconds: window.per.as_secs(),
                            };
                        }
                    }
                }
                for c in &step.cost {
                    for w in 0..c.pool.windows.len() {
                        if let Some(left) = remaining.get_mut(&(c.pool.name.clone(), w)) {
                            *left -= c.units;
                        }
                    }
                }
                calls += 1;
            }
        }
    }
    NextRun::Fits { calls }
}

fn schedule_plan(
    cred: &Credential,
    job: &Job,
    every: Duration,
    jobs: &[&Job],
    log: &CredentialLog,
) -> SchedulePlan {
    let units = units_per_run(job);
    let scheduled: Vec<(&Job, Duration, BTreeMap<String, u64>)> = jobs
        .iter()
        .filter_map(|j| Some((*j, j.schedule?, units_per_run(j))))
        .collect();
    let mut windows = Vec::new();
    for pool in cred.pools.iter().filter(|p| units.contains_key(&p.name)) {
        for w in &pool.windows {
            let runs = runs_in(w.per, every);
            let needed: u64 = scheduled
                .iter()
                .map(|(_, e, u)| runs_in(w.per, *e) * u.get(&pool.name).copied().unwrap_or(0))
                .sum();
            let own = units[&pool.name];
            windows.push(WindowNeed {
                pool: pool.name.clone(),
                per_seconds: w.per.as_secs(),
                budget: w.budget(),
                runs_per_window: runs,
                runs_budget_holds: w.budget() / own.max(1),
                units_needed: needed,
                fits: needed <= w.budget(),
            });
        }
    }
    SchedulePlan {
        every_seconds: every.as_secs(),
        runs_per_day: DAY.as_secs_f64() / every.as_secs_f64(),
        units_per_day: units
            .iter()
            .map(|(p, u)| {
                (
                    p.clone(),
                    (*u as f64 * DAY.as_secs_f64() / every.as_secs_f64()).ceil() as u64,
                )
            })
            .collect(),
        windows,
        runs_out: runs_out(cred, job, &scheduled, log),
        fastest_every_seconds: fastest(cred, job, &scheduled),
    }
}

/// Runs every `every` that start inside any window of length `per`.
fn runs_in(per: Duration, every: Duration) -> u64 {
    per.as_micros().div_ceil(every.as_micros().max(1)) as u64
}

/// Simulate the next 24 hours of every scheduled job of the credential on
/// top of the current log (a run spends its worst case at its start); the
/// first run of `job` that would not fit, if any.
fn runs_out(
    cred: &Credential,
    job: &Job,
    scheduled: &[(&Job, Duration, BTreeMap<String, u64>)],
    log: &CredentialLog,
) -> Option<RunsOut> {
    let now = log.at;
    let end = now + HORIZON.as_micros() as Micros;
    let mut runs: Vec<(Micros, usize)> = Vec::new();
    for (k, (_, every, _)) in scheduled.iter().enumerate() {
        let step = every.as_micros().max(1) as Micros;
        let mut t = now;
        while t < end && runs.len() < 20_000 {
            runs.push((t, k));
            t += step;
        }
    }
    runs.sort();
    // Per pool: (time, units) spent, the log's and the simulated runs'.
    let mut spent: BTreeMap<&str, Vec<(Micros, u64)>> = BTreeMap::new();
    for (pool, entries) in cred.pools.iter().zip(&log.pools) {
        spent.insert(&pool.name, entries.iter().map(|e| (e.at, e.cost)).collect());
    }
    for (t, k) in runs {
        let (j, _, units) = &scheduled[k];
        let mut full = None;
        'check: for pool in cred.pools.iter().filter(|p| units.contains_key(&p.name)) {
            for w in &pool.windows {
                let from = t - w.per.as_micros() as Micros;
                let used: u64 = spent[pool.name.as_str()]
                    .iter()
                    .filter(|(at, _)| *at > from && *at <= t)
                    .map(|(_, c)| c)
                    .sum();
                if used + units[&pool.name] > w.budget() {
                    full = Some((pool.name.clone(), w.per));
                    break 'check;
                }
            }
        }
        match full {
            Some((pool, per)) if j.name == job.name => {
                return Some(RunsOut {
                    at: rfc3339(t),
                    pool,
                    per_seconds: per.as_secs(),
                });
            }
            Some(_) => {}
            None => {
                for (pool, u) in units {
                    if let Some(v) = spent.get_mut(pool.as_str()) {
                        v.push((t, *u));
                    }
                }
            }
        }
    }
    None
}

/// The shortest `every` for `job` that fits every window in steady state,
/// the other scheduled jobs as they are: in a window of length W a job run
/// every D starts ⌈W/D⌉ times, so with k runs allowed, D ≥ W/k.
fn fastest(
    cred: &Credential,
    job: &Job,
    scheduled: &[(&Job, Duration, BTreeMap<String, u64>)],
) -> Option<u64> {
    let units = units_per_run(job);
    let mut every = 1u64; // seconds
    for pool in cred.pools.iter().filter(|p| units.contains_key(&p.name)) {
        let own = units[&pool.name];
        for w in &pool.windows {
            let others: u64 = scheduled
                .iter()
                .filter(|(j, _, _)| j.name != job.name)
                .map(|(_, e, u)| runs_in(w.per, *e) * u.get(&pool.name).copied().unwrap_or(0))
                .sum();
            let k = w.budget().saturating_sub(others) / own.max(1);
            if k == 0 {
                return None;
            }
            every = every.max(w.per.as_secs().div_ceil(k));
        }
    }
    // Whole minutes read better, when the answer is a minute or more.
    Some(if every >= 60 {
        every.div_ceil(60) * 60
    } else {
        every
    })
}

/// Whether some window spreads the pool's longest-window budget: if the
/// shorter windows let the whole budget go in under half the longest
/// window, a burst can repeat every day: propose a window that allows one
/// round (the largest job's units per run) per equal slice of it.
fn pacing(pool: &crate::ledger::Pool, round: u64) -> Option<Pacing> {
    let longest = pool.windows.iter().max_by_key(|w| w.per)?;
    let budget = longest.budget();
    // The fastest the budget can go: each window allows budget_w per per_w.
    let spendable_in = pool
        .windows
        .iter()
        .filter(|w| w.per < longest.per)
        .map(|w| {
            let slices = budget.div_ceil(w.budget().max(1)).saturating_sub(1);
            w.per.as_secs() * slices
        })
        .max()
        .unwrap_or(0);
    if spendable_in * 2 >= longest.per.as_secs() || round == 0 {
        return None;
    }
    let rounds = budget / round;
    if rounds < 2 {
        return None;
    }
    let per = longest.per.as_secs().div_ceil(rounds).div_ceil(60) * 60;
    Some(Pacing {
        longest_seconds: longest.per.as_secs(),
        budget,
        spendable_in_seconds: spendable_in,
        propose_limit: round,
        propose_per_seconds: per,
    })
}

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
        out.push_str(&format!(
            "\n{}\n",
            p.bold(&format!("credential {}", c.credential))
        ));
        if let Some(until) = &c.blocked_until {
            out.push_str(&format!(
                "  {} until {}\n",
                p.red("BLOCKED by the upstream"),
                local_datetime(from_rfc3339(until))
            ));
        }
        for j in &c.jobs {
            let units: Vec<String> = j
                .units_per_run
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            out.push_str(&format!(
                "  job {}: per run at most {}, spending {}\n",
                p.bold(&j.job),
                count(j.calls_per_run, "call"),
                units.join(", ")
            ));
            let next = match &j.next_run {
                NextRun::Fits { calls } => p.green(&format!("fits what remains now ({})", count(*calls, "call"))),
                NextRun::Stops { region, step, page, calls, pool, per_seconds } => p.yellow(&format!(
                    "would stop at {}step {step} page {page} after {}: the {} window of pool {pool} is full",
                    if region.is_empty() { String::new() } else { format!("{region} ") },
                    count(*calls, "call"),
                    secs(*per_seconds)
                )),
                NextRun::Blocked { until } => p.red(&format!("sends nothing: blocked until {}", local_datetime(from_rfc3339(until)))),
            };
            out.push_str(&format!("    next run: {next}\n"));
            let Some(s) = &j.schedule else {
                out.push_str(
                    "    no schedule: add `schedule: every DURATION` to plan a day of runs\n",
                );
                continue;
            };
            let per_day: Vec<String> = s
                .units_per_day
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            out.push_str(&format!(
                "    schedule every {}: {:.1} runs a day, {} a day\n",
                secs(s.every_seconds),
                s.runs_per_day,
                per_day.join(", ")
            ));
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
        }
        for pool in &c.pools {
            if let Some(pc) = &pool.pacing {
                out.push_str(&format!(
                    "  pool {}: nothing spreads its {}-unit {} budget: its windows let it all go in {}, so a burst repeats every {}.\n    To spread it, add a pacing window: {{ limit: {}, per: {} }} (one round per 1/{} of the {}).\n",
                    pool.pool,
                    pc.budget,
                    secs(pc.longest_seconds),
                    if pc.spendable_in_seconds == 0 { "one burst".into() } else { secs(pc.spendable_in_seconds) },
                    secs(pc.longest_seconds),
                    pc.propose_limit,
                    secs(pc.propose_per_seconds),
                    pc.budget / pc.propose_limit,
                    secs(pc.longest_seconds),
                ));
            }
        }
    }
    out
}
