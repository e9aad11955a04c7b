//! What only the Redis store has to prove: scripts survive `SCRIPT FLUSH`,
//! every key carries a TTL that outlives its entries (a quiet pool's log
//! too), a call's memory does not grow with its cost, a charge whose reply
//! was lost on the wire is recorded once, and a log that vanished under its
//! state makes its pool count as spent.

use portion::ledger::{
    At, Charge, ChargeDecision, Ledger, Pool, PoolCost, RedisLedger, index_segment_key, log_key,
    log_segment_key, state_key,
};

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
    let cost = [cost(&units_pool(3600, 1000), 1)];
    // (129 calls: the log's first block of 128 is complete, so it has an index)
    for _ in 0..129 {
        assert!(charged(&ledger, "ttl", &cost, At::StoreClock).await);
    }
    let longest_ms = 3600 * 1000 + 60_000 + 3600 * 1000 / 8;
    for key in [
        state_key("ttl"),
        log_segment_key("ttl", "units", 0),
        index_segment_key("ttl", "units", 0),
    ] {
        let ttl: i64 = server.cli(&["PTTL", &key]).parse().unwrap();
        assert!(ttl > 3600 * 1000 && ttl <= longest_ms, "{key}: PTTL {ttl}");
    }
    // Charge ids ride in the log entries: no key per charge.
    let mut keys: Vec<String> = server
        .cli(&["KEYS", "portion:{ttl}:*"])
        .lines()
        .map(str::to_string)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            index_segment_key("ttl", "units", 0),
            log_segment_key("ttl", "units", 0),
            state_key("ttl")
        ]
    );
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
            portion::ledger::ChargeDecision::Allowed {
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
            portion::ledger::ChargeDecision::Allowed {
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
            portion::ledger::ChargeDecision::Allowed {
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
    // (names of one length: a key longer by a few bytes may take another
    // allocation size, which is not the call's)
    for (cred, units) in [("small", 1), ("large", 100)] {
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
        bytes.push(
            usage(log_segment_key(cred, "units", 0))
                + usage(index_segment_key(cred, "units", 0))
                + usage(state_key(cred)),
        );
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
        e.contains("older than 2026-11-24") && e.contains("portion:{old}:*"),
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
async fn a_vanished_log_counts_as_spent_until_its_longest_window_passed() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let pool = units_pool(60, 10);
    let cost = [cost(&pool, 4)];
    assert!(charged(&ledger, "lost", &cost, At::Fixed(T0)).await);
    assert!(charged(&ledger, "lost", &cost, At::Fixed(T0 + S)).await);
    server.cli(&["DEL", &log_segment_key("lost", "units", 0)]);
    // Both entries are still inside the window: their 8 units are forgotten.
    // The state alone would say "retry in a whole window"; the ledger says
    // the log is lost, and the pool spent until a window has passed.
    let d = ledger
        .charge(&charge("lost", &cost), At::Fixed(T0 + 2 * S))
        .await
        .unwrap();
    let lost = ChargeDecision::LogLost {
        at: T0 + 2 * S,
        serial: 2,
        pool: "units".into(),
        since: T0 + 2 * S,
        until: T0 + 62 * S,
    };
    assert_eq!(d, lost);
    // status says so, and counts nothing as free meanwhile.
    let u = ledger
        .usage("lost", std::slice::from_ref(&pool), At::Fixed(T0 + 3 * S))
        .await
        .unwrap();
    let l = u.pools[0].log_lost.expect("status shows the loss");
    assert_eq!((l.since, l.until), (T0 + 2 * S, T0 + 62 * S));
    assert_eq!(u.pools[0].windows[0].remaining, 0);
    // Every call within the window is refused, none recorded...
    for t in [3, 30, 61] {
        let d = ledger
            .charge(&charge("lost", &cost), At::Fixed(T0 + t * S))
            .await
            .unwrap();
        assert!(
            matches!(d, ChargeDecision::LogLost { since, .. } if since == T0 + 2 * S),
            "{d:?}"
        );
    }
    // ...and once it has passed, the pool fills again from nothing.
    assert!(charged(&ledger, "lost", &cost, At::Fixed(T0 + 62 * S)).await);
    assert!(charged(&ledger, "lost", &cost, At::Fixed(T0 + 63 * S)).await);
    assert!(!charged(&ledger, "lost", &cost, At::Fixed(T0 + 64 * S)).await);
    assert_eq!(used(&ledger, "lost", &[pool], T0 + 64 * S).await, [8]);
}

#[tokio::test]
async fn a_log_found_missing_by_status_is_reported_lost_before_any_charge() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let pool = units_pool(60, 10);
    assert!(charged(&ledger, "gone", &[cost(&pool, 4)], At::Fixed(T0)).await);
    server.cli(&["DEL", &log_segment_key("gone", "units", 0)]);
    let u = ledger
        .usage("gone", &[pool], At::Fixed(T0 + 5 * S))
        .await
        .unwrap();
    let l = u.pools[0].log_lost.expect("status notices the missing log");
    assert_eq!((l.since, l.until), (T0 + 5 * S, T0 + 65 * S));
    assert_eq!(u.pools[0].windows[0].remaining, 0);
}

#[tokio::test]
async fn a_denial_on_a_vanished_state_leaves_every_key_with_a_ttl() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let pool = units_pool(60, 8);
    let cost = [cost(&pool, 4)];
    assert!(charged(&ledger, "ttl", &cost, At::Fixed(T0)).await);
    assert!(charged(&ledger, "ttl", &cost, At::Fixed(T0 + S)).await);
    server.cli(&["DEL", &state_key("ttl")]);
    // A log without its state: where its live calls are is unknown (its
    // first segments may be gone), so the pool counts as lost, and spent;
    // the state is made anew, with a TTL, and the log starts afresh.
    let d = ledger
        .charge(&charge("ttl", &cost), At::Fixed(T0 + 2 * S))
        .await
        .unwrap();
    assert!(matches!(d, ChargeDecision::LogLost { .. }), "{d:?}");
    assert_eq!(server.cli(&["EXISTS", &state_key("ttl")]), "1");
    let ttl: i64 = server.cli(&["PTTL", &state_key("ttl")]).parse().unwrap();
    assert!(ttl > 60_000, "the state has PTTL {ttl}");
    assert_eq!(
        server.cli(&["EXISTS", &log_segment_key("ttl", "units", 0)]),
        "0"
    );
    // Once the loss is over, the pool fills from nothing; every key has a TTL.
    assert!(charged(&ledger, "ttl", &cost, At::Fixed(T0 + 63 * S)).await);
    for key in [state_key("ttl"), log_segment_key("ttl", "units", 0)] {
        let ttl: i64 = server.cli(&["PTTL", &key]).parse().unwrap();
        assert!(ttl > 60_000, "{key} has PTTL {ttl}");
    }
}

/// Let `dt_s` seconds pass for the keys' TTLs as they pass for the fixed
/// clock the charges read: each key's TTL shrinks by as much, and a key
/// whose TTL runs out is gone, as Redis would have expired it.
fn advance(server: &RedisServer, keys: &[String], dt_s: i64) {
    for key in keys {
        let ttl: i64 = server.cli(&["PTTL", key]).parse().unwrap();
        assert_ne!(ttl, -1, "{key} has no TTL");
        if ttl == -2 {
            continue;
        }
        let left = ttl - dt_s * 1000;
        if left <= 0 {
            server.cli(&["DEL", key]);
        } else {
            server.cli(&["PEXPIRE", key, &left.to_string()]);
        }
    }
}

#[tokio::test]
async fn a_quiet_pools_log_lives_as_long_as_its_entries_count() {
    // The shape of jobs/youtube.yaml: pool `units` charged every second by
    // one job, pool `search` rarely by another; windows of 60 s.
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let units = units_pool(60, 1000);
    let search = pool("search", vec![window(60, 4, 0)]);
    let keys = [
        state_key("yt"),
        log_segment_key("yt", "units", 0),
        log_segment_key("yt", "search", 0),
    ];
    let (units_cost, search_cost) = ([cost(&units, 1)], [cost(&search, 1)]);
    let search_at = [0, 75, 111, 138, 138, 138, 138];
    let mut admitted = Vec::new();
    let mut t = 0;
    for second in 0..=140 {
        advance(&server, &keys, second - t);
        t = second;
        assert!(charged(&ledger, "yt", &units_cost, At::Fixed(T0 + t * S)).await);
        for _ in search_at.iter().filter(|&&s| s == t) {
            if charged(&ledger, "yt", &search_cost, At::Fixed(T0 + t * S)).await {
                admitted.push(t);
            }
        }
        for key in &keys {
            let ttl: i64 = server.cli(&["PTTL", key]).parse().unwrap();
            assert!(ttl > 0, "{key} at {t} s: PTTL {ttl}");
        }
    }
    // The search log outlived its entries: at 138 s the window (78, 138]
    // held the call at 111, so only 3 of the 4 calls fit.
    assert_eq!(admitted, [0, 75, 111, 138, 138, 138]);
    for &at in &admitted {
        let in_window = admitted.iter().filter(|&&a| a > at - 60 && a <= at).count();
        assert!(
            in_window <= 4,
            "{in_window} search calls in the window ending {at}"
        );
    }

    // Idle, every key does expire, by Redis's own hand: bring the TTLs to
    // their last second and let Redis remove them.
    let longest = keys
        .iter()
        .map(|k| server.cli(&["PTTL", k]).parse::<i64>().unwrap())
        .max()
        .unwrap();
    assert!(
        longest > 120_000,
        "idle keys live a window and a minute: {longest}"
    );
    advance(&server, &keys, longest / 1000 - 1);
    crate::common::wait_until(
        std::time::Duration::from_secs(15),
        "the idle keys expire",
        || keys.iter().all(|k| server.cli(&["EXISTS", k]) == "0"),
    );
}

/// The index follows its log: a log that vanished takes its index with it
/// (its call numbers start again), and an index that vanished alone (an
/// evicted key) only costs speed: the log is walked call by call, with the
/// same answers, and a new index starts with the next complete block.
#[tokio::test]
async fn the_index_follows_its_log_and_its_loss_changes_no_answer() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let pool = units_pool(10, 1000);
    let one = [cost(&pool, 1)];
    let ms = 1000;
    // 300 calls, one each 50 ms.
    for i in 0..300 {
        assert!(charged(&ledger, "ix", &one, At::Fixed(T0 + i * 50 * ms)).await);
    }
    let records = |cred: &str| server.cli(&["LLEN", &index_segment_key(cred, "units", 0)]);
    assert_eq!(
        records("ix"),
        "2",
        "a record per complete block of 128 calls"
    );
    // The index alone vanishes: the window still slides exactly, walking
    // the log (2.5 s past the last call, the calls of the first 7.45 s, the
    // first 150, have left the 10 s window).
    server.cli(&["DEL", &index_segment_key("ix", "units", 0)]);
    let at = T0 + 299 * 50 * ms + 2500 * ms;
    assert_eq!(
        used(&ledger, "ix", std::slice::from_ref(&pool), at).await,
        [150]
    );
    let d = ledger
        .charge(&charge("ix", &one), At::Fixed(at))
        .await
        .unwrap();
    assert!(
        matches!(&d, ChargeDecision::Allowed { remaining, .. } if remaining[0].remaining == 1000 - 151),
        "{d:?}"
    );
    for i in 1..100 {
        assert!(charged(&ledger, "ix", &one, At::Fixed(at + i * ms)).await);
    }
    assert_eq!(
        records("ix"),
        "1",
        "a new index from the next complete block"
    );
    // The log vanishes: the index goes with it, the pool counts as spent
    // (from the charge that finds it gone: its window sums were still whole).
    server.cli(&["DEL", &log_segment_key("ix", "units", 0)]);
    let _ = ledger.charge(&charge("ix", &one), At::Fixed(at + S)).await;
    assert_eq!(records("ix"), "0");
    let d = ledger
        .charge(&charge("ix", &one), At::Fixed(at + 2 * S))
        .await
        .unwrap();
    assert!(matches!(d, ChargeDecision::LogLost { .. }), "{d:?}");
}

/// A window's sum never passes 2^53 - 1, where Lua's doubles stop counting
/// by ones (issue 23): a settle that would carry it past is not recorded,
/// and the pool counts as spent until its longest window has passed, as
/// for a lost log, instead of deciding on a rounded sum.
#[tokio::test]
async fn a_sum_that_would_pass_2_53_counts_the_pool_as_spent() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let exact = (1u64 << 53) - 1;
    let units = units_pool(15, exact);
    assert!(charged(&ledger, "big", &[cost(&units, exact - 1)], At::Fixed(T0)).await);
    let d = ledger
        .charge(&charge("big", &[cost(&units, 1)]), At::Fixed(T0 + S))
        .await
        .unwrap();
    let ChargeDecision::Allowed { receipt, .. } = d else {
        panic!("{d:?}")
    };
    // 2 units: below the cap (the budget plus one), one too many to count.
    let settled = ledger
        .settle("big", &receipt, ("units", 1, 2), At::Fixed(T0 + 2 * S))
        .await
        .unwrap();
    assert_eq!(settled, portion::ledger::Settled::Gone);
    let d = ledger
        .charge(&charge("big", &[cost(&units, 1)]), At::Fixed(T0 + 3 * S))
        .await
        .unwrap();
    let ChargeDecision::LogLost { until, .. } = d else {
        panic!("{d:?}")
    };
    assert_eq!(until, T0 + 2 * S + 15 * S);
    assert!(charged(&ledger, "big", &[cost(&units, 1)], At::Fixed(T0 + 18 * S)).await);
    assert_eq!(used(&ledger, "big", &[units], T0 + 18 * S).await, [1]);
}
