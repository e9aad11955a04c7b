//! Building blocks of the ledger tests, which call the library directly:
//! a fixed clock, windows, pools, costs, a charge and a usage read.

use std::path::PathBuf;
use std::time::Duration;

use portion::ledger::{At, Charge, Ledger, Pool, PoolCost, Window};

/// One second in µs.
pub const S: i64 = 1_000_000;
/// An arbitrary epoch for fixed-clock tests (`At::Fixed`), in µs: the one
/// `T0` of the tests. (The operator's reports are made at another instant,
/// a date they show: `known::REPORT_TIME`.)
pub const T0: i64 = 1_700_000_000 * S;

/// A path for an embedded store file in `dir`.
pub fn embedded_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("ledger.sqlite3")
}

/// A window of `limit` units per `secs` seconds, `headroom` kept back.
pub fn window(secs: u64, limit: u64, headroom: u64) -> Window {
    Window {
        per: Duration::from_secs(secs),
        limit,
        headroom,
        aligned: None,
    }
}

/// A pool of those windows.
pub fn pool(name: &str, windows: Vec<Window>) -> Pool {
    Pool {
        name: name.into(),
        windows,
    }
}

/// `units` of `pool`.
pub fn cost(pool: &Pool, units: u64) -> PoolCost {
    PoolCost {
        pool: pool.clone(),
        units,
    }
}

/// A charge of `cost` to `credential` by job `j` on endpoint `e`, without
/// an id; set other fields with `Charge { job, ..charge(…) }`.
pub fn charge<'a>(credential: &'a str, cost: &'a [PoolCost]) -> Charge<'a> {
    Charge {
        credential,
        cost,
        endpoint: "e",
        job: "j",
        id: None,
        seen_serial: 0,
        observe: false,
        estimated: &[],
        shares: None,
    }
}

/// Units used at `at` in every window of `pools`, pool after pool.
pub async fn used(ledger: &impl Ledger, credential: &str, pools: &[Pool], at: i64) -> Vec<u64> {
    let u = ledger
        .usage(credential, pools, At::Fixed(at))
        .await
        .expect("usage");
    u.pools
        .iter()
        .flat_map(|p| p.windows.iter().map(|w| w.used))
        .collect()
}
