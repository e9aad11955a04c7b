//! The runner: one run of a job, from lock to summary line.
//!
//! Data flows one way, page after page: plan the next request from the
//! cursor → charge its cost in the ledger → call the upstream → write the
//! page atomically → save the cursor. A rejection, an upstream quota error,
//! a busy lock or a stop signal ends the run cleanly (exit 75), with the
//! cursor saved so the next timer tick resumes exactly there.

pub mod cursor;
pub mod output;
mod report;
pub mod upstream;

pub use self::report::{JobReport, Stop, log_error, log_summary};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tracing::{debug, error, info, warn};

use self::cursor::Cursor;
use self::output::PageName;
use self::upstream::Answer;
use crate::config::{Config, Credential, Fill, Job, Step, StorePolicy, redact};
use crate::ledger::{At, Charge, ChargeDecision, Ledger, LockOutcome, Micros, Store, StoreError};
use crate::timefmt::{fmt_duration, local_datetime};
use crate::{Error, Result};

/// How long a finished run waits to release its lock.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(3);

/// Set once a stop signal (SIGTERM, SIGINT) arrives; the runner stops at
/// the next safe point, abandoning a request in flight.
#[derive(Clone, Default)]
pub struct Shutdown {
    flag: Arc<AtomicBool>,
    notify: Arc<Notify>,
}

impl Shutdown {
    pub fn trigger(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Resolves once a stop was asked for.
    pub async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }
}

/// What every run of this process shares.
pub struct RunContext<'a> {
    pub config: &'a Config,
    /// `Err` holds why the store could not be opened.
    pub store: std::result::Result<&'a Store, String>,
    pub client: &'a reqwest::Client,
    pub shutdown: &'a Shutdown,
    /// Draw a progress line (stderr is a terminal).
    pub progress: bool,
    /// The store as logs name it (the key of the history).
    pub store_id: String,
    /// What this host has seen of each credential's log.
    pub history: &'a std::sync::Mutex<crate::history::History>,
}

/// Run `job` once: take its lock, serve its regions from the cursor on,
/// release the lock. Errors are what ends a run with 1, 69 or 78.
pub async fn run_job(ctx: &RunContext<'_>, job: &Job) -> Result<JobReport> {
    let cred = ctx.config.credential(job);
    let mut run = Run {
        ctx,
        job,
        cred,
        report: JobReport {
            job: job.name.clone(),
            stop: None,
            calls: 0,
            unmetered: 0,
            units: job
                .steps
                .iter()
                .flat_map(|s| s.cost.iter().map(|c| (c.pool.name.clone(), 0)))
                .collect(),
            regions_done: 0,
            regions_total: job.regions.len().max(1),
            pages: 0,
            resume: None,
        },
        store: None,
        last_serial: None,
        history_checked: false,
        warned_unmetered: false,
        lock_lost: Arc::new(AtomicBool::new(false)),
    };
    let holder = format!(
        "{} pid {} since {}",
        hostname(),
        std::process::id(),
        chrono::Local::now().format("%Y-%m-%d %H:%M:%S %Z")
    );

    // The lock first: nothing else happens in a run that does not hold it.
    match &ctx.store {
        Ok(store) => match store
            .take_lock(&job.name, &holder, ctx.config.lock_ttl)
            .await
        {
            Ok(LockOutcome::Held) => run.store = Some(*store),
            Ok(LockOutcome::Busy { holder, expires_in }) => {
                run.report.stop = Some(Stop::LockBusy { holder, expires_in });
                return Ok(run.report);
            }
            Err(StoreError::Unavailable(e)) => run.store_unreachable_at_start(&e)?,
            Err(e) => return Err(e.into()),
        },
        Err(e) => run.store_unreachable_at_start(e)?,
    }

    let renewal = run.store.map(|store| {
        let (store, job, holder, ttl, lost) = (
            store.clone(),
            job.name.clone(),
            holder.clone(),
            ctx.config.lock_ttl,
            run.lock_lost.clone(),
        );
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                match store.renew_lock(&job, &holder, ttl).await {
                    Ok(true) => debug!(job, "run lock renewed"),
                    Ok(false) => {
                        lost.store(true, Ordering::SeqCst);
                        return;
                    }
                    Err(e) => warn!(job, "cannot renew the run lock: {e}"),
                }
            }
        })
    });

    let result = run.serve().await;
    run.clear_progress();
    run.check_history();

    if let Some(task) = renewal {
        task.abort();
    }
    if let Some(store) = run.store {
        // Best effort, and brief: a lock that is not released expires by itself.
        match tokio::time::timeout(RELEASE_TIMEOUT, store.release_lock(&job.name, &holder)).await {
            Ok(Ok(_)) => debug!(job = job.name, "run lock released"),
            Ok(Err(e)) => warn!(
                job = job.name,
                "cannot release the run lock (it expires by itself): {e}"
            ),
            Err(_) => warn!(
                job = job.name,
                "releasing the run lock timed out (it expires by itself)"
            ),
        }
    }
    result.map(|()| run.report)
}

/// The state of one run in progress.
struct Run<'a> {
    ctx: &'a RunContext<'a>,
    job: &'a Job,
    cred: &'a Credential,
    report: JobReport,
    /// `None` when the run goes unmetered (store unreachable, every endpoint fail_open).
    store: Option<&'a Store>,
    /// The credential's charge serial and time of the latest decision.
    last_serial: Option<(u64, Micros)>,
    /// Whether this run compared the serial with the history yet.
    history_checked: bool,
    warned_unmetered: bool,
    lock_lost: Arc<AtomicBool>,
}

/// What the charge before a request said.
enum Charged {
    Go { at: Option<Micros> },
    Stop(Stop),
}

impl Run<'_> {
    /// Compare the credential's charge serial, from the latest decision,
    /// with what this host saw before: a store that forgot the log is
    /// reported loudly at the run's first decision (before its request goes
    /// out); later calls only keep the history up to date.
    fn check_history(&mut self) {
        let Some((serial, now)) = self.last_serial else {
            return;
        };
        let keep = self.cred.longest_window().as_micros() as Micros;
        let mut history = self.ctx.history.lock().unwrap_or_else(|p| p.into_inner());
        let lost = history.check(&self.ctx.store_id, &self.cred.name, serial, now, keep);
        history.save();
        let first = !std::mem::replace(&mut self.history_checked, true);
        if let (Some(l), true) = (lost, first) {
            error!(
                job = self.job.name,
                "LOG LOST: the store has forgotten credential {}'s log: it had recorded {} charges, it reported {} on {}. \
                 Its windows may admit the budget a second time until {}. A Redis without persistence that restarted does this: turn on appendonly.",
                self.cred.name,
                l.had,
                l.found,
                local_datetime(l.noticed_at),
                local_datetime(l.noticed_at + keep)
            );
        }
    }

    fn store_unreachable_at_start(&mut self, why: &str) -> Result<()> {
        let closed: Vec<&str> = self
            .job
            .steps
            .iter()
            .filter(|s| s.on_store_error == StorePolicy::FailClosed)
            .map(|s| s.endpoint.as_str())
            .collect();
        if let Some(endpoint) = closed.first() {
            return Err(Error::StoreUnavailable(format!(
                "job {}: the store {} is unreachable ({why}); endpoint {endpoint} is fail_closed, so no request was sent",
                self.job.name, self.ctx.store_id
            )));
        }
        warn!(
            job = self.job.name,
            "UNMETERED RUN: the store {} is unreachable ({why}); every endpoint of this job is fail_open, so it runs without charges, without its lock and from its first region",
            self.ctx.store_id
        );
        self.warned_unmetered = true;
        Ok(())
    }

    async fn serve(&mut self) -> Result<()> {
        let job = self.job;
        let cursor = match self.store {
            Some(store) => match store.load_cursor(&job.name).await {
                Ok(text) => text.as_deref().and_then(Cursor::decode).unwrap_or_default(),
                Err(StoreError::Unavailable(e)) => {
                    self.store_unreachable_at_start(&e)?;
                    self.store = None;
                    Cursor::default()
                }
                Err(e) => return Err(e.into()),
            },
            None => Cursor::default(),
        };
        let run_number = cursor.run + 1;
        let removed = output::prepare(&job.output, &job.name).map_err(|e| {
            Error::Other(format!(
                "cannot prepare the output folder {}: {e}",
                job.output.display()
            ))
        })?;
        if removed > 0 {
            info!(
                job = job.name,
                "removed {removed} temporary file(s) a killed run left"
            );
        }

        let regions: Vec<&str> = if job.regions.is_empty() {
            vec![""]
        } else {
            job.regions.iter().map(String::as_str).collect()
        };
        let n = regions.len();
        let start = cursor.start(&job.regions, job.steps.len());
        info!(
            job = job.name,
            "run {run_number} starts at {}",
            describe_position(regions[start.index], start.step, start.page)
        );
        self.report.resume = Some(Cursor {
            run: cursor.run,
            region: regions[start.index].to_string(),
            step: start.step,
            page: start.page,
            token: start.token.clone(),
        });

        for i in 0..n {
            let index = (start.index + i) % n;
            let region = regions[index];
            let first = i == 0;
            let first_step = if first { start.step } else { 0 };
            for (s, step) in job.steps.iter().enumerate().skip(first_step) {
                let (mut page, mut token) = if first && s == start.step {
                    (start.page, start.token.clone())
                } else {
                    (0, None)
                };
                loop {
                    let fill = Fill {
                        region,
                        secret: &self.cred.secret,
                        job: &job.name,
                        step: s,
                    };
                    let Some(json) = self
                        .fetch_page(step, &fill, token.as_deref(), region, s, page, run_number)
                        .await?
                    else {
                        return Ok(()); // stopped; the cursor already points at this page
                    };
                    let next = step
                        .paginate
                        .as_ref()
                        .filter(|p| page + 1 < p.max_pages)
                        .and_then(|p| upstream::next_token(&json, &p.token));
                    // Where the next run starts if this one stops now.
                    let resume = match next {
                        Some(t) => Cursor {
                            run: run_number,
                            region: region.to_string(),
                            step: s,
                            page: page + 1,
                            token: Some(t),
                        },
                        None if s + 1 < job.steps.len() => Cursor {
                            run: run_number,
                            region: region.to_string(),
                            step: s + 1,
                            page: 0,
                            token: None,
                        },
                        None => Cursor {
                            run: run_number,
                            region: regions[(index + 1) % n].to_string(),
                            step: 0,
                            page: 0,
                            token: None,
                        },
                    };
                    self.save_cursor(&resume).await;
                    match &resume.token {
                        Some(t) if resume.step == s && resume.region == region => {
                            page += 1;
                            token = Some(t.clone());
                        }
                        _ => break,
                    }
                }
            }
            self.report.regions_done += 1;
        }
        Ok(())
    }

    async fn save_cursor(&mut self, cursor: &Cursor) {
        self.report.resume = Some(cursor.clone());
        if let Some(store) = self.store
            && let Err(e) = store.save_cursor(&self.job.name, &cursor.encode()).await
        {
            warn!(
                job = self.job.name,
                "cannot save the cursor (the next run may redo this page): {e}"
            );
        }
    }

    /// On a terminal, one line that says how far the run is (none under
    /// cron or systemd, where stderr is a file or the journal).
    fn progress(&self) {
        if !self.ctx.progress {
            return;
        }
        let r = &self.report;
        let units: Vec<String> = r.units.iter().map(|(p, u)| format!("{p} {u}")).collect();
        eprint!(
            "\r\x1b[2K{}: regions {}/{}, {} calls, spent {}",
            r.job,
            r.regions_done,
            r.regions_total,
            r.calls,
            units.join(", ")
        );
    }

    fn clear_progress(&self) {
        if self.ctx.progress && self.report.pages > 0 {
            eprint!("\r\x1b[2K");
        }
    }

    fn stop(&mut self, stop: Stop) {
        self.report.stop = Some(stop);
    }

    /// Charge, call (retrying transient failures, each attempt charged) and
    /// write one page. `None` when the run stopped cleanly instead.
    #[allow(clippy::too_many_arguments)]
    async fn fetch_page(
        &mut self,
        step: &Step,
        fill: &Fill<'_>,
        token: Option<&str>,
        region: &str,
        s: usize,
        page: u32,
        run_number: u64,
    ) -> Result<Option<serde_json::Value>> {
        let http = &self.ctx.config.http;
        let url = upstream::url(step, fill, token)?;
        let shown = redact(url.as_str(), &[fill.secret]);
        let mut attempt = 0;
        let body = loop {
            if self.ctx.shutdown.is_set() {
                self.stop(Stop::Signal);
                return Ok(None);
            }
            if self.lock_lost.load(Ordering::SeqCst) {
                self.stop(Stop::LockLost);
                return Ok(None);
            }
            let at = match self.charge(step).await? {
                Charged::Go { at } => at,
                Charged::Stop(stop) => {
                    self.stop(stop);
                    return Ok(None);
                }
            };
            debug!(job = self.job.name, attempt, "GET {shown}");
            self.report.calls += 1;
            let answer = tokio::select! {
                a = upstream::send(self.ctx.client, step, fill, url.clone()) => a,
                () = self.ctx.shutdown.wait() => {
                    info!(job = self.job.name, "stop signal: abandoning the request in flight");
                    self.stop(Stop::Signal);
                    return Ok(None);
                }
            };
            match answer {
                Answer::Page { body, json } => break (body, json),
                Answer::QuotaExhausted {
                    status,
                    reason,
                    retry_after,
                } => {
                    let until = self.block_until(at, retry_after);
                    warn!(
                        job = self.job.name,
                        "upstream answered {status} ({reason}): its own quota is spent; blocking credential {} until {}",
                        self.cred.name,
                        local_datetime(until)
                    );
                    if let Some(store) = self.store {
                        let why = format!("upstream {status} {reason} (job {})", self.job.name);
                        if let Err(e) = store
                            .block(&self.cred.name, until, &why, At::StoreClock)
                            .await
                        {
                            warn!(
                                job = self.job.name,
                                "cannot mark the credential blocked: {e}"
                            );
                        }
                    }
                    self.stop(Stop::UpstreamExhausted { reason, until });
                    return Ok(None);
                }
                Answer::Transient(why) if attempt < http.retries => {
                    let cap = http
                        .backoff
                        .saturating_mul(1 << attempt.min(16))
                        .min(Duration::from_secs(60));
                    // Full jitter: anywhere up to the cap, so hosts do not retry in step.
                    let wait = cap.mul_f64(rand::random_range(0.0..=1.0));
                    attempt += 1;
                    warn!(
                        job = self.job.name,
                        "{shown}: {why}; retry {attempt} of {} in {}",
                        http.retries,
                        fmt_duration(wait)
                    );
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = self.ctx.shutdown.wait() => {}
                    }
                }
                Answer::Transient(why) => {
                    return Err(Error::Other(format!(
                        "job {}: {shown}: {why}, after {} attempts",
                        self.job.name,
                        attempt + 1
                    )));
                }
                Answer::Refused { status, excerpt } => {
                    return Err(Error::Other(format!(
                        "job {}: {shown}: the upstream refused the request with HTTP {status}: {excerpt}",
                        self.job.name
                    )));
                }
            }
        };
        let name = PageName {
            job: &self.job.name,
            run: run_number,
            region,
            step: s,
            page,
        }
        .file_name();
        let path = output::write_atomically(&self.job.output, &name, &body.0).map_err(|e| {
            Error::Other(format!(
                "cannot write {}: {e}",
                self.job.output.join(&name).display()
            ))
        })?;
        self.report.pages += 1;
        self.progress();
        debug!(job = self.job.name, "wrote {}", path.display());
        Ok(Some(body.1))
    }

    /// Charge one attempt of `step` before it is sent.
    async fn charge(&mut self, step: &Step) -> Result<Charged> {
        let Some(store) = self.store else {
            self.count_unmetered(step, "the store was unreachable when the run started");
            return Ok(Charged::Go { at: None });
        };
        // No id of our own: every charge is new, and the Redis store gives
        // each one an id for its own resends (an id given here would only be
        // remembered, and in SQLite written, for nothing).
        let charge = Charge {
            credential: &self.cred.name,
            cost: &step.cost,
            endpoint: &step.endpoint,
            job: &self.job.name,
            id: None,
        };
        let decision = store.charge(&charge, At::StoreClock).await;
        if let Ok(d) = &decision {
            self.last_serial = Some((d.serial(), d.at()));
            if !self.history_checked {
                self.check_history();
            }
        }
        match decision {
            Ok(ChargeDecision::Allowed { at, .. }) => {
                for c in &step.cost {
                    *self.report.units.entry(c.pool.name.clone()).or_default() += c.units;
                }
                Ok(Charged::Go { at: Some(at) })
            }
            Ok(ChargeDecision::Rejected {
                pool,
                per,
                retry_after,
                ..
            }) => Ok(Charged::Stop(Stop::QuotaSaidNo {
                pool,
                per,
                retry_after,
            })),
            Ok(ChargeDecision::Blocked { until, reason, .. }) => {
                Ok(Charged::Stop(Stop::Blocked { until, reason }))
            }
            Err(StoreError::Unavailable(e)) => match step.on_store_error {
                StorePolicy::FailClosed => Err(Error::StoreUnavailable(format!(
                    "job {}: the store {} is unreachable ({e}); endpoint {} is fail_closed, so the request was not sent",
                    self.job.name, self.ctx.store_id, step.endpoint
                ))),
                StorePolicy::FailOpen => {
                    self.count_unmetered(step, &e);
                    Ok(Charged::Go { at: None })
                }
            },
            Err(StoreError::CostExceedsBudget {
                pool,
                units,
                budget,
            }) => Err(Error::Config {
                file: self.ctx.config.file.clone(),
                field: format!("endpoints.{}.cost.{pool}", step.endpoint),
                message: format!("{units} units can never fit a budget of {budget}"),
            }),
            Err(e) => Err(e.into()),
        }
    }

    fn count_unmetered(&mut self, step: &Step, why: &str) {
        self.report.unmetered += 1;
        if !self.warned_unmetered {
            warn!(
                job = self.job.name,
                "UNMETERED: {why}; endpoint {} is fail_open, so requests go out without a charge",
                step.endpoint
            );
            self.warned_unmetered = true;
        }
    }

    /// When the upstream's quota is back: its reset time, else what it said,
    /// else the end of the credential's longest window.
    fn block_until(&self, charged_at: Option<Micros>, retry_after: Option<Duration>) -> Micros {
        let now = charged_at.unwrap_or_else(|| chrono::Utc::now().timestamp_micros());
        if let Some(reset) = &self.cred.upstream_reset {
            return reset.next_after(chrono::Utc::now()).timestamp_micros();
        }
        let wait = retry_after.unwrap_or_else(|| self.cred.longest_window());
        now + wait.as_micros() as Micros
    }
}

fn describe_position(region: &str, step: usize, page: u32) -> String {
    if region.is_empty() {
        format!("step {step} page {page}")
    } else {
        format!("region {region} step {step} page {page}")
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".into())
}
