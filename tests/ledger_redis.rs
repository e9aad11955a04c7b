//! What only the Redis store has to prove: scripts survive `SCRIPT FLUSH`,
//! idle keys carry a TTL, a call's memory does not grow with its cost, and a
//! log that vanished under its state is noticed and rebuilt from.

mod common;

use std::time::Duration;

use quota::ledger::{At, Charge, Ledger, Pool, PoolCost, RedisLedger, Window, log_key, state_key};

const S: i64 = 1_000_000;
const T0: i64 = 1_700_000_000 * S;

fn units_pool(per_secs: u64, limit: u64) -> Pool {
    Pool {
        name: "units".into(),
        windows: vec![Window {
            per: Duration::from_secs(per_secs),
            limit,
            headroom: 0,
        }],
    }
}

async fn charge(ledger: &RedisLedger, cred: &str, cost: &[PoolCost], at: At) -> bool {
    ledger
        .charge(
            &Charge {
                credential: cred,
                cost,
                endpoint: "e",
                job: "j",
                id: None,
            },
            at,
        )
        .await
        .expect("charge")
        .is_allowed()
}

#[tokio::test]
async fn script_flush_between_charges_changes_nothing() {
    let server = common::RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let pool = units_pool(60, 5);
    let cost = [PoolCost {
        pool: pool.clone(),
        units: 2,
    }];
    assert!(charge(&ledger, "f", &cost, At::Fixed(T0)).await);
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
    assert!(charge(&ledger, "f", &cost, At::Fixed(T0 + S)).await);
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
    // 4 used of 5: a third 2-unit call is refused, exactly as without flushes.
    assert!(!charge(&ledger, "f", &cost, At::Fixed(T0 + 2 * S)).await);
    let u = ledger
        .usage("f", &[pool], At::Fixed(T0 + 2 * S))
        .await
        .unwrap();
    assert_eq!(u.pools[0].windows[0].used, 4);
}

#[tokio::test]
async fn idle_keys_carry_a_ttl_a_little_past_the_window() {
    let server = common::RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let cost = [PoolCost {
        pool: units_pool(3600, 100),
        units: 1,
    }];
    assert!(charge(&ledger, "ttl", &cost, At::StoreClock).await);
    assert!(charge(&ledger, "ttl", &cost, At::StoreClock).await);
    let longest_ms = 3600 * 1000 + 60_000 + 3600 * 1000 / 8;
    for key in [state_key("ttl"), log_key("ttl", "units")] {
        let ttl: i64 = server.cli(&["PTTL", &key]).parse().unwrap();
        assert!(ttl > 3600 * 1000 && ttl <= longest_ms, "{key}: PTTL {ttl}");
    }
    let ids = server.cli(&["KEYS", "quota:{ttl}:id:*"]);
    let id = ids.lines().next().expect("charge id markers exist");
    let ttl: i64 = server.cli(&["PTTL", id]).parse().unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "{id}: PTTL {ttl}");
}

#[tokio::test]
async fn a_100_unit_call_takes_no_more_memory_than_a_1_unit_call() {
    let server = common::RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let pool = units_pool(86_400, 1_000_000_000);
    let mut bytes = Vec::new();
    for (cred, units) in [("one", 1), ("hundred", 100)] {
        let cost = [PoolCost {
            pool: pool.clone(),
            units,
        }];
        for i in 0..1000 {
            assert!(charge(&ledger, cred, &cost, At::Fixed(T0 + i * 1000)).await);
        }
        let usage = |key: String| -> u64 {
            server
                .cli(&["MEMORY", "USAGE", &key, "SAMPLES", "0"])
                .parse()
                .unwrap()
        };
        bytes.push(usage(log_key(cred, "units")) + usage(state_key(cred)));
    }
    assert!(
        bytes[1] <= bytes[0],
        "cost 100: {} B, cost 1: {} B",
        bytes[1],
        bytes[0]
    );
    assert!(bytes[0] <= 40 * 1000, "{} B for 1000 calls", bytes[0]);
}

#[tokio::test]
async fn a_vanished_log_is_noticed_and_the_state_rebuilt_from_it() {
    let server = common::RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let pool = units_pool(60, 10);
    let cost = [PoolCost {
        pool: pool.clone(),
        units: 4,
    }];
    assert!(charge(&ledger, "lost", &cost, At::Fixed(T0)).await);
    assert!(charge(&ledger, "lost", &cost, At::Fixed(T0 + S)).await);
    server.cli(&["DEL", &log_key("lost", "units")]);
    // The state still counts 8 units; this call fits in neither view's favour
    // (8 + 4 > 10), so it is refused without reading the log...
    assert!(!charge(&ledger, "lost", &cost, At::Fixed(T0 + 2 * S)).await);
    // ...and once the old entries would have left, the next call notices the
    // log is not what the state says, records the loss, and recounts.
    assert!(charge(&ledger, "lost", &cost, At::Fixed(T0 + 61 * S)).await);
    assert_ne!(server.cli(&["HGET", &state_key("lost"), "log_lost"]), "");
    let u = ledger
        .usage("lost", &[pool], At::Fixed(T0 + 61 * S))
        .await
        .unwrap();
    assert_eq!(u.pools[0].windows[0].used, 4);
    assert!(charge(&ledger, "lost", &cost, At::Fixed(T0 + 62 * S)).await);
    assert!(!charge(&ledger, "lost", &cost, At::Fixed(T0 + 63 * S)).await);
}
