//! Concurrency: 32 clients (two separate processes of 16 tasks each) charge
//! random costs 1..=20 against one credential, on the store's own clock, for
//! several windows' worth of time. From the log of decisions: no window ever
//! holds more than its budget, and every rejection was deserved (the window it
//! names really was short at that point of the serial order). And the ledger
//! agrees with the clients exactly: one recorded charge per Allowed decision,
//! its log is their admitted charges (times and costs, in serial order), its
//! windows hold what those put there, and never more than a budget.
//!
//! The child processes are this test binary run again with `load_child`
//! selected; that helper is `#[ignore]`d so it never runs on its own.

use std::process::Command;
use std::time::{Duration, Instant};

use portion::ledger::{
    At, ChargeDecision, EmbeddedLedger, Ledger, LogSegment, Pool, PoolCost, RedisLedger, Store,
    StoreLocation, Window,
};

use crate::common::ledger::{charge, embedded_path};
use crate::common::redis::RedisServer;

const PROCESSES: usize = 2;
const TASKS: usize = 16;
const RUN: Duration = Duration::from_secs(5);

fn pool() -> Pool {
    Pool {
        name: "units".into(),
        windows: vec![
            Window {
                per: Duration::from_secs(2),
                limit: 1_000,
                headroom: 50,
                aligned: None,
            },
            Window {
                per: Duration::from_millis(500),
                limit: 300,
                headroom: 0,
                aligned: None,
            },
        ],
    }
}

/// One decision as a child reports it.
#[derive(Debug)]
struct Decision {
    allowed: bool,
    serial: u64,
    at: i64,
    cost: u64,
    /// For a rejection: the window that said no, in µs.
    per_us: i64,
}

#[test]
#[ignore = "helper: run in child processes by the concurrency tests"]
fn load_child() {
    let store = std::env::var("PORTION_LOAD_STORE").expect("PORTION_LOAD_STORE");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lines = rt.block_on(async move {
        let location = StoreLocation::parse(&store).unwrap();
        let store = std::sync::Arc::new(Store::open(&location).await.unwrap());
        let deadline = Instant::now() + RUN;
        let mut tasks = Vec::new();
        for _ in 0..TASKS {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let cost_pool = pool();
                let mut out = Vec::new();
                while Instant::now() < deadline {
                    let units = rand::random_range(1..=20u64);
                    let cost = [PoolCost {
                        pool: cost_pool.clone(),
                        units,
                    }];
                    let charge = charge("shared", &cost);
                    match store.charge(&charge, At::StoreClock).await.unwrap() {
                        ChargeDecision::Allowed { serial, at, .. } => {
                            out.push(format!("LOAD A {serial} {at} {units} 0"))
                        }
                        ChargeDecision::Rejected {
                            serial,
                            at,
                            per,
                            retry_after,
                            ..
                        } => {
                            out.push(format!("LOAD R {serial} {at} {units} {}", per.as_micros()));
                            // A real client waits; cap it so the load stays high.
                            tokio::time::sleep(retry_after.min(Duration::from_millis(3))).await;
                        }
                        other => panic!("unexpected {other:?}"),
                    }
                }
                out
            }));
        }
        let mut lines = Vec::new();
        for t in tasks {
            lines.extend(t.await.unwrap());
        }
        lines
    });
    for l in lines {
        println!("{l}");
    }
}

fn run_children(store: &str) -> Vec<Decision> {
    let exe = std::env::current_exe().unwrap();
    // libtest names a test by its path below the crate: this module's path
    // without the test binary's own name.
    let (_, module) = module_path!().split_once("::").unwrap();
    let load_child = format!("{module}::load_child");
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(&exe)
                .args([
                    load_child.as_str(),
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env("PORTION_LOAD_STORE", store)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut decisions = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "child failed");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // libtest may print "test …::load_child ... " before the first line.
            let Some(rest) = line.find("LOAD ").map(|i| &line[i + 5..]) else {
                continue;
            };
            let f: Vec<&str> = rest.split(' ').collect();
            decisions.push(Decision {
                allowed: f[0] == "A",
                serial: f[1].parse().unwrap(),
                at: f[2].parse().unwrap(),
                cost: f[3].parse().unwrap(),
                per_us: f[4].parse().unwrap(),
            });
        }
    }
    decisions
}

fn check(decisions: &[Decision]) {
    let pool = pool();
    let mut admitted: Vec<&Decision> = decisions.iter().filter(|d| d.allowed).collect();
    admitted.sort_by_key(|d| d.serial);
    let rejected: Vec<&Decision> = decisions.iter().filter(|d| !d.allowed).collect();
    assert!(admitted.len() > 100, "too few admitted: {}", admitted.len());
    assert!(rejected.len() > 100, "too few rejected: {}", rejected.len());
    // Every recorded charge came from these clients: serials are 1..=N.
    for (i, d) in admitted.iter().enumerate() {
        assert_eq!(d.serial, i as u64 + 1, "serials must be unique and dense");
    }
    assert!(
        admitted.windows(2).all(|w| w[0].at <= w[1].at),
        "time runs forward"
    );

    let in_window = |upto_serial: u64, now: i64, per: i64| -> u64 {
        admitted
            .iter()
            .take_while(|d| d.serial <= upto_serial)
            .filter(|d| d.at > now - per)
            .map(|d| d.cost)
            .sum()
    };
    for w in &pool.windows {
        let per = w.per.as_micros() as i64;
        for d in &admitted {
            let held = in_window(d.serial, d.at, per);
            assert!(
                held <= w.budget(),
                "{:?} window held {held} > {} at serial {}",
                w.per,
                w.budget(),
                d.serial
            );
        }
    }
    for r in &rejected {
        let w = pool
            .windows
            .iter()
            .find(|w| w.per.as_micros() as i64 == r.per_us)
            .expect("rejection names a configured window");
        let held = in_window(r.serial, r.at, r.per_us);
        assert!(
            held + r.cost > w.budget(),
            "rejected {} units with {held} of {} held in {:?}",
            r.cost,
            w.budget(),
            w.per
        );
    }
}

/// The ledger agrees with the clients exactly: it recorded one charge per
/// Allowed decision they saw, and its log holds exactly their charges, in
/// serial order, at the times and costs they were told; the windows it
/// reports hold what those charges put there, and its own log never holds
/// more than a budget in any window.
async fn assert_ledger_agrees(ledger: &impl Ledger, decisions: &[Decision]) {
    let mut admitted: Vec<&Decision> = decisions.iter().filter(|d| d.allowed).collect();
    admitted.sort_by_key(|d| d.serial);
    let last = admitted.last().expect("some charges were admitted").at;
    let pools = [pool()];
    // Read as of the last admitted charge (a later rejection may have moved
    // the credential's clock on: the report says when it reads).
    let log = ledger
        .read("shared", &pools, At::Fixed(last))
        .await
        .unwrap();
    let u = ledger
        .usage("shared", &pools, At::Fixed(last))
        .await
        .unwrap();

    assert_eq!(
        u.charges_recorded,
        admitted.len() as u64,
        "one recorded charge per Allowed decision"
    );
    // The run is far shorter than the retention (the idempotency horizon),
    // so the log still holds every charge.
    let told: Vec<(i64, u64)> = admitted.iter().map(|d| (d.at, d.cost)).collect();
    // (a block of calls read as one summary stands for as many told charges:
    // its first and last time and its total cost must be theirs)
    let mut logged: Vec<(i64, u64)> = Vec::new();
    for s in &log.pools[0] {
        match s {
            LogSegment::Entry(e) => logged.push((e.at, e.cost)),
            LogSegment::Block(b) => {
                let n = logged.len();
                let calls = &told[n.min(told.len())..(n + b.calls as usize).min(told.len())];
                assert_eq!(
                    (calls.first().map(|c| c.0), calls.last().map(|c| c.0)),
                    (Some(b.first), Some(b.last)),
                    "block {b:?} at call {n}"
                );
                assert_eq!(
                    calls.iter().map(|c| c.1).sum::<u64>(),
                    b.cost,
                    "block {b:?}"
                );
                logged.extend_from_slice(calls);
            }
        }
    }
    assert_eq!(
        logged.len(),
        told.len(),
        "the log holds every admitted charge"
    );
    if let Some(i) = (0..told.len()).find(|&i| logged[i] != told[i]) {
        panic!(
            "the log is not the admitted charges, in serial order: serial {} was told \
             (at, cost) = {:?}, the log holds {:?}",
            i + 1,
            told[i],
            logged[i]
        );
    }
    assert_eq!(
        logged.iter().map(|e| e.1).sum::<u64>(),
        told.iter().map(|e| e.1).sum::<u64>(),
        "units logged == units the clients were told were charged"
    );
    for (w, usage) in pools[0].windows.iter().zip(&u.pools[0].windows) {
        let per = w.per.as_micros() as i64;
        let held: u64 = told
            .iter()
            .filter(|(at, _)| *at > u.at - per)
            .map(|e| e.1)
            .sum();
        assert_eq!(usage.used, held, "{:?} window at {}", w.per, u.at);
        // The store's own log, window by window: never over the budget.
        let (mut from, mut in_window) = (0, 0u64);
        for (i, (at, cost)) in logged.iter().enumerate() {
            in_window += cost;
            while logged[from].0 <= at - per {
                in_window -= logged[from].1;
                from += 1;
            }
            assert!(
                in_window <= w.budget(),
                "the store's log holds {in_window} > {} in its {:?} window ending at entry {i}",
                w.budget(),
                w.per
            );
        }
    }
}

#[test]
fn redis_never_overspends_under_32_concurrent_clients() {
    let server = RedisServer::start();
    let decisions = run_children(&server.url());
    check(&decisions);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ledger = RedisLedger::connect(&server.url()).await.unwrap();
        assert_ledger_agrees(&ledger, &decisions).await;
    });
}

#[test]
fn embedded_never_overspends_under_32_concurrent_clients() {
    let dir = tempfile::tempdir().unwrap();
    let path = embedded_path(&dir);
    let ledger = EmbeddedLedger::open(&path).unwrap(); // the schema, up front
    let decisions = run_children(&format!("embedded:{}", path.display()));
    check(&decisions);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(assert_ledger_agrees(&ledger, &decisions));
}
