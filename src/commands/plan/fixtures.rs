//! Pools and schedules the plan's unit tests share, in seconds.

use std::collections::BTreeMap;
use std::time::Duration;

use super::schedule::Scheduled;
use crate::ledger::{Pool, Window};

pub const MIN: u64 = 60;
pub const HOUR: u64 = 3600;
pub const DAY_S: u64 = 86_400;

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A pool of windows (seconds, limit, headroom).
pub fn pool(name: &str, windows: &[(u64, u64, u64)]) -> Pool {
    let window = |&(per, limit, headroom): &(u64, u64, u64)| Window {
        per: secs(per),
        limit,
        headroom,
        aligned: None,
    };
    Pool {
        name: name.into(),
        windows: windows.iter().map(window).collect(),
    }
}

/// One pool, `units`, of `limit` an hour.
pub fn hourly(limit: u64) -> [Pool; 1] {
    [pool("units", &[(HOUR, limit, 0)])]
}

/// Units per pool.
pub fn units(of: &[(&str, u64)]) -> BTreeMap<String, u64> {
    of.iter().map(|(p, u)| (p.to_string(), *u)).collect()
}

/// `job` run every `every` seconds, spending `of` a run.
pub fn every(job: &'static str, every: u64, of: &[(&str, u64)]) -> Scheduled<'static> {
    Scheduled {
        job,
        every: secs(every),
        units: units(of),
    }
}
