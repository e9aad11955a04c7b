//! `portion status --json`: the stable shape dashboards and scripts read
//! (documented in the README), with each window's IETF RateLimit fields.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{CredentialReport, InputsProgress, StoreHeader};
use crate::history::LostLog;
use crate::ledger::{CredentialUsage, USAGE_BUCKETS, WindowUsage};
use crate::runner::cursor::Cursor;
use crate::runner::upstream_limits::differs;
use crate::timefmt::{fmt_window, rfc3339};

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
    /// Per share, pool and window: its reserve, used and what it can take.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<ShareJson>,
    pub jobs: Vec<JobJson>,
}

/// One share's figures in one window (issue 28).
#[derive(Serialize)]
pub struct ShareJson {
    pub share: String,
    pub pool: String,
    pub per_seconds: u64,
    pub reserve: u64,
    /// `null`: no limit.
    pub limit: Option<u64>,
    pub used: u64,
    /// What a charge by the share can take now.
    pub available: u64,
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
    /// What the upstream last announced of this pool's limits
    /// (`upstream_headers`), and when; absent until it announced any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_says: Option<UpstreamSaysJson>,
    /// Its windows whose limit is the upstream's (`from: upstream`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub budgets_from_upstream: Vec<LearnedJson>,
}

/// A window whose limit is the upstream's: the limit it last announced
/// for it (`null`: not yet) and when, and the YAML's cap.
#[derive(Serialize)]
pub struct LearnedJson {
    pub per_seconds: u64,
    pub limit: Option<u64>,
    pub seen: Option<String>,
    pub cap: Option<u64>,
}

/// The limits the upstream announced: `limits` as it said them (a
/// `per_seconds` of `null`: it did not say the window), when `seen`, and
/// whether they `differ` from the pool's windows.
#[derive(Serialize)]
pub struct UpstreamSaysJson {
    pub limits: Vec<UpstreamLimitJson>,
    pub seen: String,
    pub differs: bool,
}

#[derive(Serialize)]
pub struct UpstreamLimitJson {
    pub limit: u64,
    pub per_seconds: Option<u64>,
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

/// A job's PostgreSQL table: where, and its rows of the job (`null`:
/// unknown, `unknown` says why: the count ran out of its time, say).
#[derive(Serialize, Clone, Debug)]
pub struct TableJson {
    pub table: String,
    /// `HOST:PORT database DB`, never the password.
    pub server: String,
    pub rows: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown: Option<String>,
}

#[derive(Serialize)]
pub struct JobJson {
    pub job: String,
    /// Where its next run starts; `null` if it never ran.
    pub cursor: Option<Cursor>,
    /// A job of inputs: done, skipped, failed, left and when the rest will
    /// be done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inputs: Option<InputsProgress>,
    /// A job with a conditional step: its calls answered 304 and the
    /// units they gave back, over its runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_modified: Option<crate::runner::job_state::NotModified>,
    /// Its run waits for units inside itself now (`max_wait`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<WaitingJson>,
    /// A job with `output.postgres`: its table and row count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub postgres: Option<TableJson>,
}

/// What a run waits for: `units` of `pool` (none: the credential's block)
/// until `until` (RFC 3339), and why.
#[derive(Serialize)]
pub struct WaitingJson {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pool: String,
    pub units: u64,
    pub until: String,
    pub why: String,
}

/// Each window's RateLimit policy name, unique within the credential and
/// the same from one call to the next: `POOL-PER` (`units-24h`); when
/// windows share that, `POOL-PER-LIMIT` (`units-1h-30`); when they share
/// that too, the window's place in its pool (`units-1h-30-2`, from 1).
pub(super) fn policy_names(u: &CredentialUsage) -> BTreeMap<(&str, usize), String> {
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
                            upstream_says: r.upstream.get(&p.pool).map(|a| UpstreamSaysJson {
                                limits: (a.limits.iter())
                                    .map(|l| UpstreamLimitJson {
                                        limit: l.limit,
                                        per_seconds: l.per.map(|p| p.as_secs()),
                                    })
                                    .collect(),
                                seen: rfc3339(a.seen),
                                differs: differs(p.windows.iter().map(|w| &w.window), &a.limits),
                            }),
                            budgets_from_upstream: (r.learned.iter())
                                .filter(|(l, _)| l.pool == p.pool)
                                .map(|(l, learned)| LearnedJson {
                                    per_seconds: l.per.as_secs(),
                                    limit: learned.map(|(limit, _)| limit),
                                    seen: learned.map(|(_, seen)| rfc3339(seen)),
                                    cap: l.cap,
                                })
                                .collect(),
                            windows: p
                                .windows
                                .iter()
                                .enumerate()
                                .map(|(i, w)| {
                                    window_json(u, w, names[&(p.pool.as_str(), i)].clone())
                                })
                                .collect(),
                        })
                        .collect(),
                    shares: (r.shares.iter())
                        .map(|s| ShareJson {
                            share: s.share.clone(),
                            pool: s.pool.clone(),
                            per_seconds: s.per.as_secs(),
                            reserve: s.reserve,
                            limit: s.limit,
                            used: s.used,
                            available: s.available,
                        })
                        .collect(),
                    jobs: r
                        .jobs
                        .iter()
                        .map(|(job, cursor)| JobJson {
                            job: job.clone(),
                            cursor: cursor.clone(),
                            inputs: r.inputs.get(job).cloned(),
                            not_modified: r.not_modified.get(job).cloned(),
                            waiting: r.waiting.get(job).map(|w| WaitingJson {
                                pool: w.pool.clone(),
                                units: w.units,
                                until: rfc3339(w.until),
                                why: w.why.clone(),
                            }),
                            postgres: r.tables.get(job).cloned(),
                        })
                        .collect(),
                }
            })
            .collect(),
    }
}

/// One window of `u` as JSON; `name` is its RateLimit policy name.
fn window_json(u: &CredentialUsage, w: &WindowUsage, name: String) -> WindowJson {
    // `w` is an integer: a window that is not whole
    // seconds is promised as the next whole second,
    // the longer span, over which at most `q` holds too.
    let per = w.window.per.as_secs();
    let w_secs = w.window.per.as_millis().div_ceil(1000) as u64;
    let t = w
        .next_free_at
        .map_or(0, |t| ((t - u.at).max(0) as u64).div_ceil(1_000_000));
    WindowJson {
        per_seconds: per,
        limit: w.window.limit,
        headroom: w.window.headroom,
        budget: w.budget,
        used: w.used,
        reserved: w.reserved,
        others: (w.others > 0).then_some(w.others),
        others_until: w.others_until.filter(|_| w.others > 0).map(rfc3339),
        remaining: w.remaining,
        next_free_at: w.next_free_at.map(rfc3339),
        fully_free_at: w.fully_free_at.map(rfc3339),
        by_endpoint: w.by_endpoint.clone(),
        by_job: w.by_job.clone(),
        bucket_seconds: w.window.per.as_secs_f64() / USAGE_BUCKETS as f64,
        buckets: w.buckets.clone(),
        ratelimit: RateLimitJson {
            policy_header: format!("\"{name}\";q={};w={w_secs}", w.budget),
            header: format!("\"{name}\";r={};t={t}", w.remaining),
            policy: name,
            q: w.budget,
            w: w_secs,
            r: w.remaining,
            t,
        },
    }
}
