//! The embedded store gives the same answers as Redis: random sequences of
//! charges (two pools of several windows, random costs, repeated ids,
//! settles to actuals up to 2^53 - 1, above every budget,
//! same-µs ties), blocks, lost logs, idle gaps past the retention, and
//! configurations that change between calls (a window lengthened, shortened,
//! added, dropped, lengthened past the retention, a limit lowered below what
//! is used), fed with the same clock readings to a real Redis and to the
//! embedded store; every decision and every usage report must be equal.

use portion::ledger::{
    Amount, At, BlockEnd, Charge, ChargeDecision, EmbeddedLedger, Ledger, Pool, PoolCost, Receipt,
    RedisLedger, Share, Shares, StoreError, Window,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

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
        /// In observe mode: recorded even when it does not fit.
        observe: bool,
    },
    Block {
        dt_us: i64,
        for_secs: i64,
    },
    /// The configuration changes: the `units` and `search` variants below.
    Reconfigure {
        units: usize,
        search: usize,
    },
    /// A charge from a host that saw more charges than the store holds.
    Lose {
        dt_us: i64,
    },
    /// Nothing happens for a while (past the retention, sometimes).
    Idle {
        secs: i64,
    },
    /// The `back`-th latest allowed charge's `units` cost, reserved as an
    /// estimate, is settled to `actual` (a refund, the same, or more).
    Settle {
        back: usize,
        actual: u64,
    },
    /// The upstream says `remaining` units of the `units` pool are left,
    /// until `reset` seconds from now (none: a window's length).
    Upstream {
        dt_us: i64,
        remaining: u64,
        reset: Option<i64>,
    },
    /// Many charges in quick succession: logs longer than a block of the
    /// Redis index (128 calls), whose blocks later leave the windows whole.
    Burst {
        calls: usize,
        gap_us: i64,
        a: u64,
        b: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => (0i64..1_900_000, 1u64..=8, proptest::option::of(1u64..=10), proptest::option::of(0u8..4), proptest::bool::weighted(0.05), proptest::bool::weighted(0.2))
            .prop_map(|(dt_us, a, b, id, backwards, observe)| Op::Charge { dt_us, a, b, id, backwards, observe }),
        2 => (0i64..1_900_000, 1i64..20).prop_map(|(dt_us, for_secs)| Op::Block { dt_us, for_secs }),
        3 => (0..UNITS.len(), 0..SEARCH.len()).prop_map(|(units, search)| Op::Reconfigure { units, search }),
        1 => (0i64..1_900_000).prop_map(|dt_us| Op::Lose { dt_us }),
        2 => (5i64..150).prop_map(|secs| Op::Idle { secs }),
        4 => (0usize..6, 0u64..12).prop_map(|(back, actual)| Op::Settle { back, actual }),
        // (an actual above every budget, up to the largest the runner reads:
        // recorded as the pool's largest budget plus one, by both alike)
        1 => (0usize..6, prop_oneof![Just((1u64 << 53) - 1), Just(1u64 << 52), 20u64..200])
            .prop_map(|(back, actual)| Op::Settle { back, actual }),
        3 => (0i64..1_900_000, 0u64..40, proptest::option::of(1i64..30))
            .prop_map(|(dt_us, remaining, reset)| Op::Upstream { dt_us, remaining, reset }),
    ]
}

/// The `units` pool's configurations, as (seconds, limit, headroom) windows:
/// the first, then lengthened, shortened, a window added, one dropped, the
/// limit lowered (below what is often used), and a window longer than the
/// 60 s retention the log has kept so far.
const UNITS: [&[(u64, u64, u64)]; 7] = [
    &[(10, 22, 2), (3, 8, 0)],
    &[(30, 22, 2), (3, 8, 0)],
    &[(5, 22, 2), (3, 8, 0)],
    &[(10, 22, 2), (3, 8, 0), (20, 30, 0)],
    &[(10, 22, 2)],
    &[(10, 10, 2), (3, 8, 0)],
    &[(120, 40, 0), (3, 8, 0)],
];
/// The `search` pool's: the first, lengthened, a short window added, and one
/// longer than the retention.
const SEARCH: [&[(u64, u64, u64)]; 4] = [
    &[(5, 12, 2)],
    &[(15, 12, 2)],
    &[(5, 12, 2), (2, 10, 0)],
    &[(90, 20, 0)],
];

/// (a window of more than [`CALENDAR`] seconds is a calendar window, UTC,
/// of that many less)
fn configured(name: &str, windows: &[(u64, u64, u64)]) -> Pool {
    pool(
        name,
        windows
            .iter()
            .map(
                |&(secs, limit, headroom)| match secs.checked_sub(CALENDAR) {
                    Some(per) => Window {
                        aligned: Some(chrono_tz::UTC),
                        ..window(per, limit, headroom)
                    },
                    None => window(secs, limit, headroom),
                },
            )
            .collect(),
    )
}

/// Seconds above which a configured window is a calendar window.
const CALENDAR: u64 = 10_000;

/// The shares of the shares test (a replay on a credential named `sh…`):
/// trending keeps 40% of every window, search 3 units, up to 60%; calendar
/// periods lend after 80%.
fn test_shares() -> Shares {
    let share = |name: &str, reserve, limit| Share {
        name: name.into(),
        reserve,
        limit,
    };
    Shares {
        list: vec![
            share("trending", Amount::Basis(4_000), None),
            share("search", Amount::Units(3), Some(Amount::Basis(6_000))),
        ],
        lend_after: Some(8_000),
    }
}

/// Who charges in the shares test: the two shares and a job without one.
const JOBS: [&str; 3] = ["trending", "search", "backfill"];

/// The shares test's `units` and `search` pools: sliding and calendar
/// windows (10 s and 30 s periods), changed as [`UNITS`] are.
const SHARE_UNITS: [&[(u64, u64, u64)]; 4] = [
    &[(10, 22, 2), (3, 8, 0)],
    &[(CALENDAR + 10, 22, 2), (3, 8, 0)],
    &[(30, 22, 2), (CALENDAR + 30, 30, 0)],
    &[(10, 10, 2)],
];
const SHARE_SEARCH: [&[(u64, u64, u64)]; 2] = [&[(5, 12, 2)], &[(CALENDAR + 10, 12, 0)]];

/// The configurations of the long-log test: budgets that admit bursts of
/// hundreds of calls, changed the same ways as [`UNITS`] and [`SEARCH`].
const LONG_UNITS: [&[(u64, u64, u64)]; 5] = [
    &[(10, 900, 20), (3, 400, 0)],
    &[(30, 900, 20), (3, 400, 0)],
    &[(5, 900, 20)],
    &[(10, 300, 0), (3, 400, 0), (20, 1500, 0)],
    &[(120, 2000, 0)],
];
const LONG_SEARCH: [&[(u64, u64, u64)]; 3] = [&[(5, 500, 0)], &[(15, 700, 0)], &[(90, 900, 0)]];

/// The configurations a replay changes between.
type Configs = (
    &'static [&'static [(u64, u64, u64)]],
    &'static [&'static [(u64, u64, u64)]],
);

async fn replay(
    ledger: &impl Ledger,
    credential: &str,
    configs: Configs,
    ops: &[Op],
) -> Vec<String> {
    let (mut units, mut search) = (
        configured("units", configs.0[0]),
        configured("search", configs.1[0]),
    );
    let mut now = T0;
    let mut out = Vec::new();
    let shares = credential.starts_with("sh").then(test_shares);
    let shares = shares.as_ref();
    // Every allowed charge's receipt and `units` cost, oldest first.
    let mut receipts: Vec<(Receipt, u64)> = Vec::new();
    let keep = |receipts: &mut Vec<(Receipt, u64)>, d: &ChargeDecision, units: u64| {
        if let ChargeDecision::Allowed { receipt, .. } = d {
            receipts.push((receipt.clone(), units));
        }
    };
    for op in ops {
        match op {
            Op::Charge {
                dt_us,
                a,
                b,
                id,
                backwards,
                observe,
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
                    observe: *observe,
                    // (shares: who charges, from the op's numbers)
                    job: match shares {
                        Some(_) => JOBS[(*a as usize + *dt_us as usize) % JOBS.len()],
                        None => "j",
                    },
                    shares,
                    ..charge(credential, &cost)
                };
                // (a cost above a share's limit can never fit: an error, alike)
                let d = match ledger.charge(&c, At::Fixed(at)).await {
                    Err(e @ StoreError::CostExceedsBudget { .. }) if shares.is_some() => {
                        out.push(format!("{e:?}"));
                        continue;
                    }
                    d => d.expect("charge"),
                };
                keep(&mut receipts, &d, *a);
                out.push(format!("{d:?}"));
            }
            Op::Settle { back, actual } => {
                let Some((receipt, estimate)) = receipts.iter().rev().nth(*back) else {
                    continue;
                };
                let settled = ledger
                    .settle(
                        credential,
                        receipt,
                        ("units", *estimate, *actual),
                        At::Fixed(now),
                    )
                    .await
                    .expect("settle");
                out.push(format!("settle {estimate} to {actual}: {settled:?}"));
            }
            Op::Upstream {
                dt_us,
                remaining,
                reset,
            } => {
                now += dt_us;
                let reset = reset.map(|s| BlockEnd::At(now + s * S));
                let others = ledger
                    .upstream_remaining(credential, &units, *remaining, reset, At::Fixed(now))
                    .await
                    .expect("upstream");
                out.push(format!("{others:?}"));
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
            Op::Reconfigure {
                units: u,
                search: s,
            } => {
                units = configured("units", configs.0[*u % configs.0.len()]);
                search = configured("search", configs.1[*s % configs.1.len()]);
            }
            Op::Lose { dt_us } => {
                now += dt_us;
                let cost = [PoolCost {
                    pool: units.clone(),
                    units: 1,
                }];
                let c = Charge {
                    seen_serial: 1_000_000,
                    shares,
                    ..charge(credential, &cost)
                };
                let d = ledger.charge(&c, At::Fixed(now)).await.expect("charge");
                out.push(format!("{d:?}"));
            }
            Op::Idle { secs } => now += secs * S,
            Op::Burst {
                calls,
                gap_us,
                a,
                b,
            } => {
                for k in 0..*calls {
                    now += gap_us;
                    let mut cost = vec![PoolCost {
                        pool: units.clone(),
                        units: *a + (k % 3) as u64,
                    }];
                    if *b && k % 2 == 0 {
                        cost.push(PoolCost {
                            pool: search.clone(),
                            units: 1,
                        });
                    }
                    let c = Charge {
                        job: if k % 5 == 0 { "backfill" } else { "trending" },
                        shares,
                        ..charge(credential, &cost)
                    };
                    let d = ledger.charge(&c, At::Fixed(now)).await.expect("charge");
                    keep(&mut receipts, &d, cost[0].units);
                    out.push(format!("{d:?}"));
                }
            }
        }
        let mut read = vec![units.clone(), search.clone()];
        // (shares: what each share used of each pool, as the stores count it)
        for share in shares.iter().flat_map(|s| &s.list) {
            for p in [&units, &search] {
                read.push(Pool {
                    name: portion::ledger::shares::share_pool(&p.name, &share.name),
                    ..p.clone()
                });
            }
        }
        let usage = ledger
            .usage(credential, &read, At::Fixed(now))
            .await
            .expect("usage");
        out.push(format!("{usage:?}"));
    }
    out
}

/// Replay random sequences of `ops` against a real Redis and the embedded
/// store, each case on a credential of its own (`prefix` and a number), and
/// require every output to be equal. `cases_var` overrides `cases`.
fn both_stores_agree(
    ops: impl Strategy<Value = Vec<Op>>,
    configs: Configs,
    prefix: &str,
    cases_var: &str,
    cases: u32,
) {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = rt.block_on(RedisLedger::connect(&server.url())).unwrap();
    let embedded = EmbeddedLedger::open(&embedded_path(&dir)).unwrap();
    let case = std::sync::atomic::AtomicU32::new(0);
    let mut runner = TestRunner::new(Config {
        cases: std::env::var(cases_var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(cases),
        ..Config::default()
    });
    runner
        .run(&ops, |ops| {
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let credential = format!("{prefix}{n}");
            let (a, b) = rt.block_on(async {
                (
                    replay(&redis, &credential, configs, &ops).await,
                    replay(&embedded, &credential, configs, &ops).await,
                )
            });
            for (step, (r, e)) in a.iter().zip(&b).enumerate() {
                prop_assert_eq!(r, e, "output {} of {:?}", step, ops);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn embedded_store_answers_like_redis() {
    // Idle gaps take the fixed clock past the 60 s retention; Redis's keys
    // live on its real clock (minutes), so only the retention rule drops
    // entries, the same in both stores.
    both_stores_agree(
        proptest::collection::vec(op(), 1..30),
        (&UNITS, &SEARCH),
        "eq",
        "PROPTEST_CASES",
        256,
    );
}

/// Shares (issue 28): the same random sequences, charged by two jobs with
/// shares and one without, on pools of sliding and calendar windows whose
/// periods lend: every decision (which share kept the units, and how many)
/// and what each share used of every window must be equal.
#[test]
fn embedded_store_keeps_shares_like_redis() {
    both_stores_agree(
        proptest::collection::vec(op(), 1..30),
        (&SHARE_UNITS, &SHARE_SEARCH),
        "sh",
        "PROPTEST_CASES",
        256,
    );
}

/// The upstream's count against a calendar window as the pool's longest:
/// what the ledger counts there is its period's calls, not the last
/// period-length of calls (the embedded store counted the last period's
/// charge; the case the shares property test found).
#[test]
fn the_upstreams_count_in_a_calendar_window_is_taken_against_its_period() {
    let ops = [
        Op::Reconfigure {
            units: 1,
            search: 0,
        },
        // (at 25 s into a minute; the upstream's count at 34 s, in the next
        // 10 s period, the charge less than 10 s before)
        Op::Charge {
            dt_us: 5_000_000,
            a: 1,
            b: None,
            id: None,
            backwards: false,
            observe: false,
        },
        Op::Idle { secs: 9 },
        Op::Upstream {
            dt_us: 0,
            remaining: 0,
            reset: None,
        },
    ];
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = rt.block_on(RedisLedger::connect(&server.url())).unwrap();
    let embedded = EmbeddedLedger::open(&embedded_path(&dir)).unwrap();
    let configs = (&SHARE_UNITS[..], &SHARE_SEARCH[..]);
    let (r, e) = rt.block_on(async {
        (
            replay(&redis, "sh-up", configs, &ops).await,
            replay(&embedded, "sh-up", configs, &ops).await,
        )
    });
    assert_eq!(r, e);
}

/// A pool named by a charge that records nothing (a duplicate, a refusal, a
/// blocked credential) keeps its dead mark: only a recorded call moves it
/// (lua/charge.lua). Its calls past the retention at that charge count again
/// once a recorded call of another pool lengthens the retention, in both
/// stores. (The first sequence is the case the property test above shrank
/// to, found once in thousands of cases; the next two, the same with a
/// refusal and a block; the last, a review's: the window lengthened before
/// the duplicate.)
#[test]
fn a_charge_that_records_nothing_leaves_the_dead_mark_alone_in_both_stores() {
    let charge = |dt_us, a, b: Option<u64>, id: Option<u8>| Op::Charge {
        dt_us,
        a,
        b,
        id,
        backwards: false,
        observe: false,
    };
    // (the `units` pool's window of 120 s and the `search` pool's of 90 s:
    // the retention grows from 60 s to 120 s)
    let longer = Op::Reconfigure {
        units: 6,
        search: 3,
    };
    let sequences = [
        vec![
            charge(0, 1, Some(1), None),
            Op::Idle { secs: 59 },
            charge(751_270, 1, None, Some(2)),
            charge(248_730, 1, Some(1), Some(2)), // a duplicate
            longer.clone(),
            charge(0, 1, None, None),
        ],
        vec![
            charge(0, 1, Some(1), None),
            Op::Idle { secs: 59 },
            charge(500_000, 8, None, None),
            charge(500_000, 1, Some(1), None), // refused: 3 s window full
            longer.clone(),
            charge(3_000_000, 1, None, None),
        ],
        vec![
            charge(0, 1, Some(1), None),
            Op::Idle { secs: 59 },
            Op::Block {
                dt_us: 1_000_000,
                for_secs: 5,
            },
            charge(0, 1, Some(1), None), // blocked
            longer.clone(),
            Op::Idle { secs: 5 },
            charge(0, 1, None, None),
        ],
        // The window longer than the retention before the duplicate: the
        // duplicate's slide of it must not pass the search call either
        // (Redis saved that slide, a dead mark for one window).
        vec![
            charge(0, 1, Some(1), None),
            Op::Reconfigure {
                units: 0,
                search: 3,
            },
            Op::Idle { secs: 59 },
            charge(751_270, 1, None, Some(2)),
            charge(248_730, 1, Some(1), Some(2)), // a duplicate
            longer,
            charge(0, 1, None, None),
            charge(1_000_000, 1, Some(1), None),
        ],
    ];
    // (the search pool's units used at the end: the first call, and the
    // last sequence's last one)
    let used = ["used: 1,", "used: 1,", "used: 1,", "used: 2,"];
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = rt.block_on(RedisLedger::connect(&server.url())).unwrap();
    let embedded = EmbeddedLedger::open(&embedded_path(&dir)).unwrap();
    for (k, ops) in sequences.iter().enumerate() {
        let credential = format!("dead{k}");
        let (r, e) = rt.block_on(async {
            (
                replay(&redis, &credential, (&UNITS, &SEARCH), ops).await,
                replay(&embedded, &credential, (&UNITS, &SEARCH), ops).await,
            )
        });
        let search = r.last().unwrap().split(r#"pool: "search""#).nth(1);
        assert!(
            search.is_some_and(|s| s.contains(used[k])),
            "sequence {k}: the search call at the start counts again: {r:?}"
        );
        for (step, (r, e)) in r.iter().zip(&e).enumerate() {
            assert_eq!(r, e, "sequence {k}, output {step} of {ops:?}");
        }
    }
}

fn long_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (40usize..400, 0i64..40_000, 1u64..=3, proptest::bool::ANY)
            .prop_map(|(calls, gap_us, a, b)| Op::Burst { calls, gap_us, a, b }),
        3 => (0i64..1_900_000, 1u64..=300, proptest::option::of(1u64..=10), proptest::option::of(0u8..4))
            .prop_map(|(dt_us, a, b, id)| Op::Charge { dt_us, a, b, id, backwards: false, observe: false }),
        2 => (0..LONG_UNITS.len(), 0..LONG_SEARCH.len()).prop_map(|(units, search)| Op::Reconfigure { units, search }),
        3 => (1i64..40).prop_map(|secs| Op::Idle { secs }),
        1 => (0i64..1_900_000).prop_map(|dt_us| Op::Lose { dt_us }),
        2 => (0usize..300, 0u64..400).prop_map(|(back, actual)| Op::Settle { back, actual }),
        1 => (0usize..300, prop_oneof![Just((1u64 << 53) - 1), 2000u64..5000])
            .prop_map(|(back, actual)| Op::Settle { back, actual }),
        2 => (0i64..1_900_000, 0u64..2000, proptest::option::of(1i64..30))
            .prop_map(|(dt_us, remaining, reset)| Op::Upstream { dt_us, remaining, reset }),
    ]
}

/// The same agreement over logs of thousands of calls: Redis passes whole
/// blocks of its log through its index (a window's start, its sum, when
/// units free up, the trim) and reads block summaries for usage, where the
/// embedded store counts rows; every decision and report must still agree.
#[test]
fn embedded_store_answers_like_redis_over_long_logs() {
    both_stores_agree(
        proptest::collection::vec(long_op(), 1..14),
        (&LONG_UNITS, &LONG_SEARCH),
        "long",
        "PROPTEST_LONG_CASES",
        12,
    );
}

/// A charge that needs units held by many blocks of calls: both stores give
/// the exact time at which the call holding the last unit needed leaves
/// (Redis finds it through its index, a binary search over blocks).
#[test]
fn the_retry_of_a_large_charge_after_many_calls_is_exact_in_both_stores() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = rt.block_on(RedisLedger::connect(&server.url())).unwrap();
    let embedded = EmbeddedLedger::open(&embedded_path(&dir)).unwrap();
    let units = configured("units", &[(10, 2000, 0)]);
    let ms = 1000;
    rt.block_on(async {
        for need in [1u64, 63, 64, 65, 200, 500, 700] {
            let credential = format!("large{need}");
            // 700 calls of cost 1, 2, 3, 1, 2, 3, ... one every ms: 1,400 units.
            let (mut held, mut times) = (0u64, Vec::new());
            for k in 0..700u64 {
                let at = T0 + k as i64 * ms;
                let cost = [PoolCost {
                    pool: units.clone(),
                    units: 1 + k % 3,
                }];
                let c = charge(&credential, &cost);
                assert!(matches!(
                    redis.charge(&c, At::Fixed(at)).await.unwrap(),
                    portion::ledger::ChargeDecision::Allowed { .. }
                ));
                assert!(matches!(
                    embedded.charge(&c, At::Fixed(at)).await.unwrap(),
                    portion::ledger::ChargeDecision::Allowed { .. }
                ));
                held += 1 + k % 3;
                times.push((at, held));
            }
            // A charge that overfills the window by `need` units, 1 s later.
            let now = T0 + 1000 * ms;
            let big = [PoolCost {
                pool: units.clone(),
                units: 2000 - held + need,
            }];
            let c = charge(&credential, &big);
            let expected_at = times.iter().find(|(_, h)| *h >= need).unwrap().0 + 10 * S;
            for d in [
                redis.charge(&c, At::Fixed(now)).await.unwrap(),
                embedded.charge(&c, At::Fixed(now)).await.unwrap(),
            ] {
                match d {
                    portion::ledger::ChargeDecision::Rejected { retry_after, .. } => assert_eq!(
                        retry_after.as_micros() as i64,
                        expected_at - now,
                        "need {need}: {d:?}"
                    ),
                    other => panic!("need {need}: {other:?}"),
                }
            }
        }
    });
}

/// Calls that left the retention at a recorded call count in no window
/// afterwards, even when the trim that follows is bounded (Redis trims
/// 16,384 calls a call) and the retention grows at that very call: both
/// stores count the calls still in the log but past that cutoff as gone.
#[test]
fn calls_past_the_retention_stay_gone_when_it_grows_before_they_are_trimmed() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = rt.block_on(RedisLedger::connect(&server.url())).unwrap();
    let embedded = EmbeddedLedger::open(&embedded_path(&dir)).unwrap();
    let ms = 1000;
    let (short, long, longer) = (
        configured("units", &[(10, 100_000, 0)]),
        configured("units", &[(120, 100_000, 0)]),
        configured("units", &[(130, 100_000, 0)]),
    );
    rt.block_on(async {
        for ledger in [&redis as &dyn DynLedger, &embedded] {
            // 20,000 calls, one a ms: the retention is the 60 s horizon.
            for i in 0..20_000 {
                ledger.charge_one("dead", &short, T0 + i * ms).await;
            }
            // At 78 s, 18,001 calls are at or before now - 60 s: more than
            // one trim removes. This call lengthens the window to 120 s.
            ledger.charge_one("dead", &long, T0 + 78 * S).await;
            // At 78.5 s the retention is 120 s, but the calls up to 18 s
            // stay gone: 1,999 calls after 18 s, and the one at 78 s.
            assert_eq!(
                ledger.used("dead", &long, T0 + 78 * S + 500 * ms).await,
                2_000
            );
            // A window changed again is counted afresh from the log: the
            // same 2,000, and this call.
            let left = ledger.charge_one("dead", &longer, T0 + 79 * S).await;
            assert_eq!(left, 100_000 - 2_001);
        }
    });
}

/// Just enough of a ledger for the test above, for both stores.
trait DynLedger {
    fn charge_one<'a>(
        &'a self,
        credential: &'a str,
        pool: &'a Pool,
        at: i64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = u64> + 'a>>;
    fn used<'a>(
        &'a self,
        credential: &'a str,
        pool: &'a Pool,
        at: i64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = u64> + 'a>>;
}

impl<L: Ledger> DynLedger for L {
    fn charge_one<'a>(
        &'a self,
        credential: &'a str,
        pool: &'a Pool,
        at: i64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = u64> + 'a>> {
        Box::pin(async move {
            let cost = [PoolCost {
                pool: pool.clone(),
                units: 1,
            }];
            match self.charge(&charge(credential, &cost), At::Fixed(at)).await {
                Ok(portion::ledger::ChargeDecision::Allowed { remaining, .. }) => {
                    remaining[0].remaining
                }
                d => panic!("{d:?}"),
            }
        })
    }
    fn used<'a>(
        &'a self,
        credential: &'a str,
        pool: &'a Pool,
        at: i64,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = u64> + 'a>> {
        Box::pin(async move {
            crate::common::ledger::used(self, credential, std::slice::from_ref(pool), at).await[0]
        })
    }
}

/// Calendar windows (UTC periods of 30 s, and a day in Los Angeles across
/// the fall-back night) beside sliding ones: the same random charges, fed
/// with the same clock readings, get the same decisions and usage reports
/// from both stores.
#[test]
fn calendar_windows_answer_alike_in_both_stores() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = rt.block_on(RedisLedger::connect(&server.url())).unwrap();
    let embedded = EmbeddedLedger::open(&embedded_path(&dir)).unwrap();
    let aligned = |secs, limit, zone: &str| portion::ledger::Window {
        aligned: Some(zone.parse().unwrap()),
        ..window(secs, limit, 0)
    };
    let units = pool(
        "units",
        vec![
            aligned(30, 12, "UTC"),
            window(10, 8, 0),
            aligned(86_400, 200, "America/Los_Angeles"),
        ],
    );
    // 2026-11-01 05:00 UTC: Saturday 22:00 PDT, three hours before the
    // 25-hour Sunday starts.
    let start = chrono::DateTime::parse_from_rfc3339("2026-11-01T05:00:00Z")
        .unwrap()
        .timestamp_micros();
    async fn replay(ledger: &impl Ledger, units: &Pool, start: i64) -> Vec<String> {
        let (mut now, mut seed, mut out) = (start, 7u64, Vec::new());
        // Units admitted per 30 s UTC period: never more than its 12, and
        // the full 12 again right after a reset (below).
        let mut per_period: std::collections::BTreeMap<i64, u64> = Default::default();
        for _ in 0..400 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            now += ((seed >> 33) % 90_000_000) as i64; // up to 90 s
            let cost = [PoolCost {
                pool: units.clone(),
                units: 1 + (seed >> 20) % 5,
            }];
            let d = ledger
                .charge(&charge("cal", &cost), At::Fixed(now))
                .await
                .unwrap();
            if d.is_allowed() {
                *per_period.entry(now / 30_000_000).or_default() += cost[0].units;
            }
            out.push(format!("{d:?}"));
            if (seed >> 40) % 10 == 0 {
                let u = ledger
                    .usage("cal", std::slice::from_ref(units), At::Fixed(now))
                    .await
                    .unwrap();
                out.push(format!("{u:?}"));
            }
        }
        assert!(per_period.values().all(|&u| u <= 12), "{per_period:?}");
        // Right after a reset the full 12 fit the 30 s window again (on a
        // credential whose day has room), and not one unit more. (The
        // sliding 10 s window holds 8: the last 4 come 10 s later.)
        let t = (now / 30_000_000 + 40) * 30_000_000;
        for (n, dt) in [(4, 0), (4, 0), (4, 10_000_000)] {
            let c = [PoolCost {
                pool: units.clone(),
                units: n,
            }];
            let d = ledger
                .charge(&charge("cal-burst", &c), At::Fixed(t + dt))
                .await
                .unwrap();
            assert!(d.is_allowed(), "{d:?}");
        }
        let c = [PoolCost {
            pool: units.clone(),
            units: 1,
        }];
        let d = ledger
            .charge(&charge("cal-burst", &c), At::Fixed(t + 29_999_999))
            .await
            .unwrap();
        assert!(
            matches!(&d, portion::ledger::ChargeDecision::Rejected { retry_after, .. } if retry_after.as_micros() == 1),
            "{d:?}"
        );
        out
    }
    rt.block_on(async {
        let (r, e) = (
            replay(&redis, &units, start).await,
            replay(&embedded, &units, start).await,
        );
        assert!(r.iter().any(|d| d.contains("Rejected")), "some refusals");
        for (k, (r, e)) in r.iter().zip(&e).enumerate() {
            assert_eq!(r, e, "output {k}");
        }
    });
}

/// A decision that records nothing (here, a blocked one) forgets no charge
/// id: a resend that arrives after it, at an earlier time on its host's
/// clock, is found in both stores (the property test above found the
/// embedded store's blocked decisions deleting ids past the horizon of
/// their own later time, where Redis's log still held them).
#[test]
fn a_blocked_decision_forgets_no_charge_id_in_either_store() {
    let c = |dt_us, id: Option<u8>, backwards| Op::Charge {
        dt_us,
        a: 1,
        b: None,
        id,
        backwards,
        observe: false,
    };
    let ops = vec![
        c(0, Some(2), false),
        Op::Idle { secs: 57 },
        c(1_000_000, None, false),
        Op::Block {
            dt_us: 500_000,
            for_secs: 5,
        },
        c(1_500_000, Some(0), false), // blocked, at T0 + 60 s
        c(0, Some(2), true),          // the first charge again, earlier
    ];
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = rt.block_on(RedisLedger::connect(&server.url())).unwrap();
    let embedded = EmbeddedLedger::open(&embedded_path(&dir)).unwrap();
    let (r, e) = rt.block_on(async {
        (
            replay(&redis, "ids", (&UNITS, &SEARCH), &ops).await,
            replay(&embedded, "ids", (&UNITS, &SEARCH), &ops).await,
        )
    });
    let resend = &r[r.len() - 2];
    assert!(resend.contains("duplicate: true"), "{r:?}");
    for (step, (r, e)) in r.iter().zip(&e).enumerate() {
        assert_eq!(r, e, "output {step} of {ops:?}");
    }
}
