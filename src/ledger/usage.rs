//! Usage reports: the raw log a store reads ([`CredentialLog`]) and its
//! summary per window ([`CredentialUsage`]), computed here once for both
//! stores so that their reports can only differ if their logs do.
//!
//! A log is read as segments: single calls, and (from Redis, whose log keeps
//! a summary per block of calls, `lua/charge.lua`) blocks of calls read as
//! one summary, so that a status of a million-call log reads thousands of
//! summaries rather than a million entries. The store expands every block
//! that straddles a boundary the summary draws (a window's start, a chart
//! bucket's edge, the retention), so the summary stays exact.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{IDEMPOTENCY_HORIZON, Micros, Others, Pool, Window};

/// One logged call, as a usage report sees it: `tag` indexes
/// [`CredentialLog::tags`] (who spent it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub at: Micros,
    pub cost: u64,
    pub tag: u32,
}

/// Consecutive logged calls read as one summary: how many, the first and
/// last call's times, their total cost, and that cost by tag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogBlock {
    pub calls: u64,
    pub first: Micros,
    pub last: Micros,
    pub cost: u64,
    pub by_tag: Vec<(u32, u64)>,
}

/// A piece of a pool's log, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogSegment {
    Entry(LogEntry),
    Block(LogBlock),
}

impl LogSegment {
    /// The time from which every unit of the segment has left a window once
    /// its length has passed (its last call), and its cost: what a planner
    /// may count, erring late (never frees units early).
    pub fn spent(&self) -> (Micros, u64) {
        match self {
            LogSegment::Entry(e) => (e.at, e.cost),
            LogSegment::Block(b) => (b.last, b.cost),
        }
    }

    /// The first and last call's times.
    pub fn span(&self) -> (Micros, Micros) {
        match self {
            LogSegment::Entry(e) => (e.at, e.at),
            LogSegment::Block(b) => (b.first, b.last),
        }
    }
}

/// The raw log of a credential, as read from a store, before summarising.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialLog {
    pub at: Micros,
    pub serial: u64,
    pub blocked_until: Micros,
    pub blocked_reason: String,
    /// The retention stored with the log: entries at or before
    /// `at - max(retain, IDEMPOTENCY_HORIZON)` count in no window, even one
    /// lengthened since (both stores may already have dropped them).
    pub retain: Micros,
    /// Who spent, by tag id: (endpoint, job). An id with no name reads as
    /// empty names.
    pub tags: Vec<(String, String)>,
    /// Per pool asked about, in order: its log, oldest first.
    pub pools: Vec<Vec<LogSegment>>,
    /// Per pool asked about, in order: when its log was found lost (0: never).
    pub lost: Vec<Micros>,
    /// Per pool asked about, in order: units others spent, per the upstream.
    pub others: Vec<Others>,
    /// Per pool asked about, in order: calls recorded in observe mode
    /// though they did not fit, and when the latest was (0: never).
    pub observed: Vec<(u64, Micros)>,
    /// Per pool asked about, in order: the time and units of each
    /// reservation (a cost charged as an estimate) not settled yet, whose
    /// call the log still holds.
    pub reserved: Vec<Vec<(Micros, u64)>>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A pool whose log the store lost: it counts as spent from `since` until
/// its longest window has passed (`until`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LogLost {
    pub since: Micros,
    pub until: Micros,
}

/// Usage of one window, read without spending.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WindowUsage {
    #[serde(flatten)]
    pub window: Window,
    pub budget: u64,
    pub used: u64,
    /// Units spent by others, as the upstream's own count says (the
    /// pool's longest window only), until `others_until`.
    #[serde(skip_serializing_if = "is_zero")]
    pub others: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub others_until: Option<Micros>,
    pub remaining: u64,
    /// Units of `used` charged as estimates whose settle has not come yet
    /// (the call is in flight, or its run was killed): they stay at their
    /// estimate until it does.
    pub reserved: u64,
    /// When the oldest entry leaves the window (`None`: the window is empty).
    pub next_free_at: Option<Micros>,
    /// When the newest entry leaves the window (`None`: the window is empty).
    pub fully_free_at: Option<Micros>,
    pub by_endpoint: BTreeMap<String, u64>,
    pub by_job: BTreeMap<String, u64>,
    /// Units spent in equal time buckets across the window, oldest first.
    pub buckets: Vec<u64>,
}

/// Usage of one pool: its windows, in configuration order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PoolUsage {
    pub pool: String,
    pub windows: Vec<WindowUsage>,
    /// Set while the pool counts as spent because its log was lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_lost: Option<LogLost>,
    /// Observe mode: calls recorded though they did not fit, and when the
    /// latest was.
    pub observed_rejections: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<Micros>,
}

/// Usage of one credential at one instant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CredentialUsage {
    pub credential: String,
    pub at: Micros,
    pub charges_recorded: u64,
    pub blocked_until: Option<Micros>,
    pub blocked_reason: Option<String>,
    pub pools: Vec<PoolUsage>,
}

/// How many time buckets a usage report splits each window into.
pub const USAGE_BUCKETS: usize = 24;

/// Summarise a raw log into per-window usage. Shared by both stores, so their
/// reports can only differ if their logs do.
pub fn summarize(credential: &str, pools: &[Pool], log: &CredentialLog) -> CredentialUsage {
    let now = log.at;
    let visible = now - log.retain.max(IDEMPOTENCY_HORIZON.as_micros() as Micros);
    let pools_usage = pools
        .iter()
        .zip(&log.pools)
        .enumerate()
        .map(|(i, (pool, entries))| {
            let since = log.lost.get(i).copied().unwrap_or(0);
            let until = since + pool.longest().as_micros() as Micros;
            // (over, too, once the retention has passed since: see charge.lua)
            let over = until <= now || since <= visible;
            let log_lost = (since > 0 && !over).then_some(LogLost { since, until });
            PoolUsage {
                pool: pool.name.clone(),
                windows: pool
                    .windows
                    .iter()
                    .map(|w| {
                        let frame = Frame::of(w, now, visible);
                        let mut usage = summarize_window(w, &frame, log, entries);
                        usage.reserved = log.reserved.get(i).map_or(0, |r| {
                            r.iter()
                                .filter(|&&(t, _)| frame.inside(t) && t <= now)
                                .map(|&(_, units)| units)
                                .sum()
                        });
                        let others = log.others.get(i).copied().unwrap_or_default();
                        if Some(w) == pool.longest_window() && others.until > now {
                            usage.others = others.units;
                            usage.others_until = Some(others.until);
                            usage.remaining = usage.remaining.saturating_sub(others.units);
                        }
                        if let Some(l) = log_lost {
                            // Spent, as the ledger decides, until the loss is over.
                            usage.remaining = 0;
                            usage.next_free_at = Some(l.until);
                        }
                        usage
                    })
                    .collect(),
                log_lost,
                observed_rejections: log.observed.get(i).map_or(0, |o| o.0),
                observed_at: log.observed.get(i).map(|o| o.1).filter(|&t| t > 0),
            }
        })
        .collect();
    let blocked = log.blocked_until > now;
    CredentialUsage {
        credential: credential.to_string(),
        at: now,
        charges_recorded: log.serial,
        blocked_until: blocked.then_some(log.blocked_until),
        blocked_reason: blocked.then(|| log.blocked_reason.clone()),
        pools: pools_usage,
    }
}

/// One window's usage from its pool's log, before what the pool's other
/// parts (reservations, others' units, a lost log) add to it.
fn summarize_window(
    window: &Window,
    frame: &Frame,
    log: &CredentialLog,
    segments: &[LogSegment],
) -> WindowUsage {
    let mut tally = Tally::new(log.tags.len());
    for s in segments {
        tally.add(frame, s);
    }
    let (by_endpoint, by_job) = tally.by_name(&log.tags);
    // (a calendar window frees everything when its period ends)
    let free_at = |t: Micros| frame.reset.unwrap_or(t + frame.len);
    WindowUsage {
        window: window.clone(),
        budget: window.budget(),
        used: tally.used,
        others: 0,
        others_until: None,
        remaining: window.budget().saturating_sub(tally.used),
        reserved: 0,
        next_free_at: tally.oldest.map(free_at),
        fully_free_at: tally.newest.map(free_at),
        by_endpoint,
        by_job,
        buckets: tally.buckets,
    }
}

/// A window at `now` as a report draws it: entries after `start` (and
/// after the retention, `visible`) count, its chart spans `len` µs from
/// there in [`USAGE_BUCKETS`] buckets, and a calendar window's period ends
/// (and frees everything) at `reset`.
struct Frame {
    start: Micros,
    len: Micros,
    reset: Option<Micros>,
    visible: Micros,
}

impl Frame {
    fn of(window: &Window, now: Micros, visible: Micros) -> Self {
        let (start, len, reset) = match window.span_at(now) {
            (start, Some(end)) => (start, end - start, Some(end)),
            (start, None) => (start, window.len_us(), None),
        };
        Frame {
            start,
            len,
            reset,
            visible,
        }
    }

    /// Whether a call at `t` counts in the window.
    fn inside(&self, t: Micros) -> bool {
        t > self.start && t > self.visible
    }

    /// The chart bucket of a call at `t`: bucket i covers
    /// (start + i*len/n, start + (i+1)*len/n].
    fn bucket(&self, t: Micros) -> usize {
        let offset = (t - self.start - 1).max(0) as i128;
        ((offset * USAGE_BUCKETS as i128 / self.len as i128) as usize).min(USAGE_BUCKETS - 1)
    }
}

/// What a window's segments add up to: units in all, per chart bucket and
/// per tag, and the oldest and newest call that cost anything.
struct Tally {
    used: u64,
    by_tag: Vec<u64>,
    buckets: Vec<u64>,
    oldest: Option<Micros>,
    newest: Option<Micros>,
}

impl Tally {
    fn new(tags: usize) -> Self {
        Tally {
            used: 0,
            by_tag: vec![0; tags],
            buckets: vec![0; USAGE_BUCKETS],
            oldest: None,
            newest: None,
        }
    }

    /// Count `s` if it lies in the window.
    fn add(&mut self, frame: &Frame, s: &LogSegment) {
        let (first, last) = s.span();
        if !frame.inside(last) {
            return;
        }
        // The store expands every block that straddles a boundary drawn here.
        debug_assert!(
            frame.inside(first) && frame.bucket(first) == frame.bucket(last),
            "{s:?} straddles"
        );
        let (cost, at) = match s {
            LogSegment::Entry(e) => (e.cost, e.at),
            LogSegment::Block(b) => (b.cost, b.last),
        };
        // (a call settled to nothing frees nothing when it leaves)
        if cost > 0 {
            self.oldest.get_or_insert(first);
            self.newest = Some(last);
        }
        self.used += cost;
        self.buckets[frame.bucket(at)] += cost;
        match s {
            LogSegment::Entry(e) => self.spend(e.tag, e.cost),
            LogSegment::Block(b) => {
                for &(tag, cost) in &b.by_tag {
                    self.spend(tag, cost);
                }
            }
        }
    }

    /// (a tag with no name: counted in `used`, named by none)
    fn spend(&mut self, tag: u32, cost: u64) {
        if let Some(t) = self.by_tag.get_mut(tag as usize) {
            *t += cost;
        }
    }

    /// Units by endpoint and by job, from the names of `tags`.
    fn by_name(&self, tags: &[(String, String)]) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
        let mut by_endpoint = BTreeMap::new();
        let mut by_job = BTreeMap::new();
        for (tag, &cost) in self.by_tag.iter().enumerate().filter(|(_, c)| **c > 0) {
            let (endpoint, job) = &tags[tag];
            *by_endpoint.entry(endpoint.clone()).or_insert(0) += cost;
            *by_job.entry(job.clone()).or_insert(0) += cost;
        }
        (by_endpoint, by_job)
    }
}

/// Whether `segment` straddles a boundary that [`summarize`] draws for a
/// window of `pools`'s pool at `now` (its start, a chart bucket's edge, or
/// the retention `visible`): such a block must be read call by call.
pub fn straddles(pool: &Pool, segment: &LogSegment, now: Micros, visible: Micros) -> bool {
    let (first, last) = segment.span();
    pool.windows.iter().any(|w| {
        let frame = Frame::of(w, now, visible);
        frame.inside(first) != frame.inside(last)
            || (frame.inside(first) && frame.bucket(first) != frame.bucket(last))
    })
}

/// The tag a log entry carries: who spent it.
pub(crate) fn tag(endpoint: &str, job: &str) -> String {
    format!("{endpoint}\t{job}")
}

pub(crate) fn untag(tag: &str) -> (String, String) {
    match tag.split_once('\t') {
        Some((e, j)) => (e.to_string(), j.to_string()),
        None => (tag.to_string(), String::new()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn entry(at: Micros, cost: u64, tag: u32) -> LogSegment {
        LogSegment::Entry(LogEntry { at, cost, tag })
    }

    #[test]
    fn summary_counts_only_entries_inside_each_window() {
        let pool = Pool {
            name: "units".into(),
            windows: vec![
                Window {
                    per: Duration::from_secs(100),
                    limit: 50,
                    headroom: 5,
                    aligned: None,
                },
                Window {
                    per: Duration::from_secs(10),
                    limit: 20,
                    headroom: 0,
                    aligned: None,
                },
            ],
        };
        let s = 1_000_000;
        let log = CredentialLog {
            at: 200 * s,
            serial: 3,
            blocked_until: 0,
            blocked_reason: String::new(),
            retain: 100 * s,
            lost: vec![0],
            others: vec![Others::default()],
            observed: vec![(0, 0)],
            // (reservations: one out of both windows, one in each)
            reserved: vec![vec![(100 * s, 7), (150 * s, 3), (195 * s, 4)]],
            tags: vec![("a".into(), "j1".into()), ("b".into(), "j2".into())],
            pools: vec![vec![
                entry(100 * s, 7, 0), // exactly at the 100 s boundary: out
                entry(150 * s, 3, 0),
                entry(195 * s, 4, 1),
            ]],
        };
        let u = summarize("c", &[pool], &log);
        let day = &u.pools[0].windows[0];
        assert_eq!((day.budget, day.used, day.remaining), (45, 7, 38));
        assert_eq!(day.next_free_at, Some(250 * s));
        assert_eq!(day.fully_free_at, Some(295 * s));
        assert_eq!(day.by_endpoint.get("a"), Some(&3));
        assert_eq!(day.by_job.get("j2"), Some(&4));
        assert_eq!(day.buckets.iter().sum::<u64>(), 7);
        // Buckets of 100/24 s: 195 s lies in (191.7 s, 195.8 s], bucket 22.
        assert_eq!(day.buckets[22], 4);
        let short = &u.pools[0].windows[1];
        assert_eq!((short.used, short.remaining), (4, 16));
        assert_eq!((day.reserved, short.reserved), (7, 4));
        assert_eq!(u.blocked_until, None);
    }
}
