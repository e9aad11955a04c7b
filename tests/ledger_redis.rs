//! What only the Redis store has to prove: scripts survive `SCRIPT FLUSH`,
//! idle keys carry a TTL, a call's memory does not grow with its cost, a
//! charge whose reply was lost on the wire is recorded once, and a log that
//! vanished under its state is noticed and rebuilt from.

use quota::ledger::{At, Charge, Ledger, Pool, PoolCost, RedisLedger, log_key, state_key};

use crate::common::ledger::{S, T0, charge, cost, pool, used, window};
use crate::common::redis::RedisServer;
use crate::common::relay::LossyRelay;

/// A `units` pool of one window: `limit` units per `per_secs` seconds.
fn units_pool(per_secs: u64, limit: u64) -> Pool {
    pool("units", vec![window(per_secs, limit, 0)])
}

/// Charge `cost` to `cred` at `at`: was it allowed?
async fn charged(ledger: &RedisLedger, cred: &str, cost: &[PoolCost], at: At) -> bool {
    ledger
        .charge(&charge(cred, cost), at)
        .await
        .expect("charge")
        .is_allowed()
}

#[tokio::test]
async fn script_flush_between_charges_changes_nothing() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let pool = units_pool(60, 5);
    let cost = [cost(&pool, 2)];
    assert!(charged(&ledger, "f", &cost, At::Fixed(T0)).await);
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
    assert!(charged(&ledger, "f", &cost, At::Fixed(T0 + S)).await);
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
    // 4 used of 5: a third 2-unit call is refused, exactly as without flushes.
    assert!(!charged(&ledger, "f", &cost, At::Fixed(T0 + 2 * S)).await);
    assert_eq!(used(&ledger, "f", &[pool], T0 + 2 * S).await, [4]);
}

#[tokio::test]
async fn idle_keys_carry_a_ttl_a_little_past_the_window() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let cost = [cost(&units_pool(3600, 100), 1)];
    assert!(charged(&ledger, "ttl", &cost, At::StoreClock).await);
    assert!(charged(&ledger, "ttl", &cost, At::StoreClock).await);
    let longest_ms = 3600 * 1000 + 60_000 + 3600 * 1000 / 8;
    for key in [state_key("ttl"), log_key("ttl", "units")] {
        let ttl: i64 = server.cli(&["PTTL", &key]).parse().unwrap();
        assert!(ttl > 3600 * 1000 && ttl <= longest_ms, "{key}: PTTL {ttl}");
    }
    // Charge ids ride in the log entries: no key per charge.
    let mut keys: Vec<String> = server
        .cli(&["KEYS", "quota:{ttl}:*"])
        .lines()
        .map(str::to_string)
        .collect();
    keys.sort();
    assert_eq!(keys, [log_key("ttl", "units"), state_key("ttl")]);
}

#[tokio::test]
async fn a_charge_whose_reply_was_lost_is_recorded_once() {
    let server = RedisServer::start();
    let relay = LossyRelay::start(server.port);
    let ledger = RedisLedger::connect(&relay.url()).await.unwrap();
    let pool = units_pool(3600, 100);
    let cost = [cost(&pool, 5)];
    // The first charge also loads the script, so the next request is the
    // charge itself.
    assert!(charged(&ledger, "lost-reply", &cost, At::Fixed(T0)).await);
    relay.lose_next_reply();
    let decision = ledger
        .charge(&charge("lost-reply", &cost), At::Fixed(T0 + S))
        .await
        .unwrap();
    assert_eq!(
        relay.lost(),
        1,
        "the reply was not lost: the test proves nothing"
    );
    // Redis recorded it before the reply was lost; the ledger sent it again,
    // flagged as a resend, and the script found it in the log.
    assert!(
        matches!(
            decision,
            quota::ledger::ChargeDecision::Allowed {
                duplicate: true,
                serial: 2,
                ..
            }
        ),
        "{decision:?}"
    );
    assert_eq!(used(&ledger, "lost-reply", &[pool], T0 + S).await, [10]);
}

#[tokio::test]
async fn a_charge_sent_again_is_found_behind_later_charges() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let cost = [cost(&units_pool(3600, 1000), 3)];
    let charge_as = |id: &'static str, at: i64| {
        let (ledger, cost) = (&ledger, &cost);
        async move {
            let again = Charge {
                id: Some(id),
                ..charge("again", cost)
            };
            ledger.charge(&again, At::Fixed(at)).await.unwrap()
        }
    };
    let first = charge_as("page-1", T0).await;
    // 40 later charges put the first one three search chunks from the tail.
    for i in 0..40 {
        let id: &'static str = Box::leak(format!("other-{i}").into_boxed_str());
        assert!(charge_as(id, T0 + 1 + i).await.is_allowed());
    }
    let again = charge_as("page-1", T0 + 50).await;
    assert!(
        matches!(
            again,
            quota::ledger::ChargeDecision::Allowed {
                duplicate: true,
                ..
            }
        ),
        "{again:?}"
    );
    assert_eq!(again.serial(), 41, "{first:?} then {again:?}");
    assert_eq!(
        used(&ledger, "again", &[units_pool(3600, 1000)], T0 + 50).await,
        [41 * 3]
    );
    // Past the idempotency horizon the id is forgotten: recorded anew.
    let late = charge_as("page-1", T0 + 61 * S).await;
    assert!(
        matches!(
            late,
            quota::ledger::ChargeDecision::Allowed {
                duplicate: false,
                ..
            }
        ),
        "{late:?}"
    );
}

#[tokio::test]
async fn a_100_unit_call_takes_no_more_memory_than_a_1_unit_call() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let pool = units_pool(86_400, 1_000_000_000);
    let mut bytes = Vec::new();
    for (cred, units) in [("one", 1), ("hundred", 100)] {
        let cost = [cost(&pool, units)];
        for i in 0..1000 {
            assert!(charged(&ledger, cred, &cost, At::Fixed(T0 + i * 1000)).await);
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
async fn keys_of_an_older_build_are_refused_not_misread() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    // What a build before 2026-11-22 left: log triples, per-window fields.
    let (state, log) = (state_key("old"), log_key("old", "units"));
    server.cli(&["RPUSH", &log, "1700000000000000", "7", "1"]);
    server.cli(&["HSET", &state, "serial", "1", "units|tail", "1"]);
    let pool = units_pool(3600, 100);
    let cost = [cost(&pool, 1)];
    let e = ledger
        .charge(&charge("old", &cost), At::Fixed(T0))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("older than 2026-11-22") && e.contains("quota:{old}:*"),
        "{e}"
    );
    let e = ledger
        .usage("old", &[pool], At::Fixed(T0))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("older than"), "{e}");
    // Nothing was written.
    assert_eq!(server.cli(&["LLEN", &log]), "3");
    assert_eq!(server.cli(&["HLEN", &state]), "2");
}

#[tokio::test]
async fn a_vanished_log_is_noticed_and_the_state_rebuilt_from_it() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let pool = units_pool(60, 10);
    let cost = [cost(&pool, 4)];
    assert!(charged(&ledger, "lost", &cost, At::Fixed(T0)).await);
    assert!(charged(&ledger, "lost", &cost, At::Fixed(T0 + S)).await);
    server.cli(&["DEL", &log_key("lost", "units")]);
    // The state still counts 8 units; this call fits in neither view's favour
    // (8 + 4 > 10), so it is refused without reading the log...
    assert!(!charged(&ledger, "lost", &cost, At::Fixed(T0 + 2 * S)).await);
    // ...and once the old entries would have left, the next call notices the
    // log is not what the state says, records the loss, and recounts.
    assert!(charged(&ledger, "lost", &cost, At::Fixed(T0 + 61 * S)).await);
    assert_ne!(server.cli(&["HGET", &state_key("lost"), "log_lost"]), "");
    assert_eq!(used(&ledger, "lost", &[pool], T0 + 61 * S).await, [4]);
    assert!(charged(&ledger, "lost", &cost, At::Fixed(T0 + 62 * S)).await);
    assert!(!charged(&ledger, "lost", &cost, At::Fixed(T0 + 63 * S)).await);
}
