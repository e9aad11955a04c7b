//! `quota status`: what is left, per credential, pool and window, read from
//! the store without spending; who spent it, when it frees up, a chart of
//! usage over each window, and where each job resumes. `--json` gives the
//! same in a stable shape (documented in the README), `--format
//! openmetrics` as metrics ([`openmetrics`]).

mod openmetrics;

use std::collections::BTreeMap;

use serde::Serialize;

use super::table::{Paint, Table, emit, sparkline};
use crate::cli::{StatusArgs, StatusFormat};
use crate::config::{Config, Credential};
use crate::history::{History, LostLog};
use crate::ledger::{
    At, CredentialLog, CredentialUsage, Ledger, Micros, Store, StoreError, StoreLocation,
    USAGE_BUCKETS, summarize,
};
use crate::runner::cursor::Cursor;
use crate::timefmt::{fmt_window, local_datetime, rfc3339, when};
use crate::{Error, Result};

/// One credential's report: its usage and its jobs' cursors.
pub struct CredentialReport {
    pub usage: CredentialUsage,
    /// The store forgot this credential's log (noticed from this host's history).
    pub lost: Option<LostLog>,
    /// What the operator can do about it, for this kind of store.
    pub lost_advice: &'static str,
    /// (job, its saved cursor, if any)
    pub jobs: Vec<(String, Option<Cursor>)>,
}

pub async fn execute(config: &Config, location: &StoreLocation, args: &StatusArgs) -> Result<u8> {
    let credentials = select(config, args.credential.as_deref())?;
    let at = At::StoreClock;
    // The file an embedded store is in, so that the report names it.
    let resolved = location
        .resolved()
        .map_err(|e| Error::store(super::store_name(location), e))?;
    let store_desc = super::store_name(&resolved);
    // Read only: an embedded store that does not exist yet is not created.
    let store = Store::open_existing(&resolved).await.map_err(|e| match e {
        StoreError::Unavailable(reason) => Error::StoreUnavailable {
            store: store_desc.clone(),
            reason,
            fail_closed: None,
        },
        other => Error::store(store_desc.clone(), other),
    })?;
    let reports = match &store {
        Some(store) => {
            read(
                config,
                store,
                &store.identity(&super::store_name(location)),
                &credentials,
                at,
            )
            .await?
        }
        None => nothing_charged(config, &credentials),
    };
    let header = StoreHeader {
        store: store_desc,
        exists: store.is_some(),
    };
    match args.format() {
        StatusFormat::Json => {
            let json = serde_json::to_string_pretty(&to_json(&header, &reports))
                .expect("a report serializes");
            emit(&(json + "\n"))
        }
        StatusFormat::Openmetrics => emit(&openmetrics::render(&reports)),
        StatusFormat::Text => {
            let paint = Paint {
                on: super::colour_on_stdout(),
            };
            emit(&render(&header, &reports, paint))
        }
    }
}

/// The store a report was read from.
pub struct StoreHeader {
    /// As messages name it: a Redis URL (password masked) or `embedded PATH`.
    pub store: String,
    /// False for an embedded store whose file does not exist yet.
    pub exists: bool,
}

/// The reports of a store that does not exist yet: nothing charged,
/// nothing blocked, no job has run.
fn nothing_charged(config: &Config, credentials: &[&Credential]) -> Vec<CredentialReport> {
    let now = chrono::Utc::now().timestamp_micros();
    credentials
        .iter()
        .map(|c| {
            let empty = CredentialLog {
                at: now,
                serial: 0,
                blocked_until: 0,
                blocked_reason: String::new(),
                retain: 0,
                tags: Vec::new(),
                pools: vec![Vec::new(); c.pools.len()],
                lost: vec![0; c.pools.len()],
                others: vec![Default::default(); c.pools.len()],
                observed: vec![(0, 0); c.pools.len()],
                reserved: vec![Vec::new(); c.pools.len()],
            };
            CredentialReport {
                usage: summarize(&c.name, &c.pools, &empty),
                lost: None,
                lost_advice: "",
                jobs: config
                    .jobs
                    .iter()
                    .filter(|j| config.credential(j).name == c.name)
                    .map(|j| (j.name.clone(), None))
                    .collect(),
            }
        })
        .collect()
}

fn select<'a>(config: &'a Config, name: Option<&str>) -> Result<Vec<&'a Credential>> {
    match name {
        None => Ok(config.credentials.iter().collect()),
        Some(n) => match config.credentials.iter().find(|c| c.name == n) {
            Some(c) => Ok(vec![c]),
            None => Err(Error::Usage(format!(
                "no credential named '{n}' in {} (credentials: {})",
                config.file.display(),
                config
                    .credentials
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        },
    }
}

/// Read every credential's usage and its jobs' cursors.
pub async fn read(
    config: &Config,
    store: &Store,
    store_id: &str,
    credentials: &[&Credential],
    at: At,
) -> Result<Vec<CredentialReport>> {
    let mut history = History::open(); // (read, compared, never saved)
    let mut reports = Vec::new();
    for c in credentials {
        let usage = store.usage(&c.name, &c.pools, at).await?;
        let keep = c.longest_window().as_micros() as Micros;
        let lost = history.check(store_id, &c.name, usage.charges_recorded, usage.at, keep);
        let mut jobs = Vec::new();
        for job in config
            .jobs
            .iter()
            .filter(|j| config.credential(j).name == c.name)
        {
            let cursor = store.load_cursor(&job.name).await?;
            jobs.push((job.name.clone(), cursor.as_deref().and_then(Cursor::decode)));
        }
        reports.push(CredentialReport {
            usage,
            lost,
            lost_advice: store.lost_log_advice(),
            jobs,
        });
    }
    // Not saved: only a run, whose charges tell the store what this host
    // has seen, may lower the serial it remembers. Saved here, a loss that
    // status noticed first would never reach the store, and the next run
    // would hand the forgotten budget out again.
    Ok(reports)
}

/// The report as text.
pub fn render(header: &StoreHeader, reports: &[CredentialReport], p: Paint) -> String {
    let mut out = if header.exists {
        format!("store: {}\n\n", header.store)
    } else {
        format!(
            "store: {} {}\n\n",
            header.store,
            p.yellow(
                "does not exist yet: no run has charged anything through it (the first `quota run` creates it; status created nothing)"
            )
        )
    };
    for (i, r) in reports.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let u = &r.usage;
        let now = u.at;
        out.push_str(&format!(
            "{}  ·  {}  ·  {} charges recorded\n",
            p.bold(&u.credential),
            local_datetime(now),
            u.charges_recorded
        ));
        if let Some(l) = r.lost {
            out.push_str(&format!(
                "  {}: the store had recorded {} charges and reported {} on {}: the next run tells the store, which then counts its pools as spent until at most {}\n    {}.\n",
                p.red("LOG LOST"),
                l.had,
                l.found,
                local_datetime(l.noticed_at),
                local_datetime(l.noticed_at + u.pools.iter().flat_map(|p| &p.windows).map(|w| w.window.per.as_micros() as Micros).max().unwrap_or(0)),
                r.lost_advice
            ));
        }
        for pool in &u.pools {
            if let Some(l) = pool.log_lost {
                out.push_str(&format!(
                    "  {}: the store lost the log of pool {} at {}: the pool counts as spent until {} ({})\n",
                    p.red("LOG LOST"),
                    pool.pool,
                    local_datetime(l.since),
                    local_datetime(l.until),
                    when(l.until, now)
                ));
            }
            if let Some(at) = pool.observed_at {
                out.push_str(&format!(
                    "  {}: {} calls of pool {} did not fit and were recorded all the same, the latest at {}\n",
                    p.yellow("OBSERVED"),
                    pool.observed_rejections,
                    pool.pool,
                    local_datetime(at)
                ));
            }
        }
        if let Some(until) = u.blocked_until {
            let reason = u.blocked_reason.as_deref().unwrap_or("");
            out.push_str(&format!(
                "  {} until {} ({}): {reason}\n",
                p.red("BLOCKED by the upstream"),
                local_datetime(until),
                when(until, now)
            ));
        }
        out.push('\n');
        let mut t = Table::default();
        t.row(
            [
                "pool",
                "window",
                "limit",
                "headroom",
                "budget",
                "used",
                "remaining",
                "next units free",
                "fully free",
            ]
            .map(String::from)
            .to_vec(),
        );
        for pool in &u.pools {
            for w in &pool.windows {
                t.row(vec![
                    pool.pool.clone(),
                    fmt_window(w.window.per),
                    w.window.limit.to_string(),
                    w.window.headroom.to_string(),
                    w.budget.to_string(),
                    // (units the upstream counted that others spent; units
                    // at their estimate until settled)
                    match w.others_until {
                        Some(t) if w.others > 0 => {
                            format!("{} + {} by others until {}", w.used, w.others, when(t, now))
                        }
                        _ => w.used.to_string(),
                    } + &match w.reserved {
                        0 => String::new(),
                        r => format!(" ({r} reserved)"),
                    },
                    w.remaining.to_string(),
                    w.next_free_at.map_or("-".into(), |t| when(t, now)),
                    w.fully_free_at.map_or("-".into(), |t| when(t, now)),
                ]);
            }
        }
        // Colour the remaining column by how much is left, after alignment.
        let windows: Vec<&crate::ledger::WindowUsage> =
            u.pools.iter().flat_map(|p| &p.windows).collect();
        for (k, line) in t.render("  ").lines().enumerate() {
            match k.checked_sub(1).and_then(|i| windows.get(i)) {
                Some(w) if p.on => {
                    let r = w.remaining.to_string();
                    let painted = if w.remaining == 0 {
                        p.red(&r)
                    } else if w.remaining * 10 < w.budget {
                        p.yellow(&r)
                    } else {
                        p.green(&r)
                    };
                    out.push_str(&replace_column(line, &r, &painted, 6));
                }
                _ => out.push_str(line),
            }
            out.push('\n');
        }

        out.push_str(&format!(
            "\n  usage over each window, oldest → now ({USAGE_BUCKETS} buckets):\n"
        ));
        let mut t = Table::default();
        for pool in &u.pools {
            for w in &pool.windows {
                let bucket = w.window.per / USAGE_BUCKETS as u32;
                let peak = w.buckets.iter().copied().max().unwrap_or(0);
                t.row(vec![
                    pool.pool.clone(),
                    fmt_window(w.window.per),
                    format!("│{}│", sparkline(&w.buckets)),
                    format!("peak {peak} per {}", fmt_window(bucket)),
                ]);
            }
        }
        out.push_str(&t.render("  "));

        let spent = |pick: fn(&crate::ledger::WindowUsage) -> &BTreeMap<String, u64>| -> String {
            let parts: Vec<String> = u
                .pools
                .iter()
                .filter_map(|pool| {
                    let w = pool.windows.iter().max_by_key(|w| w.window.per)?;
                    let who: Vec<String> =
                        pick(w).iter().map(|(k, v)| format!("{k} {v}")).collect();
                    (!who.is_empty()).then(|| {
                        format!(
                            "{} {}: {}",
                            pool.pool,
                            fmt_window(w.window.per),
                            who.join(", ")
                        )
                    })
                })
                .collect();
            if parts.is_empty() {
                "nothing".into()
            } else {
                parts.join(" · ")
            }
        };
        out.push_str(&format!(
            "\n  spent by endpoint:  {}\n",
            spent(|w| &w.by_endpoint)
        ));
        out.push_str(&format!("  spent by job:       {}\n", spent(|w| &w.by_job)));
        for (job, cursor) in &r.jobs {
            let at = match cursor {
                None => "has not run yet".to_string(),
                Some(c) if c.region.is_empty() => {
                    format!(
                        "resumes at step {} page {} (after run {})",
                        c.step, c.page, c.run
                    )
                }
                Some(c) => format!(
                    "resumes at {} step {} page {} (after run {})",
                    c.region, c.step, c.page, c.run
                ),
            };
            out.push_str(&format!("  job {job} {at}\n"));
        }
    }
    out
}

/// Replace the `col`-th whitespace-separated field equal to `plain` in an
/// aligned line with its painted form, keeping the alignment.
fn replace_column(line: &str, plain: &str, painted: &str, col: usize) -> String {
    let mut seen = 0;
    let mut start = None;
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b' ' && (i == 0 || bytes[i - 1] == b' ') {
            if seen == col {
                start = Some(i);
                break;
            }
            seen += 1;
        }
        i += 1;
    }
    match start {
        Some(s) if line[s..].starts_with(plain) => {
            format!("{}{}{}", &line[..s], painted, &line[s + plain.len()..])
        }
        _ => line.to_string(),
    }
}

// ---------------------------------------------------------------------------
// JSON: a stable shape for dashboards and scripts.

#[derive(Serialize)]
pub struct StatusJson {
    pub at: String,
    /// The store read: a Redis URL (password masked) or `embedded PATH`.
    pub store: String,
    /// False for an embedded store whose file does not exist yet (nothing
    /// was charged through it; status does not create it).
    pub store_exists: bool,
    pub credentials: Vec<CredentialJson>,
}

#[derive(Serialize)]
pub struct CredentialJson {
    pub credential: String,
    pub charges_recorded: u64,
    pub blocked_until: Option<String>,
    pub blocked_reason: Option<String>,
    /// Set when the store forgot this credential's log (see the README).
    pub log_lost: Option<LostLog>,
    pub pools: Vec<PoolJson>,
    pub jobs: Vec<JobJson>,
}

#[derive(Serialize)]
pub struct PoolJson {
    pub pool: String,
    pub windows: Vec<WindowJson>,
    /// Set while the pool counts as spent because the store lost its log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_lost: Option<LogLostJson>,
    /// Observe mode: calls recorded though they did not fit (always 0 in
    /// enforce mode), and when the latest was.
    pub observed_rejections: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<String>,
}

/// When a pool's log was lost, and until when it counts as spent.
#[derive(Serialize)]
pub struct LogLostJson {
    pub since: String,
    pub until: String,
}

#[derive(Serialize)]
pub struct WindowJson {
    pub per_seconds: u64,
    pub limit: u64,
    pub headroom: u64,
    pub budget: u64,
    pub used: u64,
    /// Units of `used` charged as estimates whose settle has not come yet.
    pub reserved: u64,
    /// Units others spent, per the upstream's own count, until when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub others: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub others_until: Option<String>,
    pub remaining: u64,
    pub next_free_at: Option<String>,
    pub fully_free_at: Option<String>,
    pub by_endpoint: BTreeMap<String, u64>,
    pub by_job: BTreeMap<String, u64>,
    pub bucket_seconds: f64,
    pub buckets: Vec<u64>,
    /// The window in the IETF RateLimit header fields' terms.
    pub ratelimit: RateLimitJson,
}

/// `RateLimit-Policy: "NAME";q=Q;w=W` and `RateLimit: "NAME";r=R;t=T`.
#[derive(Serialize)]
pub struct RateLimitJson {
    pub policy: String,
    pub q: u64,
    pub w: u64,
    pub r: u64,
    /// Seconds until units next free up (0: nothing is spent).
    pub t: u64,
    pub policy_header: String,
    pub header: String,
}

#[derive(Serialize)]
pub struct JobJson {
    pub job: String,
    /// Where its next run starts; `null` if it never ran.
    pub cursor: Option<Cursor>,
}

/// Each window's RateLimit policy name, unique within the credential and
/// the same from one call to the next: `POOL-PER` (`units-24h`); when
/// windows share that, `POOL-PER-LIMIT` (`units-1h-30`); when they share
/// that too, the window's place in its pool (`units-1h-30-2`, from 1).
fn policy_names(u: &CredentialUsage) -> BTreeMap<(&str, usize), String> {
    let windows: Vec<(&str, usize, &crate::ledger::WindowUsage)> = u
        .pools
        .iter()
        .flat_map(|p| {
            p.windows
                .iter()
                .enumerate()
                .map(move |(i, w)| (p.pool.as_str(), i, w))
        })
        .collect();
    let base =
        |pool: &str, w: &crate::ledger::WindowUsage| format!("{pool}-{}", fmt_window(w.window.per));
    let count = |names: &[String], n: &String| names.iter().filter(|m| *m == n).count();
    let first: Vec<String> = windows.iter().map(|(p, _, w)| base(p, w)).collect();
    let second: Vec<String> = windows
        .iter()
        .zip(&first)
        .map(|((_, _, w), n)| {
            if count(&first, n) > 1 {
                format!("{n}-{}", w.window.limit)
            } else {
                n.clone()
            }
        })
        .collect();
    windows
        .iter()
        .zip(&second)
        .map(|((p, i, _), n)| {
            let name = if count(&second, n) > 1 {
                format!("{n}-{}", i + 1)
            } else {
                n.clone()
            };
            ((*p, *i), name)
        })
        .collect()
}

pub fn to_json(header: &StoreHeader, reports: &[CredentialReport]) -> StatusJson {
    let at = reports.first().map_or(0, |r| r.usage.at);
    StatusJson {
        at: rfc3339(at),
        store: header.store.clone(),
        store_exists: header.exists,
        credentials: reports
            .iter()
            .map(|r| {
                let u = &r.usage;
                let names = policy_names(u);
                CredentialJson {
                    credential: u.credential.clone(),
                    charges_recorded: u.charges_recorded,
                    blocked_until: u.blocked_until.map(rfc3339),
                    blocked_reason: u.blocked_reason.clone(),
                    log_lost: r.lost,
                    pools: u
                        .pools
                        .iter()
                        .map(|p| PoolJson {
                            pool: p.pool.clone(),
                            log_lost: p.log_lost.map(|l| LogLostJson {
                                since: rfc3339(l.since),
                                until: rfc3339(l.until),
                            }),
                            observed_rejections: p.observed_rejections,
                            observed_at: p.observed_at.map(rfc3339),
                            windows: p
                                .windows
                                .iter()
                                .enumerate()
                                .map(|(i, w)| {
                                    // `w` is an integer: a window that is not whole
                                    // seconds is promised as the next whole second,
                                    // the longer span, over which at most `q` holds too.
                                    let per = w.window.per.as_secs();
                                    let w_secs = w.window.per.as_millis().div_ceil(1000) as u64;
                                    let name = names[&(p.pool.as_str(), i)].clone();
                                    let t = w.next_free_at.map_or(0, |t| {
                                        ((t - u.at).max(0) as u64).div_ceil(1_000_000)
                                    });
                                    WindowJson {
                                        per_seconds: per,
                                        limit: w.window.limit,
                                        headroom: w.window.headroom,
                                        budget: w.budget,
                                        used: w.used,
                                        reserved: w.reserved,
                                        others: (w.others > 0).then_some(w.others),
                                        others_until: w
                                            .others_until
                                            .filter(|_| w.others > 0)
                                            .map(rfc3339),
                                        remaining: w.remaining,
                                        next_free_at: w.next_free_at.map(rfc3339),
                                        fully_free_at: w.fully_free_at.map(rfc3339),
                                        by_endpoint: w.by_endpoint.clone(),
                                        by_job: w.by_job.clone(),
                                        bucket_seconds: w.window.per.as_secs_f64()
                                            / USAGE_BUCKETS as f64,
                                        buckets: w.buckets.clone(),
                                        ratelimit: RateLimitJson {
                                            policy_header: format!(
                                                "\"{name}\";q={};w={w_secs}",
                                                w.budget
                                            ),
                                            header: format!("\"{name}\";r={};t={t}", w.remaining),
                                            policy: name,
                                            q: w.budget,
                                            w: w_secs,
                                            r: w.remaining,
                                            t,
                                        },
                                    }
                                })
                                .collect(),
                        })
                        .collect(),
                    jobs: r
                        .jobs
                        .iter()
                        .map(|(job, cursor)| JobJson {
                            job: job.clone(),
                            cursor: cursor.clone(),
                        })
                        .collect(),
                }
            })
            .collect(),
    }
}
