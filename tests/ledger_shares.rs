//! Shares of a credential (issue 28) in the ledger, the same tests against
//! both stores: a reserve held against a greedy neighbour, a share's limit,
//! lending in a calendar window after its point and never in a sliding one,
//! and a settle that moves a share's units with its pool's.

use std::time::Duration;

use portion::ledger::{
    Amount, At, Charge, ChargeDecision, EmbeddedLedger, Held, Ledger, Pool, PoolCost, RedisLedger,
    Share, Shares, Window,
};

use crate::common::ledger::{S, T0, charge, cost, embedded_path, pool, window};
use crate::common::redis::RedisServer;

/// A minute's start after T0 (T0 is 20 s into its minute).
const M: i64 = T0 + 40 * S;

fn shares(list: &[(&str, Amount, Option<Amount>)], lend_after: Option<u32>) -> Shares {
    Shares {
        list: (list.iter())
            .map(|(name, reserve, limit)| Share {
                name: name.to_string(),
                reserve: *reserve,
                limit: *limit,
            })
            .collect(),
        lend_after,
    }
}

async fn by(
    ledger: &impl Ledger,
    shares: &Shares,
    job: &str,
    cost: &[PoolCost],
    at: i64,
) -> ChargeDecision {
    let c = Charge {
        job,
        shares: Some(shares),
        ..charge("cred", cost)
    };
    ledger.charge(&c, At::Fixed(at)).await.expect("charge")
}

/// Who the refusal kept the units for, and when to retry.
fn refusal(d: &ChargeDecision) -> (Option<Held>, Duration) {
    match d {
        ChargeDecision::Rejected {
            held, retry_after, ..
        } => (held.clone(), *retry_after),
        other => panic!("expected rejected, got {other:?}"),
    }
}

fn kept(share: &str, units: u64) -> Option<Held> {
    Some(Held::Reserve {
        share: share.into(),
        units,
    })
}

async fn a_reserve_is_held_against_a_greedy_neighbour(ledger: impl Ledger) {
    // 100 units a minute; 60% kept for trending.
    let units = pool("units", vec![window(60, 110, 10)]);
    let sh = shares(&[("trending", Amount::Basis(6_000), None)], None);
    let ten = [cost(&units, 10)];
    for i in 0..4 {
        let d = by(&ledger, &sh, "backfill", &ten, T0 + i * S).await;
        assert!(d.is_allowed(), "{d:?}");
    }
    // 40 taken: 60 left, all of them trending's.
    let d = by(&ledger, &sh, "backfill", &ten, T0 + 10 * S).await;
    assert_eq!(refusal(&d), (kept("trending", 60), Duration::from_secs(50)));
    let d = by(&ledger, &sh, "trending", &[cost(&units, 20)], T0 + 11 * S).await;
    assert!(d.is_allowed(), "trending takes its own: {d:?}");
    let d = by(&ledger, &sh, "backfill", &ten, T0 + 12 * S).await;
    assert_eq!(refusal(&d).0, kept("trending", 40));
    let d = by(&ledger, &sh, "trending", &[cost(&units, 40)], T0 + 13 * S).await;
    assert!(d.is_allowed(), "all of its reserve: {d:?}");
    // The window is full: an ordinary refusal, no share named.
    let d = by(&ledger, &sh, "trending", &[cost(&units, 1)], T0 + 14 * S).await;
    assert_eq!(refusal(&d).0, None);
    // The backfill's first calls leave: their 10 units are anyone's.
    let d = by(&ledger, &sh, "backfill", &ten, T0 + 60 * S).await;
    assert!(d.is_allowed(), "{d:?}");
    // A charge without shares (none configured) takes what is left.
    let d = ledger
        .charge(&charge("cred", &ten), At::Fixed(T0 + 61 * S))
        .await
        .unwrap();
    assert!(d.is_allowed(), "{d:?}");
}

async fn a_share_never_takes_more_than_its_limit(ledger: impl Ledger) {
    let units = pool("units", vec![window(60, 100, 0), window(10, 50, 0)]);
    let sh = shares(
        &[("search", Amount::Units(10), Some(Amount::Basis(3_000)))],
        None,
    );
    let ten = [cost(&units, 10)];
    // 30% of the minute's 100 units and of the 10 s window's 50 (15).
    for i in 0..3 {
        let d = by(&ledger, &sh, "search", &ten, T0 + i * 20 * S).await;
        assert!(d.is_allowed(), "{d:?}");
    }
    let d = by(&ledger, &sh, "search", &ten, T0 + 41 * S).await;
    assert_eq!(
        refusal(&d),
        (
            Some(Held::Limit {
                share: "search".into(),
                units: 30,
            }),
            Duration::from_secs(19)
        )
    );
    match &d {
        ChargeDecision::Rejected { pool, per, .. } => {
            assert_eq!((pool.as_str(), per.as_secs()), ("units", 60));
        }
        _ => unreachable!(),
    }
    // Others take the rest, but for search's unused reserve: none is.
    let d = by(&ledger, &sh, "backfill", &[cost(&units, 40)], T0 + 42 * S).await;
    assert!(d.is_allowed(), "{d:?}");
    // The remaining it reports is the pool's, not the share's.
    let d = by(&ledger, &sh, "search", &[cost(&units, 5)], T0 + 80 * S).await;
    match d {
        ChargeDecision::Allowed { remaining, .. } => {
            assert_eq!(remaining.len(), 2);
            assert!(remaining.iter().all(|r| r.pool == "units"));
        }
        other => panic!("{other:?}"),
    }
}

async fn lending_after_its_point_in_a_calendar_window_never_in_a_sliding_one(ledger: impl Ledger) {
    let minute = Window {
        aligned: Some(chrono_tz::UTC),
        ..window(60, 100, 0)
    };
    let calendar = pool("cal", vec![minute]);
    let sliding = pool("sliding", vec![window(60, 100, 0)]);
    let sh = shares(&[("trending", Amount::Basis(6_000), None)], Some(8_000));
    for p in [&calendar, &sliding] {
        let d = by(&ledger, &sh, "backfill", &[cost(p, 40)], M + S).await;
        assert!(d.is_allowed(), "{d:?}");
    }
    // Before 80% of the minute: kept; the calendar window says when it lends.
    let d = by(&ledger, &sh, "backfill", &[cost(&calendar, 10)], M + 2 * S).await;
    assert_eq!(refusal(&d), (kept("trending", 60), Duration::from_secs(46)));
    // From 48 s into the minute, trending's reserve opens at its own pace:
    // 12 s of 60 are left (less the instant), so 11 of its 60 units stay
    // kept (rounded down).
    for _ in 0..4 {
        let d = by(&ledger, &sh, "backfill", &[cost(&calendar, 10)], M + 48 * S).await;
        assert!(d.is_allowed(), "{d:?}");
    }
    let d = by(&ledger, &sh, "backfill", &[cost(&calendar, 10)], M + 48 * S).await;
    // (10 may be kept once less than 11 s are left after the instant)
    assert_eq!(refusal(&d), (kept("trending", 11), Duration::from_secs(1)));
    // The next minute keeps it again.
    let d = by(&ledger, &sh, "backfill", &[cost(&calendar, 50)], M + 60 * S).await;
    assert_eq!(refusal(&d).0, kept("trending", 60));
    // A sliding window never lends.
    let d = by(&ledger, &sh, "backfill", &[cost(&sliding, 10)], M + 59 * S).await;
    assert_eq!(refusal(&d).0, kept("trending", 60));
}

/// After the lending point a share's reserve opens at its own pace: at
/// 90% of the period a neighbour may take all but 10% of the reserve
/// (rounded down), or what the share has left of it if less; the last
/// unit opens before the period's last instant, so a timer takes it
/// (issue 36). Before the point all of it is kept.
async fn a_reserve_opens_at_its_own_pace_after_the_lending_point(ledger: impl Ledger) {
    let minute = Window {
        aligned: Some(chrono_tz::UTC),
        ..window(60, 1_000, 0)
    };
    let units = pool("units", vec![minute]);
    // (10% of 365 is 36.5: 36 kept)
    let sh = shares(&[("trending", Amount::Units(365), None)], Some(8_000));
    let one = [cost(&units, 1)];
    // Before 80% of the minute: all of the 265 unused kept; retry at the
    // lending point, when only 72 are (12 s - 1 µs of 60 s: 72.99...).
    let d = by(&ledger, &sh, "trending", &[cost(&units, 100)], M + S).await;
    assert!(d.is_allowed(), "{d:?}");
    let d = by(&ledger, &sh, "backfill", &[cost(&units, 635)], M + 47 * S).await;
    assert!(d.is_allowed(), "{d:?}");
    let d = by(&ledger, &sh, "backfill", &one, M + 47 * S).await;
    assert_eq!(refusal(&d), (kept("trending", 265), Duration::from_secs(1)));
    // The next minute, at 90%: all but 37.
    let next = M + 60 * S;
    let d = by(&ledger, &sh, "trending", &[cost(&units, 100)], next + S).await;
    assert!(d.is_allowed(), "{d:?}");
    let d = by(
        &ledger,
        &sh,
        "backfill",
        &[cost(&units, 864)],
        next + 54 * S,
    )
    .await;
    assert!(d.is_allowed(), "{d:?}");
    let d = by(&ledger, &sh, "backfill", &one, next + 54 * S).await;
    // (room for it once 35 are kept: 5,917,808 µs left, 365 x that / 60 s
    // rounded down)
    let retry = Duration::from_micros(82_191);
    assert_eq!(refusal(&d), (kept("trending", 36), retry));
    // And the one after: trending has used 340, 25 left of its reserve.
    let last = M + 120 * S;
    let d = by(&ledger, &sh, "trending", &[cost(&units, 340)], last + S).await;
    assert!(d.is_allowed(), "{d:?}");
    let d = by(
        &ledger,
        &sh,
        "backfill",
        &[cost(&units, 635)],
        last + 54 * S,
    )
    .await;
    assert!(d.is_allowed(), "{d:?}");
    let d = by(&ledger, &sh, "backfill", &one, last + 54 * S).await;
    assert_eq!(refusal(&d).0, kept("trending", 25));
    // 0.1 s before the period's end nothing is kept (365 x 0.0999999 s /
    // 60 s rounds down to 0): the window's last 25 go to a timer's tick,
    // not only to the period's last instant.
    let d = by(
        &ledger,
        &sh,
        "backfill",
        &[cost(&units, 25)],
        last + 60 * S - S / 10,
    )
    .await;
    assert!(d.is_allowed(), "{d:?}");
}

async fn a_settle_moves_a_shares_units_with_its_pools(ledger: impl Ledger) {
    let units = pool("units", vec![window(60, 100, 0)]);
    let sh = shares(&[("trending", Amount::Units(50), None)], None);
    let c = [cost(&units, 40)];
    let estimated = ["units"];
    let charge = Charge {
        job: "trending",
        shares: Some(&sh),
        estimated: &estimated,
        ..charge("cred", &c)
    };
    let d = ledger.charge(&charge, At::Fixed(T0)).await.unwrap();
    let ChargeDecision::Allowed { receipt, .. } = d else {
        panic!("{d:?}")
    };
    // Trending used 40 of its 50: 10 kept; the backfill may take 50.
    let d = by(&ledger, &sh, "backfill", &[cost(&units, 51)], T0 + S).await;
    assert_eq!(refusal(&d).0, kept("trending", 10));
    // Settled to 5: trending used 5, 45 kept, 50 left for the backfill.
    ledger
        .settle("cred", &receipt, ("units", 40, 5), At::Fixed(T0 + 2 * S))
        .await
        .unwrap();
    let d = by(&ledger, &sh, "backfill", &[cost(&units, 51)], T0 + 3 * S).await;
    assert_eq!(refusal(&d).0, kept("trending", 45));
    let d = by(&ledger, &sh, "backfill", &[cost(&units, 50)], T0 + 3 * S).await;
    assert!(d.is_allowed(), "{d:?}");
    let u = ledger
        .usage(
            "cred",
            &[units.clone(), share_pool(&units)],
            At::Fixed(T0 + 4 * S),
        )
        .await
        .unwrap();
    let used: Vec<u64> = u.pools.iter().map(|p| p.windows[0].used).collect();
    assert_eq!(used, [55, 5]);
}

async fn observe_mode_counts_the_calls_a_share_would_have_stopped(ledger: impl Ledger) {
    let units = pool("units", vec![window(60, 100, 0)]);
    let sh = shares(&[("trending", Amount::Units(60), None)], None);
    let c = [cost(&units, 40)];
    for at in [T0, T0 + S] {
        let observe = Charge {
            job: "backfill",
            shares: Some(&sh),
            observe: true,
            ..charge("cred", &c)
        };
        let d = ledger.charge(&observe, At::Fixed(at)).await.unwrap();
        let ChargeDecision::Allowed { observed, .. } = &d else {
            panic!("{d:?}")
        };
        // The first fits; the second leaves less than trending's 60.
        assert_eq!(
            observed.as_ref().map(|o| o.pool.as_str()),
            (at > T0).then_some("units")
        );
    }
    let u = ledger
        .usage("cred", &[units], At::Fixed(T0 + 2 * S))
        .await
        .unwrap();
    assert_eq!(
        (u.pools[0].observed_rejections, u.pools[0].windows[0].used),
        (1, 80)
    );
}

async fn other_shares_pools_are_read_not_logged(ledger: impl Ledger) {
    let units = pool("units", vec![window(60, 100, 0)]);
    let sh = shares(
        &[
            ("trending", Amount::Units(30), None),
            ("search", Amount::Units(10), None),
        ],
        None,
    );
    // (repeated charges: the store's common path, with shares)
    for i in 0..5 {
        let d = by(&ledger, &sh, "backfill", &[cost(&units, 10)], T0 + i * S).await;
        assert!(d.is_allowed(), "{d:?}");
    }
    for i in 5..8 {
        let d = by(&ledger, &sh, "trending", &[cost(&units, 2)], T0 + i * S).await;
        assert!(d.is_allowed(), "{d:?}");
    }
    // 56 used: 44 left, of which trending's 24 and search's 10 are kept.
    let d = by(&ledger, &sh, "backfill", &[cost(&units, 10)], T0 + 8 * S).await;
    assert!(d.is_allowed(), "{d:?}");
    let d = by(&ledger, &sh, "backfill", &[cost(&units, 1)], T0 + 9 * S).await;
    assert_eq!(refusal(&d).0, kept("trending", 24));
    let named = |share: &str| Pool {
        name: portion::ledger::shares::share_pool("units", share),
        ..units.clone()
    };
    let u = ledger
        .usage(
            "cred",
            &[units.clone(), named("trending"), named("search")],
            At::Fixed(T0 + 10 * S),
        )
        .await
        .unwrap();
    let w = |p: usize| &u.pools[p].windows[0];
    assert_eq!((w(0).used, w(1).used, w(2).used), (66, 6, 0));
    // Each share's pool holds its own calls only: no entry for a charge by
    // another job, which only read it.
    assert_eq!(w(1).by_job.keys().collect::<Vec<_>>(), ["trending"]);
    assert_eq!(w(1).next_free_at, Some(T0 + 5 * S + 60 * S));
    assert_eq!((w(2).next_free_at, w(2).by_job.len()), (None, 0));
}

/// The pool in which a store counts what trending spent of `units`.
fn share_pool(units: &Pool) -> Pool {
    Pool {
        name: portion::ledger::shares::share_pool(&units.name, "trending"),
        ..units.clone()
    }
}

macro_rules! shares_suite {
    ($store:ident, $make:expr) => {
        mod $store {
            use super::*;
            shares_suite!(@tests $make;
                a_reserve_is_held_against_a_greedy_neighbour,
                a_share_never_takes_more_than_its_limit,
                lending_after_its_point_in_a_calendar_window_never_in_a_sliding_one,
                a_reserve_opens_at_its_own_pace_after_the_lending_point,
                a_settle_moves_a_shares_units_with_its_pools,
                observe_mode_counts_the_calls_a_share_would_have_stopped,
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

shares_suite!(redis, {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.expect("connect");
    (ledger, Box::new(server) as Box<dyn std::any::Any>)
});

shares_suite!(embedded, {
    let dir = tempfile::tempdir().unwrap();
    let ledger = EmbeddedLedger::open(&embedded_path(&dir)).expect("open");
    (ledger, Box::new(dir) as Box<dyn std::any::Any>)
});

/// A settle of a share's charge moves the pool's entry and the share
/// pool's in one step (one script in Redis; one transaction in the
/// embedded store, by construction): no decision sees one moved and not
/// the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shares_settle_is_one_step_in_redis() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.expect("connect");
    let units = pool("units", vec![window(60, 100, 0)]);
    let sh = shares(&[("trending", Amount::Units(50), None)], None);
    let c = [cost(&units, 40)];
    let estimated = ["units"];
    let charge = Charge {
        job: "trending",
        shares: Some(&sh),
        estimated: &estimated,
        ..charge("cred", &c)
    };
    let mut receipts = Vec::new();
    for at in [T0, T0 + S] {
        match ledger.charge(&charge, At::Fixed(at)).await.unwrap() {
            ChargeDecision::Allowed { receipt, .. } => receipts.push(receipt),
            d => panic!("{d:?}"),
        }
    }
    // (the first settle loads the script)
    ledger
        .settle("cred", &receipts[0], ("units", 40, 40), At::Fixed(T0 + S))
        .await
        .unwrap();
    let calls = || {
        let stats = server.cli(&["info", "commandstats"]);
        (stats.lines())
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|l| l.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = calls();
    ledger
        .settle("cred", &receipts[1], ("units", 40, 5), At::Fixed(T0 + S))
        .await
        .unwrap();
    assert_eq!(calls() - before, 1, "one script for both pools");
    let u = ledger
        .usage(
            "cred",
            &[units.clone(), share_pool(&units)],
            At::Fixed(T0 + 2 * S),
        )
        .await
        .unwrap();
    let used: Vec<u64> = u.pools.iter().map(|p| p.windows[0].used).collect();
    assert_eq!(used, [45, 45]);
}

/// Other shares' pools are read by a charge, never logged: the entries each
/// store holds for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_shares_pools_hold_no_entries_in_redis() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.expect("connect");
    other_shares_pools_are_read_not_logged(ledger).await;
    let len = |share: &str| {
        let key = format!("portion:{{cred}}:log:units/{share}:0");
        server.cli(&["LLEN", &key]).trim().to_string()
    };
    // (trending's three calls, four items each)
    assert_eq!((len("trending"), len("search")), ("12".into(), "0".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_shares_pools_hold_no_entries_in_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = EmbeddedLedger::open(&embedded_path(&dir)).expect("open");
    other_shares_pools_are_read_not_logged(ledger).await;
    let db = rusqlite::Connection::open(embedded_path(&dir)).unwrap();
    let rows = |share: &str| -> i64 {
        let sql = "SELECT count(*) FROM log WHERE credential = 'cred' AND pool = ?1";
        (db.query_row(sql, [format!("units/{share}")], |r| r.get(0))).unwrap()
    };
    assert_eq!((rows("trending"), rows("search")), (3, 0));
}

/// lua/charge/decide.lua's exact ceil(x y / z) in doubles, run by Redis,
/// against integers: reserves near 2^53 and periods up to a month in µs,
/// where a product in doubles would round (what the Rust side,
/// `shares::held`, computes in u128).
#[test]
fn the_scripts_pace_is_exact_in_doubles() {
    let decide = include_str!("../lua/charge/decide.lua");
    let from = decide
        .find("  local function mul_div_down")
        .expect("mul_div_down");
    let to = from + decide[from..].find("\n  end\n").expect("its end") + 7;
    let script = format!(
        "local fmod, floor = math.fmod, math.floor\n{}\nlocal out = {{}}\n\
         for i = 1, #ARGV, 3 do out[#out + 1] = string.format('%.0f', \
         mul_div_down(tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]))) end\n\
         return out",
        &decide[from..to]
    );
    let month = 31 * 86_400_000_000_u64;
    let near = (1_u64 << 53) - 1;
    let cases: Vec<(u64, u64, u64)> = vec![
        (near, month - 1, month),
        (near, month / 3, month),
        (near - 12_345, 86_399_999_999, 86_400_000_000),
        (365, 5_999_999, 60_000_000),
        (1 << 52, 1, month),
        (near, 0, month),
        (123_456_789_012, 2_000_000_000_001, month + 7),
    ];
    let server = RedisServer::start();
    let mut con = ::redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut cmd = ::redis::cmd("EVAL");
    cmd.arg(script).arg(0);
    for (x, y, z) in &cases {
        cmd.arg(x).arg(y).arg(z);
    }
    let got: Vec<String> = cmd.query(&mut con).expect("eval");
    for ((x, y, z), got) in cases.iter().zip(got) {
        let want = u128::from(*x) * u128::from(*y) / u128::from(*z);
        assert_eq!(got, want.to_string(), "{x} x {y} / {z}");
    }
}
