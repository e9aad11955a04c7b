//! The embedded store gives the same answers as Redis: random sequences of
//! charges (several pools and windows, random costs, repeated ids, same-µs
//! ties) and blocks, fed with the same clock readings to a real Redis and to
//! the embedded store; every decision and every usage report must be equal.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use quota::ledger::{At, Charge, EmbeddedLedger, Ledger, Pool, PoolCost, RedisLedger};

use crate::common::ledger::{S, T0, charge, embedded_path, pool, window};
use crate::common::redis::RedisServer;

#[derive(Clone, Debug)]
enum Op {
    Charge {
        dt_us: i64,
        a: u64,
        b: Option<u64>,
        id: Option<u8>,
        backwards: bool,
    },
    Block {
        dt_us: i64,
        for_secs: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (0i64..1_900_000, 1u64..=8, proptest::option::of(1u64..=10), proptest::option::of(0u8..4), proptest::bool::weighted(0.05))
            .prop_map(|(dt_us, a, b, id, backwards)| Op::Charge { dt_us, a, b, id, backwards }),
        1 => (0i64..1_900_000, 1i64..20).prop_map(|(dt_us, for_secs)| Op::Block { dt_us, for_secs }),
    ]
}

fn pools() -> (Pool, Pool) {
    (
        pool("units", vec![window(10, 22, 2), window(3, 8, 0)]),
        pool("search", vec![window(5, 12, 2)]),
    )
}

async fn replay(ledger: &impl Ledger, credential: &str, ops: &[Op]) -> Vec<String> {
    let (units, search) = pools();
    let mut now = T0;
    let mut out = Vec::new();
    for op in ops {
        match op {
            Op::Charge {
                dt_us,
                a,
                b,
                id,
                backwards,
            } => {
                now += dt_us;
                let mut cost = vec![PoolCost {
                    pool: units.clone(),
                    units: *a,
                }];
                if let Some(b) = b {
                    cost.push(PoolCost {
                        pool: search.clone(),
                        units: *b,
                    });
                }
                let id = id.map(|k| format!("id-{k}"));
                // An occasional reading from the past: both must clamp it.
                let at = if *backwards { now - 5 * S } else { now };
                let c = Charge {
                    endpoint: if b.is_some() {
                        "search.list"
                    } else {
                        "videos.list"
                    },
                    id: id.as_deref(),
                    ..charge(credential, &cost)
                };
                let d = ledger.charge(&c, At::Fixed(at)).await.expect("charge");
                out.push(format!("{d:?}"));
            }
            Op::Block { dt_us, for_secs } => {
                now += dt_us;
                let until = ledger
                    .block(
                        credential,
                        now + for_secs * S,
                        "quotaExceeded",
                        At::Fixed(now),
                    )
                    .await
                    .expect("block");
                out.push(format!("blocked until {until}"));
            }
        }
        let usage = ledger
            .usage(credential, &[units.clone(), search.clone()], At::Fixed(now))
            .await
            .expect("usage");
        out.push(format!("{usage:?}"));
    }
    out
}

#[test]
fn embedded_store_answers_like_redis() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = rt.block_on(RedisLedger::connect(&server.url())).unwrap();
    let embedded = EmbeddedLedger::open(&embedded_path(&dir)).unwrap();
    let case = std::sync::atomic::AtomicU32::new(0);
    // The whole sequence stays inside the 60 s idempotency horizon: Redis
    // expires charge ids on its real clock, the embedded store on the fixed one.
    let mut runner = TestRunner::new(Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(96),
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(op(), 1..30), |ops| {
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let credential = format!("eq{n}");
            let (a, b) = rt.block_on(async {
                (
                    replay(&redis, &credential, &ops).await,
                    replay(&embedded, &credential, &ops).await,
                )
            });
            for (step, (r, e)) in a.iter().zip(&b).enumerate() {
                prop_assert_eq!(r, e, "step {} of {:?}", step / 2, ops);
            }
            Ok(())
        })
        .unwrap();
}
