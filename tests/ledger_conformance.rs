//! The ledger conformance suite: the same tests against both stores, a real
//! `redis-server` and the embedded SQLite file. Time is driven through the
//! ledger's clock (`At::Fixed`) so every expectation is exact; one test uses
//! the store's own clock with a short window.

use std::time::Duration;

use portion::ledger::{
    At, BlockEnd, Charge, ChargeDecision, EmbeddedLedger, Ledger, LockOutcome, LogLost, PoolCost,
    RedisLedger, StoreError,
};

use crate::common::cluster::RedisCluster;
use crate::common::ledger::{S, T0, charge, cost, embedded_path, pool, used, window};
use crate::common::metered::{
    a_calendar_window_resets_at_local_midnight, a_huge_actual_leaves_every_window_exact,
    a_settle_behind_many_calls_counts_in_usage_and_retries,
    a_settle_to_zero_leaves_nothing_to_free, a_settled_cost_moves_its_entry_at_its_time,
    observe_mode_records_what_does_not_fit_and_counts_it, reserved_units_show_until_their_settle,
    the_upstreams_count_wins_downward_until_its_reset,
};
use crate::common::redis::RedisServer;
use crate::common::sentinel::RedisSentinel;
use portion::ledger::JobStore;

async fn charge_at(ledger: &impl Ledger, cred: &str, cost: &[PoolCost], at: i64) -> ChargeDecision {
    let c = Charge {
        endpoint: "videos.list",
        job: "trending",
        ..charge(cred, cost)
    };
    ledger.charge(&c, At::Fixed(at)).await.expect("charge")
}

fn remaining(d: &ChargeDecision) -> Vec<u64> {
    match d {
        ChargeDecision::Allowed { remaining, .. } => {
            remaining.iter().map(|r| r.remaining).collect()
        }
        other => panic!("expected allowed, got {other:?}"),
    }
}

fn rejection(d: &ChargeDecision) -> (String, Duration, Duration) {
    match d {
        ChargeDecision::Rejected {
            pool,
            per,
            retry_after,
            ..
        } => (pool.clone(), *per, *retry_after),
        other => panic!("expected rejected, got {other:?}"),
    }
}

async fn admits_up_to_budget_then_frees_exactly(ledger: impl Ledger) {
    // limit 10, headroom 2: the budget is 8 in any 10 s.
    let units = pool("units", vec![window(10, 10, 2)]);
    let c = [cost(&units, 1)];
    for i in 0..8 {
        let d = charge_at(&ledger, "cred", &c, T0 + i * S).await;
        assert_eq!(remaining(&d), vec![7 - i as u64], "charge {i}");
    }
    // The 9th unit does not fit; the first entry (t = T0) leaves at T0 + 10 s.
    let d = charge_at(&ledger, "cred", &c, T0 + 7 * S + S / 2).await;
    let (p, per, retry) = rejection(&d);
    assert_eq!((p.as_str(), per), ("units", Duration::from_secs(10)));
    assert_eq!(
        retry,
        Duration::from_micros((10 * S - 7 * S - S / 2) as u64)
    );
    // One microsecond before that it still does not fit...
    let d = charge_at(&ledger, "cred", &c, T0 + 10 * S - 1).await;
    assert_eq!(rejection(&d).2, Duration::from_micros(1));
    // ...and at the reported time it does.
    let d = charge_at(&ledger, "cred", &c, T0 + 10 * S).await;
    assert_eq!(remaining(&d), vec![0]);
    assert_eq!(used(&ledger, "cred", &[units], T0 + 10 * S).await, vec![8]);
}

async fn weighted_costs(ledger: impl Ledger) {
    let units = pool("units", vec![window(60, 100, 0)]);
    for (i, units_spent) in [30, 30, 30].into_iter().enumerate() {
        let d = charge_at(
            &ledger,
            "w",
            &[cost(&units, units_spent)],
            T0 + i as i64 * S,
        )
        .await;
        assert!(d.is_allowed());
    }
    // 90 used: 20 more does not fit until the first 30 leave at T0 + 60 s.
    let d = charge_at(&ledger, "w", &[cost(&units, 20)], T0 + 5 * S).await;
    assert_eq!(rejection(&d).2, Duration::from_secs(55));
    // 10 fits exactly.
    let d = charge_at(&ledger, "w", &[cost(&units, 10)], T0 + 5 * S).await;
    assert_eq!(remaining(&d), vec![0]);
    // A 40-unit call needs the first two entries gone: T0 + 1 s + 60 s.
    let d = charge_at(&ledger, "w", &[cost(&units, 40)], T0 + 6 * S).await;
    assert_eq!(rejection(&d).2, Duration::from_secs(55));
    let d = charge_at(&ledger, "w", &[cost(&units, 40)], T0 + 60 * S).await;
    assert_eq!(rejection(&d).2, Duration::from_secs(1));
}

async fn tightest_window_of_a_pool_rejects(ledger: impl Ledger) {
    let units = pool("units", vec![window(3600, 100, 0), window(1, 10, 0)]);
    let d = charge_at(&ledger, "tw", &[cost(&units, 10)], T0).await;
    assert_eq!(remaining(&d), vec![90, 0]);
    let d = charge_at(&ledger, "tw", &[cost(&units, 1)], T0 + S / 2).await;
    let (_, per, retry) = rejection(&d);
    assert_eq!(
        (per, retry),
        (Duration::from_secs(1), Duration::from_millis(500))
    );
    let d = charge_at(&ledger, "tw", &[cost(&units, 10)], T0 + S).await;
    assert_eq!(remaining(&d), vec![80, 0]);
}

async fn a_window_added_later_counts_what_the_log_holds(ledger: impl Ledger) {
    let before = pool("units", vec![window(60, 100, 0)]);
    for k in 0..3 {
        let d = charge_at(&ledger, "aw", &[cost(&before, 2)], T0 + 10 * k * S).await;
        assert!(d.is_allowed(), "{d:?}");
    }
    // The configuration gains a 15 s window: at T0+25 s it holds the entry of
    // T0+20 s (2 units) and the one of T0+10 s has left it.
    let after = pool("units", vec![window(60, 100, 0), window(15, 3, 0)]);
    let d = charge_at(&ledger, "aw", &[cost(&after, 2)], T0 + 25 * S).await;
    assert_eq!(
        rejection(&d),
        (
            "units".into(),
            Duration::from_secs(15),
            Duration::from_secs(10)
        )
    );
    let d = charge_at(&ledger, "aw", &[cost(&after, 1)], T0 + 25 * S).await;
    assert_eq!(remaining(&d), vec![93, 0]);
    // And loses it again: the 60 s window still counts every call.
    let d = charge_at(&ledger, "aw", &[cost(&before, 1)], T0 + 26 * S).await;
    assert_eq!(remaining(&d), vec![92]);
}

async fn a_limit_lowered_below_what_is_used_refuses_until_enough_left(ledger: impl Ledger) {
    let before = pool("units", vec![window(60, 100, 0)]);
    let d = charge_at(&ledger, "low", &[cost(&before, 30)], T0).await;
    assert_eq!(remaining(&d), vec![70]);
    let d = charge_at(&ledger, "low", &[cost(&before, 30)], T0 + 10 * S).await;
    assert_eq!(remaining(&d), vec![40]);
    // The limit becomes 40 while the window holds 60: a call of 1 needs 21
    // units gone, which the entry of T0 (30 units) frees at T0 + 60 s.
    let after = pool("units", vec![window(60, 40, 0)]);
    let d = charge_at(&ledger, "low", &[cost(&after, 1)], T0 + 20 * S).await;
    assert_eq!(
        rejection(&d),
        (
            "units".into(),
            Duration::from_secs(60),
            Duration::from_secs(40)
        )
    );
    let u = ledger
        .usage("low", std::slice::from_ref(&after), At::Fixed(T0 + 20 * S))
        .await
        .unwrap();
    let w = &u.pools[0].windows[0];
    assert_eq!((w.budget, w.used, w.remaining), (40, 60, 0));
    let d = charge_at(&ledger, "low", &[cost(&after, 1)], T0 + 60 * S - 1).await;
    assert_eq!(rejection(&d).2, Duration::from_micros(1));
    let d = charge_at(&ledger, "low", &[cost(&after, 1)], T0 + 60 * S).await;
    assert_eq!(remaining(&d), vec![9]);
    // 31 held: 10 more needs the entry of T0 + 10 s gone.
    let d = charge_at(&ledger, "low", &[cost(&after, 10)], T0 + 60 * S).await;
    assert_eq!(rejection(&d).2, Duration::from_secs(10));
    // Headroom raised instead (budget 100 - 66 = 34): 31 held, 3 fit, 4 do not.
    let headroom = pool("units", vec![window(60, 100, 66)]);
    let d = charge_at(&ledger, "low", &[cost(&headroom, 4)], T0 + 61 * S).await;
    assert_eq!(rejection(&d).2, Duration::from_secs(9));
    let d = charge_at(&ledger, "low", &[cost(&headroom, 3)], T0 + 61 * S).await;
    assert_eq!(remaining(&d), vec![0]);
    assert_eq!(used(&ledger, "low", &[before], T0 + 61 * S).await, vec![34]);

    // The case the issue found the stores disagreeing on: 10 s / 100, 5 units
    // at t = 0 and t = 15, then 30 s / 12: at t = 20 both entries are inside
    // the 30 s window (10 + 5 > 12), and the first leaves it at t = 30.
    let short = pool("units", vec![window(10, 100, 0)]);
    for t in [0, 15] {
        let d = charge_at(&ledger, "grown", &[cost(&short, 5)], T0 + t * S).await;
        assert!(d.is_allowed(), "{d:?}");
    }
    let long = pool("units", vec![window(30, 12, 0)]);
    let d = charge_at(&ledger, "grown", &[cost(&long, 5)], T0 + 20 * S).await;
    assert_eq!(
        rejection(&d),
        (
            "units".into(),
            Duration::from_secs(30),
            Duration::from_secs(10)
        )
    );
}

async fn a_store_behind_the_callers_serial_lost_its_log(ledger: impl Ledger) {
    // Longest windows: units 600 s, search 30 s.
    let units = pool("units", vec![window(60, 10, 0), window(600, 100, 0)]);
    let search = pool("search", vec![window(30, 5, 0)]);
    let pools = [units.clone(), search.clone()];
    let d = charge_at(&ledger, "lost", &[cost(&units, 1)], T0).await;
    assert_eq!(d.serial(), 1);
    // The caller has seen this credential reach 5 charges; the store holds 1.
    let both = [cost(&units, 1), cost(&search, 1)];
    let ahead = Charge {
        seen_serial: 5,
        ..charge("lost", &both)
    };
    let now = T0 + S;
    let d = ledger.charge(&ahead, At::Fixed(now)).await.unwrap();
    assert_eq!(
        d,
        ChargeDecision::LogLost {
            at: now,
            serial: 1,
            pool: "units".into(),
            since: now,
            until: now + 600 * S,
        }
    );
    let lost = |since: i64, longest: i64| {
        Some(LogLost {
            since,
            until: since + longest * S,
        })
    };
    let u = ledger
        .usage("lost", &pools, At::Fixed(now + S))
        .await
        .unwrap();
    assert_eq!(u.charges_recorded, 1, "nothing was recorded");
    assert_eq!(u.pools[0].log_lost, lost(now, 600));
    assert_eq!(u.pools[1].log_lost, lost(now, 30));
    for w in u.pools.iter().flat_map(|p| &p.windows) {
        assert_eq!(w.remaining, 0, "a lost pool counts as spent: {w:?}");
    }

    // Every pool is lost until its own longest window has passed, whoever
    // charges it (a caller that saw nothing too).
    for at in [now + S, now + 30 * S - 1] {
        match charge_at(&ledger, "lost", &[cost(&search, 1)], at).await {
            ChargeDecision::LogLost {
                pool, since, until, ..
            } => assert_eq!((pool.as_str(), since, until), ("search", now, now + 30 * S)),
            other => panic!("search at {}: expected LogLost, got {other:?}", at - T0),
        }
    }
    let d = charge_at(&ledger, "lost", &[cost(&search, 1)], now + 30 * S).await;
    assert_eq!(remaining(&d), vec![4], "search, counted from nothing");
    for at in [now + 30 * S, now + 300 * S, now + 600 * S - 1] {
        match charge_at(&ledger, "lost", &[cost(&units, 1)], at).await {
            ChargeDecision::LogLost {
                pool, since, until, ..
            } => assert_eq!((pool.as_str(), since, until), ("units", now, now + 600 * S)),
            other => panic!("units at {}: expected LogLost, got {other:?}", at - T0),
        }
    }
    let u = ledger
        .usage("lost", &pools, At::Fixed(now + 600 * S - 1))
        .await
        .unwrap();
    assert_eq!(u.pools[0].log_lost, lost(now, 600));
    assert_eq!(u.pools[1].log_lost, None, "search's loss is over");

    // After it: allowed, and counted from nothing.
    let d = charge_at(&ledger, "lost", &[cost(&units, 3)], now + 600 * S).await;
    assert_eq!(remaining(&d), vec![7, 97]);
    let u = ledger
        .usage("lost", &pools, At::Fixed(now + 600 * S))
        .await
        .unwrap();
    assert_eq!(u.pools[0].log_lost, None);
    assert_eq!(u.charges_recorded, 3);
    assert_eq!(
        used(&ledger, "lost", &pools, now + 600 * S).await,
        vec![3, 3, 0]
    );

    // A loss that is over stays over, even for a window lengthened later.
    let longer = pool("units", vec![window(60, 10, 0), window(1200, 100, 0)]);
    let d = charge_at(&ledger, "lost", &[cost(&longer, 1)], now + 601 * S).await;
    assert_eq!(remaining(&d), vec![6, 96], "{d:?}");
    let u = ledger
        .usage("lost", &[longer], At::Fixed(now + 601 * S))
        .await
        .unwrap();
    assert_eq!(u.pools[0].log_lost, None);
}

async fn several_pools_are_all_or_nothing(ledger: impl Ledger) {
    let units = pool("units", vec![window(86_400, 10_000, 500)]);
    let search = pool("search", vec![window(86_400, 100, 5)]);
    let both = [cost(&units, 1), cost(&search, 95)];
    let d = charge_at(&ledger, "ap", &both, T0).await;
    assert_eq!(remaining(&d), vec![9_499, 0]);
    // search is spent: a call that needs both is refused, and units stays untouched.
    let d = charge_at(&ledger, "ap", &[cost(&units, 50), cost(&search, 1)], T0 + S).await;
    assert_eq!(rejection(&d).0, "search");
    let pools = [units.clone(), search.clone()];
    assert_eq!(used(&ledger, "ap", &pools, T0 + S).await, vec![1, 95]);
    // units alone still fits.
    let d = charge_at(&ledger, "ap", &[cost(&units, 50)], T0 + S).await;
    assert_eq!(remaining(&d), vec![9_449]);
}

async fn boundary_burst_admits_one_budget_not_two(ledger: impl Ledger) {
    // A fixed-window counter resets at T0 + 60 s and would admit 2L around it.
    let l = 10;
    let units = pool("units", vec![window(60, l, 0)]);
    let mut admitted = 0;
    for i in 0..l as i64 {
        let before = T0 + 59 * S + i * 10_000; // just before the boundary
        let after = T0 + 60 * S + S / 10 + i * 10_000; // just after
        for at in [before, after] {
            if charge_at(&ledger, "bb", &[cost(&units, 1)], at)
                .await
                .is_allowed()
            {
                admitted += 1;
            }
        }
    }
    assert_eq!(admitted, l);
}

async fn repeated_charge_id_is_counted_once(ledger: impl Ledger) {
    let units = pool("units", vec![window(60, 100, 0)]);
    let c = [cost(&units, 7)];
    let charge = Charge {
        id: Some("charge-42"),
        ..charge("idem", &c)
    };
    let first = ledger.charge(&charge, At::Fixed(T0)).await.unwrap();
    let second = ledger.charge(&charge, At::Fixed(T0 + 1)).await.unwrap();
    match (&first, &second) {
        (
            ChargeDecision::Allowed {
                serial: s1,
                duplicate: false,
                ..
            },
            ChargeDecision::Allowed {
                serial: s2,
                duplicate: true,
                ..
            },
        ) => assert_eq!(s1, s2),
        other => panic!("expected one record and one duplicate, got {other:?}"),
    }
    assert_eq!(remaining(&second), vec![93]);
    assert_eq!(used(&ledger, "idem", &[units], T0 + 2).await, vec![7]);
}

async fn blocked_credential_rejects_until_its_time(ledger: impl Ledger) {
    let units = pool("units", vec![window(60, 100, 0)]);
    let c = [cost(&units, 1)];
    assert!(charge_at(&ledger, "blk", &c, T0).await.is_allowed());
    let until = ledger
        .block("blk", T0 + 100 * S, "quotaExceeded", At::Fixed(T0 + S))
        .await
        .unwrap();
    assert_eq!(until, T0 + 100 * S);
    // A shorter block does not shorten it.
    let until = ledger
        .block("blk", T0 + 50 * S, "again", At::Fixed(T0 + 2 * S))
        .await
        .unwrap();
    assert_eq!(until, T0 + 100 * S);
    match charge_at(&ledger, "blk", &c, T0 + 99 * S).await {
        ChargeDecision::Blocked { until, reason, .. } => {
            assert_eq!((until, reason.as_str()), (T0 + 100 * S, "quotaExceeded"))
        }
        other => panic!("expected blocked, got {other:?}"),
    }
    let u = ledger
        .usage("blk", std::slice::from_ref(&units), At::Fixed(T0 + 99 * S))
        .await
        .unwrap();
    assert_eq!(u.blocked_until, Some(T0 + 100 * S));
    assert!(
        charge_at(&ledger, "blk", &c, T0 + 100 * S)
            .await
            .is_allowed()
    );
    let u = ledger
        .usage("blk", &[units], At::Fixed(T0 + 100 * S))
        .await
        .unwrap();
    assert_eq!(u.blocked_until, None);
}

/// A backoff block (a bare 429, issue 23): the shortest window, as long
/// again while it is in force, twice as long within the longest window
/// after its end, never past the longest, the shortest again later, and
/// after `unblock`; both stores by the same rule.
async fn a_backoff_block_doubles_on_repeats_up_to_the_longest(ledger: impl Ledger) {
    let backoff = BlockEnd::Backoff {
        shortest: Duration::from_secs(1),
        longest: Duration::from_secs(4),
    };
    let ms = 1000;
    for (at, until) in [
        (T0, T0 + S),                    // the shortest
        (T0 + 500 * ms, T0 + 1500 * ms), // in force: as long again
        (T0 + 2 * S, T0 + 4 * S),        // 0.5 s after its end: twice
        (T0 + 8 * S, T0 + 12 * S),       // 4 s after: twice again
        (T0 + 16 * S, T0 + 20 * S),      // never past the longest
        (T0 + 30 * S, T0 + 31 * S),      // 10 s after: the shortest
    ] {
        let got = ledger
            .block("bo", backoff, "too many requests", At::Fixed(at))
            .await
            .unwrap();
        assert_eq!(got - T0, until - T0, "a backoff at {}", at - T0);
    }
    ledger.unblock("bo").await.unwrap();
    let got = ledger
        .block("bo", backoff, "too many requests", At::Fixed(T0 + 32 * S))
        .await
        .unwrap();
    assert_eq!(got, T0 + 33 * S, "unblock forgets the repeats");
}

async fn cost_above_budget_is_a_configuration_error(ledger: impl Ledger) {
    let units = pool("units", vec![window(60, 100, 10)]);
    let err = ledger
        .charge(&charge("big", &[cost(&units, 91)]), At::Fixed(T0))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::CostExceedsBudget {
                budget: 90,
                units: 91,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(used(&ledger, "big", &[units], T0).await, vec![0]);
}

async fn usage_reports_who_spent_and_when_units_free(ledger: impl Ledger) {
    let units = pool("units", vec![window(100, 50, 5), window(10, 20, 0)]);
    let c = [cost(&units, 3)];
    for (at, endpoint, job) in [
        (T0, "videos.list", "a"),
        (T0 + 50 * S, "search.list", "b"),
        (T0 + 95 * S, "videos.list", "b"),
    ] {
        let by = Charge {
            endpoint,
            job,
            ..charge("use", &c)
        };
        let d = ledger.charge(&by, At::Fixed(at)).await.unwrap();
        assert!(d.is_allowed());
    }
    let u = ledger
        .usage("use", &[units], At::Fixed(T0 + 99 * S))
        .await
        .unwrap();
    assert_eq!(u.charges_recorded, 3);
    let long = &u.pools[0].windows[0];
    assert_eq!((long.budget, long.used, long.remaining), (45, 9, 36));
    assert_eq!(long.next_free_at, Some(T0 + 100 * S));
    assert_eq!(long.fully_free_at, Some(T0 + 195 * S));
    assert_eq!(long.by_endpoint["videos.list"], 6);
    assert_eq!(long.by_job["b"], 6);
    assert_eq!(long.buckets.iter().sum::<u64>(), 9);
    let short = &u.pools[0].windows[1];
    assert_eq!((short.used, short.next_free_at), (3, Some(T0 + 105 * S)));
}

async fn store_clock_frees_units_when_it_said(ledger: impl Ledger) {
    // The real clock of the store, a one-second window: waiting the reported
    // retry time is exactly what a caller does, so it must then fit.
    let units = pool("units", vec![window(1, 3, 0)]);
    let c = [cost(&units, 1)];
    let charge = charge("clock", &c);
    for _ in 0..3 {
        assert!(
            ledger
                .charge(&charge, At::StoreClock)
                .await
                .unwrap()
                .is_allowed()
        );
    }
    let d = ledger.charge(&charge, At::StoreClock).await.unwrap();
    let retry = rejection(&d).2;
    assert!(retry <= Duration::from_secs(1), "retry {retry:?}");
    tokio::time::sleep(retry).await;
    let d = ledger.charge(&charge, At::StoreClock).await.unwrap();
    assert!(d.is_allowed(), "after the reported retry time: {d:?}");
}

async fn clock_never_runs_backwards(ledger: impl Ledger) {
    let units = pool("units", vec![window(10, 2, 0)]);
    let c = [cost(&units, 1)];
    assert!(
        charge_at(&ledger, "back", &c, T0 + 5 * S)
            .await
            .is_allowed()
    );
    // A reading from the past is treated as the newest entry's time.
    let d = charge_at(&ledger, "back", &c, T0).await;
    assert_eq!(d.at(), T0 + 5 * S);
    let d = charge_at(&ledger, "back", &c, T0).await;
    assert_eq!(rejection(&d).2, Duration::from_secs(10));
}

async fn run_lock_is_exclusive_renewable_and_expires(ledger: impl JobStore) {
    let ttl = Duration::from_secs(5);
    assert_eq!(
        ledger.take_lock("j", "host-a 1", ttl).await.unwrap(),
        LockOutcome::Held
    );
    match ledger.take_lock("j", "host-b 2", ttl).await.unwrap() {
        LockOutcome::Busy { holder, expires_in } => {
            assert_eq!(holder, "host-a 1");
            assert!(
                expires_in <= ttl && expires_in > Duration::ZERO,
                "{expires_in:?}"
            );
        }
        other => panic!("second taker got {other:?}"),
    }
    // Another job's lock is independent.
    assert_eq!(
        ledger.take_lock("k", "host-b 2", ttl).await.unwrap(),
        LockOutcome::Held
    );
    assert!(ledger.renew_lock("j", "host-a 1", ttl).await.unwrap());
    assert!(!ledger.renew_lock("j", "host-b 2", ttl).await.unwrap());
    assert!(!ledger.release_lock("j", "host-b 2").await.unwrap());
    assert!(ledger.release_lock("j", "host-a 1").await.unwrap());
    assert!(
        !ledger.renew_lock("j", "host-a 1", ttl).await.unwrap(),
        "a released lock cannot be renewed"
    );

    // A lock nobody renews expires on the store's clock, and its old holder
    // learns that it lost it.
    let short = Duration::from_millis(300);
    assert_eq!(
        ledger.take_lock("j", "host-b 2", short).await.unwrap(),
        LockOutcome::Held
    );
    assert!(matches!(
        ledger.take_lock("j", "host-a 1", ttl).await.unwrap(),
        LockOutcome::Busy { .. }
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if ledger.take_lock("j", "host-a 1", ttl).await.unwrap() == LockOutcome::Held {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lock never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!ledger.renew_lock("j", "host-b 2", short).await.unwrap());
}

async fn cursor_is_saved_per_job(ledger: impl JobStore) {
    assert_eq!(ledger.load_cursor("j").await.unwrap(), None);
    ledger.save_cursor("j", r#"{"region":"DE"}"#).await.unwrap();
    ledger.save_cursor("k", r#"{"region":"US"}"#).await.unwrap();
    ledger.save_cursor("j", r#"{"region":"FR"}"#).await.unwrap();
    assert_eq!(
        ledger.load_cursor("j").await.unwrap().as_deref(),
        Some(r#"{"region":"FR"}"#)
    );
    assert_eq!(
        ledger.load_cursor("k").await.unwrap().as_deref(),
        Some(r#"{"region":"US"}"#)
    );
}

async fn a_jobs_map_keeps_the_first_value_of_each_field(ledger: impl JobStore) {
    assert_eq!(ledger.map_len("j:seen").await.unwrap(), 0);
    assert!(ledger.map_read("j:seen").await.unwrap().is_empty());
    // 3,000 fields: spread over many buckets in Redis.
    let first: Vec<(String, String)> = (0..3000)
        .map(|i| (format!("k{i}"), format!("line {i}")))
        .collect();
    assert_eq!(
        ledger.map_put_new("j:seen", &first).await.unwrap(),
        first.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>()
    );
    // A field set again keeps its first value; a new one takes its own;
    // another map is another map.
    let again = vec![
        ("k7".to_string(), "line 9000".to_string()),
        ("new".to_string(), "line 9001".to_string()),
    ];
    assert_eq!(
        ledger.map_put_new("j:seen", &again).await.unwrap(),
        vec!["line 7".to_string(), "line 9001".to_string()]
    );
    ledger
        .map_put("k:seen", &[("k7".into(), "other".into())])
        .await
        .unwrap();
    assert_eq!(ledger.map_len("j:seen").await.unwrap(), 3001);
    assert_eq!(ledger.map_len("k:seen").await.unwrap(), 1);
    // map_put replaces; map_read gives every field once, by field.
    ledger
        .map_put("j:seen", &[("k7".into(), "replaced".into())])
        .await
        .unwrap();
    let all = ledger.map_read("j:seen").await.unwrap();
    assert_eq!(all.len(), 3001);
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
    assert!(all.contains(&("k7".to_string(), "replaced".to_string())));
    assert!(all.contains(&("k2999".to_string(), "line 2999".to_string())));
    // map_get: the asked fields' values in the asked order, a field the
    // map does not hold as None, another map's field not taken for it.
    let asked: Vec<String> = ["k2999", "absent", "k7", "k0", "k2999"]
        .map(String::from)
        .to_vec();
    assert_eq!(
        ledger.map_get("j:seen", &asked).await.unwrap(),
        vec![
            Some("line 2999".to_string()),
            None,
            Some("replaced".to_string()),
            Some("line 0".to_string()),
            Some("line 2999".to_string()),
        ]
    );
    assert_eq!(
        ledger.map_get("j:seen", &[]).await.unwrap(),
        Vec::<Option<String>>::new()
    );
    assert_eq!(
        ledger.map_get("nothing:here", &asked[..2]).await.unwrap(),
        vec![None, None]
    );
    // A part of a long map: fields 1000..3000 in one call.
    let part: Vec<String> = (1000..3000).map(|i| format!("k{i}")).collect();
    let got = ledger.map_get("j:seen", &part).await.unwrap();
    assert!(
        got.iter()
            .enumerate()
            .all(|(i, v)| v.as_deref() == Some(format!("line {}", i + 1000).as_str()))
    );
    ledger.map_forget("j:seen").await.unwrap();
    assert_eq!(ledger.map_len("j:seen").await.unwrap(), 0);
    assert_eq!(
        ledger.map_read("k:seen").await.unwrap(),
        vec![("k7".to_string(), "other".to_string())]
    );
}

/// A burst that fills a window (6,000 units in some 2 s, as a run with
/// requests in flight spends them) frees one unit at a time, a window's
/// length after each was spent: at the first's time one more fits, and
/// the next charge is told to retry when the second leaves, not later.
async fn a_burst_frees_one_unit_at_a_time(ledger: impl Ledger) {
    let units = pool("units", vec![window(60, 6000, 0)]);
    let c = [cost(&units, 1)];
    const GAP: i64 = 366; // µs between two charges of the burst
    for i in 0..6000 {
        let d = charge_at(&ledger, "cred", &c, T0 + i * GAP).await;
        assert!(
            matches!(d, ChargeDecision::Allowed { .. }),
            "charge {i}: {d:?}"
        );
    }
    let d = charge_at(&ledger, "cred", &c, T0 + 60 * S - 1).await;
    assert_eq!(rejection(&d).2, Duration::from_micros(1));
    let d = charge_at(&ledger, "cred", &c, T0 + 60 * S).await;
    assert_eq!(remaining(&d), vec![0]);
    let d = charge_at(&ledger, "cred", &c, T0 + 60 * S + 1).await;
    assert_eq!(
        rejection(&d).2,
        Duration::from_micros((GAP - 1) as u64),
        "the second unit of the burst leaves {GAP} µs after the first"
    );
}

macro_rules! conformance {
    ($store:ident, $make:expr) => {
        mod $store {
            use super::*;
            conformance!(@tests $make;
                admits_up_to_budget_then_frees_exactly,
                a_burst_frees_one_unit_at_a_time,
                weighted_costs,
                tightest_window_of_a_pool_rejects,
                a_window_added_later_counts_what_the_log_holds,
                a_limit_lowered_below_what_is_used_refuses_until_enough_left,
                a_store_behind_the_callers_serial_lost_its_log,
                several_pools_are_all_or_nothing,
                boundary_burst_admits_one_budget_not_two,
                repeated_charge_id_is_counted_once,
                blocked_credential_rejects_until_its_time,
                a_backoff_block_doubles_on_repeats_up_to_the_longest,
                cost_above_budget_is_a_configuration_error,
                usage_reports_who_spent_and_when_units_free,
                store_clock_frees_units_when_it_said,
                clock_never_runs_backwards,
                run_lock_is_exclusive_renewable_and_expires,
                cursor_is_saved_per_job,
                a_jobs_map_keeps_the_first_value_of_each_field,
                a_settled_cost_moves_its_entry_at_its_time,
                a_settle_behind_many_calls_counts_in_usage_and_retries,
                the_upstreams_count_wins_downward_until_its_reset,
                observe_mode_records_what_does_not_fit_and_counts_it,
                a_calendar_window_resets_at_local_midnight,
                reserved_units_show_until_their_settle,
                a_settle_to_zero_leaves_nothing_to_free,
                a_huge_actual_leaves_every_window_exact,
            );
        }
    };
    (@tests $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                #[allow(unused_variables)]
                let (ledger, guard) = $make;
                super::$name(ledger).await;
            }
        )*
    };
}

conformance!(redis, {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.expect("connect");
    (ledger, Box::new(server) as Box<dyn std::any::Any>)
});

conformance!(embedded, {
    let dir = tempfile::tempdir().unwrap();
    let ledger = EmbeddedLedger::open(&embedded_path(&dir)).expect("open");
    (ledger, Box::new(dir) as Box<dyn std::any::Any>)
});

/// The whole suite, one behaviour after another, on one shared store of a
/// topology that is slow to set up (a Cluster, a Sentinel group), emptied
/// between behaviours.
macro_rules! conformance_on_shared {
    ($name:ident, $fixture:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let store = $fixture;
            conformance_on_shared!(@run store;
                admits_up_to_budget_then_frees_exactly,
                weighted_costs,
                tightest_window_of_a_pool_rejects,
                a_window_added_later_counts_what_the_log_holds,
                a_limit_lowered_below_what_is_used_refuses_until_enough_left,
                a_store_behind_the_callers_serial_lost_its_log,
                several_pools_are_all_or_nothing,
                boundary_burst_admits_one_budget_not_two,
                repeated_charge_id_is_counted_once,
                blocked_credential_rejects_until_its_time,
                a_backoff_block_doubles_on_repeats_up_to_the_longest,
                cost_above_budget_is_a_configuration_error,
                usage_reports_who_spent_and_when_units_free,
                store_clock_frees_units_when_it_said,
                clock_never_runs_backwards,
                run_lock_is_exclusive_renewable_and_expires,
                cursor_is_saved_per_job,
                a_jobs_map_keeps_the_first_value_of_each_field,
                a_settled_cost_moves_its_entry_at_its_time,
                a_settle_behind_many_calls_counts_in_usage_and_retries,
                the_upstreams_count_wins_downward_until_its_reset,
                observe_mode_records_what_does_not_fit_and_counts_it,
                a_calendar_window_resets_at_local_midnight,
                reserved_units_show_until_their_settle,
                a_settle_to_zero_leaves_nothing_to_free,
                a_huge_actual_leaves_every_window_exact,
            );
        }
    };
    (@run $store:ident; $($f:ident),* $(,)?) => {
        $(
            $store.flush();
            let ledger = RedisLedger::connect(&$store.url()).await.expect("connect");
            $f(ledger).await;
        )*
    };
}

conformance_on_shared!(cluster_whole_suite, RedisCluster::start());
conformance_on_shared!(sentinel_whole_suite, RedisSentinel::start());

/// The charge script's own guard behind the Rust one (`check_fits` always
/// refuses first, so only a direct EVAL reaches it): a cost above a window's
/// budget raises COST_EXCEEDS_BUDGET naming the pool, and writes nothing,
/// neither on a credential the store has never seen nor on one it holds.
#[test]
fn the_charge_script_refuses_a_cost_above_a_budget_by_itself_and_writes_nothing() {
    let charge_lua = portion::ledger::script_source("charge").unwrap();
    let server = RedisServer::start();
    let units = pool("units", vec![window(60, 10, 0), window(3600, 100, 0)]);
    let search = pool("search", vec![window(60, 5, 0)]);
    // A credential with state, logs and expiries, written by the ledger.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ledger = RedisLedger::connect(&server.url()).await.expect("connect");
        let both = [cost(&units, 1), cost(&search, 1)];
        let d = charge_at(&ledger, "held", &both, T0).await;
        assert!(d.is_allowed(), "{d:?}");
    });

    let mut con = ::redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    // EVAL charge.lua with KEYS and ARGV as its header documents them.
    let mut eval = |credential: &str, costs: &[(&portion::ledger::Pool, u64)]| {
        let mut cmd = ::redis::cmd("EVAL");
        cmd.arg(charge_lua)
            .arg(1 + 2 * costs.len())
            .arg(portion::ledger::state_key(credential));
        for (p, _) in costs {
            cmd.arg(portion::ledger::log_key(credential, &p.name));
        }
        for (p, _) in costs {
            cmd.arg(portion::ledger::index_key(credential, &p.name));
        }
        cmd.arg(T0 + S) // now
            .arg(42) // charge id
            .arg("0") // not a resend
            .arg(portion::ledger::IDEMPOTENCY_HORIZON.as_micros() as u64)
            .arg("tag:videos.list\ttrending")
            .arg(0) // seen serial
            .arg(costs.len());
        for (p, _) in costs {
            cmd.arg(format!("pool:{}", p.name));
        }
        for (p, units) in costs {
            cmd.arg(*units).arg(p.windows.len());
            for w in &p.windows {
                cmd.arg(w.per.as_micros() as u64).arg(w.budget());
            }
        }
        cmd.query::<::redis::Value>(&mut con)
    };
    // Every key with its contents and absolute expiry (PEXPIRETIME). (Not
    // DUMP: a hash's field order may change as Redis rehashes it.)
    let snapshot = || {
        let mut con = ::redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let mut keys: Vec<String> = ::redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
        keys.sort();
        keys.into_iter()
            .map(|k| {
                let kind: String = ::redis::cmd("TYPE").arg(&k).query(&mut con).unwrap();
                let mut contents: Vec<Vec<u8>> = match kind.as_str() {
                    "hash" => ::redis::cmd("HGETALL").arg(&k).query(&mut con).unwrap(),
                    "list" => ::redis::cmd("LRANGE")
                        .arg(&k)
                        .arg(0)
                        .arg(-1)
                        .query(&mut con)
                        .unwrap(),
                    other => panic!("{k} is a {other}"),
                };
                if kind == "hash" {
                    let mut pairs: Vec<Vec<u8>> = contents.chunks(2).map(|p| p.concat()).collect();
                    pairs.sort();
                    contents = pairs;
                }
                let expiry: i64 = ::redis::cmd("PEXPIRETIME").arg(&k).query(&mut con).unwrap();
                (k, contents, expiry)
            })
            .collect::<Vec<_>>()
    };

    let before = snapshot();
    assert_eq!(before.len(), 3, "state and two logs: {before:?}");
    assert!(before.iter().all(|(_, _, expiry)| *expiry > 0));
    // The first pool fits, the second's cost is above its budget of 5.
    let err = eval("held", &[(&units, 1), (&search, 6)]).unwrap_err();
    assert_eq!(
        (err.code(), err.detail()),
        (Some("COST_EXCEEDS_BUDGET"), Some("pool 2")),
        "{err:?}"
    );
    // Above the budget of one window of the first pool, on a new credential.
    let err = eval("new", &[(&units, 11)]).unwrap_err();
    assert_eq!(
        (err.code(), err.detail()),
        (Some("COST_EXCEEDS_BUDGET"), Some("pool 1")),
        "{err:?}"
    );
    assert_eq!(snapshot(), before, "nothing was written");
    // The same EVAL within the budgets is recorded (the call shape is right).
    let fits = eval("held", &[(&units, 1), (&search, 4)]).unwrap();
    assert!(
        matches!(&fits, ::redis::Value::Array(r) if r.first() == Some(&::redis::Value::Int(1))),
        "{fits:?}"
    );
    assert_ne!(snapshot(), before);
}

/// The embedded store's busy timeout running out is an outage, not a broken
/// store: another connection holds the file's write lock (`BEGIN
/// IMMEDIATE`) for longer than the timeout (10 s), and the charge fails with
/// `StoreError::Unavailable` (so the endpoint's fail_closed/fail_open policy
/// applies) after waiting that long, having written nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_store_locked_past_its_busy_timeout_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let path = embedded_path(&dir);
    let ledger = EmbeddedLedger::open(&path).expect("open");
    let units = pool("units", vec![window(60, 10, 0)]);
    let c = [cost(&units, 1)];
    assert!(charge_at(&ledger, "busy", &c, T0).await.is_allowed());

    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = std::time::Instant::now();
    let err = ledger
        .charge(&charge("busy", &c), At::Fixed(T0 + S))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    eprintln!("a charge on a locked embedded store failed after {waited:?}");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert!(
        waited >= Duration::from_millis(9_500) && waited < Duration::from_secs(30),
        "the busy timeout (10 s) ran out, no sooner: {waited:?}"
    );
    holder.execute_batch("COMMIT").unwrap();

    // Nothing was written; with the lock free, the store answers at once.
    assert_eq!(
        used(&ledger, "busy", std::slice::from_ref(&units), T0 + S).await,
        vec![1]
    );
    let d = charge_at(&ledger, "busy", &c, T0 + 2 * S).await;
    assert_eq!(remaining(&d), vec![8]);
}
