//! What metered APIs need of the ledger (issues 13 and 14), as cases that
//! `ledger_conformance` runs against every store: settled costs (an
//! estimate reserved before the call is settled to the actual afterwards,
//! on the same entry at its original time, so every window, retry time and
//! usage report counts what was spent); the upstream's own counts (usage by
//! others, until its reset); observe mode (calls that do not fit are
//! recorded all the same, and counted).

use std::time::Duration;

use portion::ledger::{
    At, BlockEnd, Charge, ChargeDecision, Ledger, PoolCost, Receipt, Settled, Window,
};

use super::ledger::{S, T0, charge, cost, pool, used, window};

pub async fn charge_at(ledger: &impl Ledger, cost: &[PoolCost], at: i64) -> ChargeDecision {
    let c = Charge {
        endpoint: "chat",
        ..charge("settle", cost)
    };
    ledger.charge(&c, At::Fixed(at)).await.expect("charge")
}

pub fn receipt(d: &ChargeDecision) -> Receipt {
    match d {
        ChargeDecision::Allowed { receipt, .. } => receipt.clone(),
        other => panic!("expected allowed, got {other:?}"),
    }
}

fn retry(d: &ChargeDecision) -> Duration {
    match d {
        ChargeDecision::Rejected { retry_after, .. } => *retry_after,
        other => panic!("expected rejected, got {other:?}"),
    }
}

pub async fn settle(
    ledger: &impl Ledger,
    r: &Receipt,
    (estimate, actual): (u64, u64),
    at: i64,
) -> Settled {
    ledger
        .settle("settle", r, ("tokens", estimate, actual), At::Fixed(at))
        .await
        .expect("settle")
}

/// A refund frees units at the entry's own time, a settle sent again
/// changes nothing, an actual above the estimate is recorded in full (the
/// window may exceed its budget) and the next charge waits for it, and an
/// entry past the retention is gone.
pub async fn a_settled_cost_moves_its_entry_at_its_time(ledger: impl Ledger) {
    let tokens = pool("tokens", vec![window(10, 10, 0)]);
    let r = receipt(&charge_at(&ledger, &[cost(&tokens, 5)], T0).await);
    assert!(
        charge_at(&ledger, &[cost(&tokens, 2)], T0 + S)
            .await
            .is_allowed()
    );
    assert_eq!(settle(&ledger, &r, (5, 2), T0 + S).await, Settled::Exact);
    assert_eq!(settle(&ledger, &r, (5, 2), T0 + S).await, Settled::Exact);
    assert_eq!(
        used(&ledger, "settle", std::slice::from_ref(&tokens), T0 + 2 * S).await,
        [4]
    );
    // 7 more need 1 unit to leave: the settled entry's 2, at T0 + 10 s.
    let d = charge_at(&ledger, &[cost(&tokens, 7)], T0 + 2 * S).await;
    assert_eq!(retry(&d), Duration::from_secs(8));
    assert!(
        charge_at(&ledger, &[cost(&tokens, 6)], T0 + 2 * S)
            .await
            .is_allowed()
    );
    // At T0 + 10 s the window holds 2 + 6; a call estimated at 1 spent 4.
    let r2 = receipt(&charge_at(&ledger, &[cost(&tokens, 1)], T0 + 10 * S).await);
    assert_eq!(
        settle(&ledger, &r2, (1, 4), T0 + 10 * S).await,
        Settled::Exact
    );
    assert_eq!(
        used(
            &ledger,
            "settle",
            std::slice::from_ref(&tokens),
            T0 + 10 * S
        )
        .await,
        [12]
    );
    // Over budget by 2: one more unit waits until 3 have left (the 2 at
    // T0 + 1 s do not suffice; the 6 at T0 + 2 s do).
    let d = charge_at(&ledger, &[cost(&tokens, 1)], T0 + 10 * S).await;
    assert_eq!(retry(&d), Duration::from_secs(2));
    // Not the estimate this entry was charged with: not this entry.
    assert_eq!(
        settle(&ledger, &r2, (9, 1), T0 + 10 * S).await,
        Settled::Gone
    );
    // Past the 60 s retention, nothing is left to settle.
    assert_eq!(
        settle(&ledger, &r2, (4, 1), T0 + 71 * S).await,
        Settled::Gone
    );
}

/// An entry whose block of calls is complete (in Redis, summarised in the
/// index) settles exactly too: usage by endpoint and the time at which
/// units free up, found through the summaries, count the actual.
pub async fn a_settle_behind_many_calls_counts_in_usage_and_retries(ledger: impl Ledger) {
    let tokens = pool("tokens", vec![window(100, 10_000, 0)]);
    let ms = 1000;
    // 200 calls, the reservation (call 200, in the second block of 128),
    // 300 calls: its block and the next are complete when it settles.
    for i in 0..200 {
        assert!(
            charge_at(&ledger, &[cost(&tokens, 1)], T0 + i * 10 * ms)
                .await
                .is_allowed()
        );
    }
    let r = receipt(&charge_at(&ledger, &[cost(&tokens, 50)], T0 + 2 * S).await);
    for k in 1..=300 {
        let at = T0 + 2 * S + k * 10 * ms;
        assert!(
            charge_at(&ledger, &[cost(&tokens, 1)], at)
                .await
                .is_allowed()
        );
    }
    let now = T0 + 6 * S;
    assert_eq!(settle(&ledger, &r, (50, 20), now).await, Settled::Exact);
    let u = ledger
        .usage("settle", std::slice::from_ref(&tokens), At::Fixed(now))
        .await
        .unwrap();
    assert_eq!(u.pools[0].windows[0].used, 520);
    assert_eq!(u.pools[0].windows[0].by_endpoint["chat"], 520);
    // A budget that needs 320 units to leave: the first 200 calls, the
    // settled 20 and the 100 calls after it (the last at T0 + 3 s).
    let tight = pool("tokens", vec![window(100, 201, 0)]);
    let d = charge_at(&ledger, &[cost(&tight, 1)], now).await;
    assert_eq!(retry(&d), Duration::from_secs(3 + 100 - 6));
}

/// The upstream's own count wins downward (issue 13, part 2): what it
/// counts beyond the ledger's usage, in the pool's longest window, is
/// recorded as spent by others until its reset: every later charge counts
/// it, `status` shows it, and an upstream that counts no more clears it.
/// It never raises a budget.
pub async fn the_upstreams_count_wins_downward_until_its_reset(ledger: impl Ledger) {
    let requests = pool("requests", vec![window(60, 100, 2), window(3600, 1000, 0)]);
    let c = |units| {
        [PoolCost {
            pool: requests.clone(),
            units,
        }]
    };
    for i in 0..10 {
        assert!(charge_at(&ledger, &c(1), T0 + i * S).await.is_allowed());
    }
    // At 10 s the upstream says 900 of its 1,000 remain until 600 s: 90
    // were spent elsewhere.
    let reset = Some(BlockEnd::At(T0 + 600 * S));
    let others = ledger
        .upstream_remaining("settle", &requests, 900, reset, At::Fixed(T0 + 10 * S))
        .await
        .unwrap();
    assert_eq!((others.units, others.until), (90, T0 + 600 * S));
    let d = charge_at(&ledger, &c(1), T0 + 11 * S).await;
    match &d {
        ChargeDecision::Allowed { remaining, .. } => {
            let r: Vec<u64> = remaining.iter().map(|r| r.remaining).collect();
            assert_eq!(r, [98 - 11, 1000 - 11 - 90], "the hour counts others");
        }
        other => panic!("{other:?}"),
    }
    let u = ledger
        .usage(
            "settle",
            std::slice::from_ref(&requests),
            At::Fixed(T0 + 12 * S),
        )
        .await
        .unwrap();
    let (minute, hour) = (&u.pools[0].windows[0], &u.pools[0].windows[1]);
    assert_eq!((minute.others, hour.others), (0, 90));
    assert_eq!((hour.used, hour.remaining), (11, 899));
    // Within that period (the same reset, or none said) a higher count is
    // a stale one: others' units never come back (issue 36, item 11).
    for same in [reset, None] {
        let kept = ledger
            .upstream_remaining("settle", &requests, 5000, same, At::Fixed(T0 + 13 * S))
            .await
            .unwrap();
        assert_eq!((kept.units, kept.until), (90, T0 + 600 * S), "{same:?}");
    }
    // In a later period, more remaining than the ledger's own count
    // leaves: nothing by others, and never more than the budget.
    let later = Some(BlockEnd::At(T0 + 700 * S));
    let none = ledger
        .upstream_remaining("settle", &requests, 5000, later, At::Fixed(T0 + 13 * S))
        .await
        .unwrap();
    assert_eq!(none.units, 0);
    let d = charge_at(&ledger, &c(1), T0 + 14 * S).await;
    assert!(
        matches!(&d, ChargeDecision::Allowed { remaining, .. } if remaining[1].remaining == 1000 - 12),
        "{d:?}"
    );

    // A count whose reset is now (GitHub's reset at its Date; `t=0`)
    // records nothing that lasts: the next charge counts none of it.
    let now_reset = Some(BlockEnd::After(Duration::ZERO));
    let others = ledger
        .upstream_remaining("settle", &requests, 10, now_reset, At::Fixed(T0 + 15 * S))
        .await
        .unwrap();
    assert_eq!(others.until, T0 + 15 * S);
    let d = charge_at(&ledger, &c(1), T0 + 15 * S).await;
    assert!(
        matches!(&d, ChargeDecision::Allowed { remaining, .. } if remaining[1].remaining == 1000 - 13),
        "{d:?}"
    );

    // A call that needs others' units waits for the upstream's reset, not
    // for a window: 500 spent elsewhere until 100 s.
    let hour = pool("hour", vec![window(3600, 1000, 0)]);
    let h = |units| {
        [PoolCost {
            pool: hour.clone(),
            units,
        }]
    };
    // (the credential's clock is at 14 s by now: it never runs back)
    assert!(charge_at(&ledger, &h(10), T0 + 20 * S).await.is_allowed());
    let reset = Some(BlockEnd::After(Duration::from_secs(75)));
    let others = ledger
        .upstream_remaining("settle", &hour, 490, reset, At::Fixed(T0 + 25 * S))
        .await
        .unwrap();
    assert_eq!((others.units, others.until), (500, T0 + 100 * S));
    let d = charge_at(&ledger, &h(600), T0 + 30 * S).await;
    assert_eq!(retry(&d), Duration::from_secs(70));
    assert!(charge_at(&ledger, &h(600), T0 + 100 * S).await.is_allowed());

    // `portion unblock` forgets others' units too: an upstream that
    // overstated them no longer holds the pool until its reset.
    let reset = Some(BlockEnd::After(Duration::from_secs(3000)));
    let others = ledger
        .upstream_remaining("settle", &hour, 0, reset, At::Fixed(T0 + 101 * S))
        .await
        .unwrap();
    assert_eq!(others.units, 1000 - 610);
    assert!(!charge_at(&ledger, &h(1), T0 + 102 * S).await.is_allowed());
    ledger.unblock("settle").await.unwrap();
    let d = charge_at(&ledger, &h(1), T0 + 103 * S).await;
    assert!(
        matches!(&d, ChargeDecision::Allowed { remaining, .. } if remaining[0].remaining == 1000 - 611),
        "{d:?}"
    );
}

/// Observe mode (issue 14, part 3): a call that does not fit, or whose
/// pool's log was lost, is recorded all the same; the refusal it would
/// have met is reported and counted per pool, with its time; usage may
/// exceed the budget. Enforce mode still refuses.
pub async fn observe_mode_records_what_does_not_fit_and_counts_it(ledger: impl Ledger) {
    let units = pool("units", vec![window(10, 3, 0)]);
    let c = [cost(&units, 1)];
    let observe = |seen_serial| Charge {
        observe: true,
        seen_serial,
        ..charge("settle", &c)
    };
    for i in 0..3 {
        assert!(charge_at(&ledger, &c, T0 + i * S).await.is_allowed());
    }
    assert!(matches!(
        charge_at(&ledger, &c, T0 + 4 * S).await,
        ChargeDecision::Rejected { .. }
    ));
    let d = ledger
        .charge(&observe(0), At::Fixed(T0 + 4 * S))
        .await
        .unwrap();
    let ChargeDecision::Allowed {
        observed,
        remaining,
        ..
    } = &d
    else {
        panic!("{d:?}")
    };
    let w = observed.as_ref().expect("the refusal it would have met");
    assert_eq!(
        (w.pool.as_str(), w.per, w.retry_after),
        (
            "units",
            Some(Duration::from_secs(10)),
            Duration::from_secs(6)
        )
    );
    assert_eq!(remaining[0].remaining, 0);
    let u = ledger
        .usage(
            "settle",
            std::slice::from_ref(&units),
            At::Fixed(T0 + 4 * S),
        )
        .await
        .unwrap();
    assert_eq!(u.pools[0].windows[0].used, 4, "above the budget of 3");
    // A lost log, in observe mode (the window has room): recorded too, the
    // loss reported. (A full window outranks a loss, as in enforce mode's
    // order of checks in both stores.)
    let d = ledger
        .charge(&observe(1000), At::Fixed(T0 + 20 * S))
        .await
        .unwrap();
    let ChargeDecision::Allowed { observed, .. } = &d else {
        panic!("{d:?}")
    };
    let w = observed.as_ref().expect("the loss");
    assert_eq!((w.per, w.retry_after), (None, Duration::from_secs(10)));
    let u = ledger
        .usage(
            "settle",
            std::slice::from_ref(&units),
            At::Fixed(T0 + 20 * S),
        )
        .await
        .unwrap();
    assert_eq!(u.pools[0].observed_rejections, 2);
    assert_eq!(u.pools[0].observed_at, Some(T0 + 20 * S));
    // A call that fits reports nothing.
    let d = ledger
        .charge(&observe(0), At::Fixed(T0 + 60 * S))
        .await
        .unwrap();
    assert!(
        matches!(&d, ChargeDecision::Allowed { observed: None, .. }),
        "{d:?}"
    );
}

/// A calendar window (issue 13, part 7): a day in Los Angeles resets at
/// local midnight, the fall-back day lasting 25 h, beside a sliding window
/// of the same pool; the charge is all-or-nothing across both, a refusal
/// waits for the reset, and usage shows when it resets.
pub async fn a_calendar_window_resets_at_local_midnight(ledger: impl Ledger) {
    let la: chrono_tz::Tz = "America/Los_Angeles".parse().unwrap();
    let at = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_micros()
    };
    let day = Window {
        aligned: Some(la),
        ..window(86_400, 3, 0)
    };
    let units = pool("units", vec![day, window(3600, 4, 0)]);
    let c = |n| [cost(&units, n)];
    // Saturday 31 October, 23:00 and 23:59:59 PDT.
    assert!(
        charge_at(&ledger, &c(1), at("2026-11-01T06:00:00Z"))
            .await
            .is_allowed()
    );
    assert!(
        charge_at(&ledger, &c(2), at("2026-11-01T06:59:59Z"))
            .await
            .is_allowed()
    );
    let d = charge_at(&ledger, &c(1), at("2026-11-01T06:59:59.500Z")).await;
    assert_eq!(
        retry(&d),
        Duration::from_millis(500),
        "until local midnight"
    );
    // Midnight PDT: a new day for the calendar window, but the sliding hour
    // still holds 2 units: 3 more do not fit it (nothing is recorded),
    // 2 do.
    let d = charge_at(&ledger, &c(3), at("2026-11-01T07:00:00Z")).await;
    assert!(
        matches!(&d, ChargeDecision::Rejected { per, .. } if per.as_secs() == 3600),
        "{d:?}"
    );
    assert!(
        charge_at(&ledger, &c(2), at("2026-11-01T07:00:00Z"))
            .await
            .is_allowed()
    );
    // Sunday 1 November lasts 25 h: it ends at 08:00 UTC on the 2nd.
    assert!(
        charge_at(&ledger, &c(1), at("2026-11-02T06:00:00Z"))
            .await
            .is_allowed()
    );
    let u = ledger
        .usage(
            "settle",
            std::slice::from_ref(&units),
            At::Fixed(at("2026-11-02T07:30:00Z")),
        )
        .await
        .unwrap();
    let w = &u.pools[0].windows[0];
    assert_eq!((w.used, w.remaining), (3, 0));
    assert_eq!(
        w.next_free_at,
        Some(at("2026-11-02T08:00:00Z")),
        "resets at midnight PST"
    );
    let d = charge_at(&ledger, &c(1), at("2026-11-02T07:59:59Z")).await;
    assert_eq!(retry(&d), Duration::from_secs(1));
    assert!(
        charge_at(&ledger, &c(3), at("2026-11-02T08:00:00Z"))
            .await
            .is_allowed()
    );
}

/// Issue 23, item 1, as seen: in observe mode one response reports
/// 2^53 - 1 units, 200 charges follow, the window passes, then enforce mode
/// admits no more than the budget in a window, and every window's sum stays
/// exact: the actual is recorded as the pool's largest budget plus one.
/// (Redis kept the sum in a double: it rounded, and admitted 173 of 100.)
pub async fn a_huge_actual_leaves_every_window_exact(ledger: impl Ledger) {
    let tokens = pool("tokens", vec![window(15, 100, 0)]);
    let c = [cost(&tokens, 1)];
    let observe = Charge {
        observe: true,
        endpoint: "chat",
        ..charge("settle", &c)
    };
    let ms = 1000;
    let d = ledger.charge(&observe, At::Fixed(T0)).await.unwrap();
    let r = receipt(&d);
    let huge = (1 << 53) - 1;
    assert_eq!(
        settle(&ledger, &r, (1, huge), T0 + ms).await,
        Settled::Exact
    );
    let tokens_of = std::slice::from_ref(&tokens);
    assert_eq!(used(&ledger, "settle", tokens_of, T0 + ms).await, [101]);
    for i in 0..200 {
        let d = ledger
            .charge(&observe, At::Fixed(T0 + 2 * ms + i * 10 * ms))
            .await
            .unwrap();
        assert!(d.is_allowed(), "{d:?}");
    }
    assert_eq!(used(&ledger, "settle", tokens_of, T0 + 5 * S).await, [301]);
    // The window passes; in enforce mode, a window admits its budget.
    let start = T0 + 20 * S;
    assert_eq!(used(&ledger, "settle", tokens_of, start).await, [0]);
    let mut admitted = 0;
    for i in 0..300 {
        let d = charge_at(&ledger, &c, start + i * 10 * ms).await;
        admitted += u32::from(d.is_allowed());
    }
    assert_eq!(admitted, 100);
    assert_eq!(
        used(&ledger, "settle", tokens_of, start + 3 * S).await,
        [100]
    );
}

/// A call settled to 0 frees nothing later: usage shows no time at which
/// units free up while nothing is used (issue 23), in both stores alike,
/// and the next call's entry is the one that says when.
pub async fn a_settle_to_zero_leaves_nothing_to_free(ledger: impl Ledger) {
    let tokens = pool("tokens", vec![window(10, 10, 0)]);
    let r = receipt(&charge_at(&ledger, &[cost(&tokens, 5)], T0).await);
    assert_eq!(settle(&ledger, &r, (5, 0), T0 + S).await, Settled::Exact);
    let at = |now| {
        let ledger = &ledger;
        let tokens = tokens.clone();
        async move {
            let u = ledger
                .usage("settle", std::slice::from_ref(&tokens), At::Fixed(now))
                .await
                .unwrap();
            let w = &u.pools[0].windows[0];
            (w.used, w.next_free_at, w.fully_free_at)
        }
    };
    assert_eq!(at(T0 + 2 * S).await, (0, None, None));
    assert!(
        charge_at(&ledger, &[cost(&tokens, 3)], T0 + 4 * S)
            .await
            .is_allowed()
    );
    let freed = Some(T0 + 14 * S);
    assert_eq!(at(T0 + 5 * S).await, (3, freed, freed));
}

/// A cost charged as an estimate is reserved until its settle comes: usage
/// shows it per window (it counts in `used`, at the estimate, all along);
/// a settle ends it whatever its outcome; one whose settle never comes (its
/// run was killed) shows until its call leaves the window. A pool charged
/// beside it at a fixed cost, and a charge not estimated, reserve nothing.
pub async fn reserved_units_show_until_their_settle(ledger: impl Ledger) {
    let tokens = pool("tokens", vec![window(10, 1000, 0), window(60, 1000, 0)]);
    let requests = pool("requests", vec![window(10, 100, 0)]);
    let pools = [requests.clone(), tokens.clone()];
    let both = [cost(&requests, 1), cost(&tokens, 20)];
    let estimated = Charge {
        endpoint: "chat",
        estimated: &["tokens"],
        ..charge("settle", &both)
    };
    let reserved = |at: i64| {
        let ledger = &ledger;
        let pools = &pools;
        async move {
            let u = ledger.usage("settle", pools, At::Fixed(at)).await.unwrap();
            let windows = u.pools.iter().flat_map(|p| &p.windows);
            windows.map(|w| (w.used, w.reserved)).collect::<Vec<_>>()
        }
    };
    let charged = |at: i64| ledger.charge(&estimated, At::Fixed(at));
    let a = receipt(&charged(T0).await.unwrap());
    let _b = receipt(&charged(T0 + 5 * S).await.unwrap());
    assert!(
        charge_at(&ledger, &[cost(&tokens, 7)], T0 + 6 * S)
            .await
            .is_allowed()
    );
    assert_eq!(
        reserved(T0 + 6 * S).await,
        [(2, 0), (47, 40), (47, 40)],
        "both estimates reserved, in both windows"
    );
    assert_eq!(
        settle(&ledger, &a, (20, 5), T0 + 7 * S).await,
        Settled::Exact
    );
    assert_eq!(reserved(T0 + 7 * S).await, [(2, 0), (32, 20), (32, 20)]);
    // The second's settle never comes: reserved while its call counts.
    assert_eq!(reserved(T0 + 16 * S).await, [(0, 0), (0, 0), (32, 20)]);
    assert_eq!(reserved(T0 + 66 * S).await, [(0, 0), (0, 0), (0, 0)]);
    // A settle at the estimate (the response did not say) ends it too.
    let c = receipt(&charged(T0 + 70 * S).await.unwrap());
    assert_eq!(reserved(T0 + 70 * S).await, [(1, 0), (20, 20), (20, 20)]);
    assert_eq!(
        settle(&ledger, &c, (20, 20), T0 + 71 * S).await,
        Settled::Exact
    );
    assert_eq!(reserved(T0 + 71 * S).await, [(1, 0), (20, 0), (20, 0)]);
}
