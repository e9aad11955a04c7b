//! The charge's fast path (`fast_charge` in `lua/charge.lua`) against its
//! general path. The same charges go to two credentials: one takes the fast
//! path wherever it applies, its twin is forced through the general path (a
//! charge that names as estimated a pool it does not charge carries a flag
//! the fast path leaves alone, and reserves nothing). Every decision must be
//! the same, and so must the state they leave, field for field. Settles
//! change logged costs; the fast path keeps a copy of the calls at a
//! window's front (`front:pool:P`) only where no settle reaches.

use std::collections::VecDeque;

use portion::ledger::{At, Charge, ChargeDecision, Ledger, RedisLedger, state_key};

use crate::common::ledger::{T0, charge, cost, pool, window};
use crate::common::redis::RedisServer;

/// A decision without its receipt, which holds the charge id the store made
/// up (random per charge); the entries' numbers are in the state compared.
fn comparable(d: &ChargeDecision) -> String {
    match d {
        ChargeDecision::Allowed {
            at,
            serial,
            remaining,
            observed,
            ..
        } => format!("allowed {at} {serial} {remaining:?} {observed:?}"),
        other => format!("{other:?}"),
    }
}

/// One twin run: its charges, and what the two credentials must agree on.
struct Twins {
    /// Pool a's windows (seconds, limit) and pool b's.
    a: Vec<(u64, u64)>,
    b: Vec<(u64, u64)>,
    steps: usize,
    /// The most µs between two charges (each gap is random below it).
    gap_us: u64,
    /// The most units a charge of pool a costs (at least 1).
    units: u64,
    /// How many of pool a's latest allowed charges a settle picks from.
    unsettled: usize,
    /// The state is compared every this many steps (decisions at every one).
    compare_every: usize,
}

/// How a twin run went.
#[derive(Debug, Default)]
struct Counts {
    allowed: usize,
    rejected: usize,
    settles: usize,
    /// Steps after which the fast credential kept a window's front.
    fronts: usize,
}

impl Twins {
    async fn run(&self) -> Counts {
        let server = RedisServer::start();
        let ledger = RedisLedger::connect(&server.url()).await.unwrap();
        let mut con = ::redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let windows = |w: &[(u64, u64)]| w.iter().map(|&(s, l)| window(s, l, 0)).collect();
        let (a, b) = (pool("a", windows(&self.a)), pool("b", windows(&self.b)));
        let fields = ["meta", "pool:a", "pool:b", "blocked_until"];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % n
        };
        let (mut now, mut counts) = (T0, Counts::default());
        // (pool a's latest allowed charges not settled yet, in both)
        let mut unsettled = VecDeque::new();
        for step in 0..self.steps {
            now += next(self.gap_us) as i64;
            let units = 1 + next(self.units);
            let costs = match next(3) {
                0 => vec![cost(&a, units)],
                1 => vec![cost(&b, units)],
                _ => vec![cost(&a, units), cost(&b, 1 + next(3))],
            };
            let fast = ledger
                .charge(&charge("fast", &costs), At::Fixed(now))
                .await
                .unwrap();
            let general = Charge {
                estimated: &["not-charged"],
                ..charge("general", &costs)
            };
            let general = ledger.charge(&general, At::Fixed(now)).await.unwrap();
            assert_eq!(comparable(&fast), comparable(&general), "step {step}");
            match (fast, general) {
                (
                    ChargeDecision::Allowed { receipt: x, .. },
                    ChargeDecision::Allowed { receipt: y, .. },
                ) => {
                    counts.allowed += 1;
                    if let Some(units) = costs.iter().find(|c| c.pool.name == "a") {
                        unsettled.push_back((x, y, units.units));
                        if unsettled.len() > self.unsettled {
                            unsettled.pop_front();
                        }
                    }
                }
                _ => counts.rejected += 1,
            }
            if next(4) == 0
                && let Some((x, y, estimate)) =
                    unsettled.remove(next(self.unsettled as u64) as usize)
            {
                let actual = next(2 * self.units + 1);
                let settle = |c, r| ledger.settle(c, r, ("a", estimate, actual), At::Fixed(now));
                let (x, y) = (settle("fast", &x).await, settle("general", &y).await);
                assert_eq!(format!("{x:?}"), format!("{y:?}"), "step {step}: settle");
                counts.settles += 1;
            }
            if step % self.compare_every != 0 {
                continue;
            }
            let get = |c: &str, f: &str, con: &mut ::redis::Connection| -> Option<Vec<u8>> {
                ::redis::cmd("HGET")
                    .arg(state_key(c))
                    .arg(f)
                    .query(con)
                    .unwrap()
            };
            if get("fast", "front:pool:a", &mut con).is_some_and(|f| !f.is_empty()) {
                counts.fronts += 1;
            }
            for f in fields {
                let (x, y) = (get("fast", f, &mut con), get("general", f, &mut con));
                assert_eq!(x, y, "step {step}: field {f}");
            }
        }
        counts
    }
}

#[tokio::test]
async fn the_fast_path_decides_and_writes_as_the_general_path() {
    let counts = Twins {
        a: vec![(2, 30), (10, 100)],
        b: vec![(5, 40)],
        steps: 3000,
        gap_us: 400_000,
        units: 6,
        unsettled: 64,
        compare_every: 1,
    }
    .run()
    .await;
    // (both kinds of decision were made; a bug planted in the fast path,
    // such as not moving the dead mark, fails this test at its first step)
    assert!(
        counts.allowed > 1000 && counts.rejected > 100 && counts.settles > 300,
        "{counts:?}"
    );
}

/// Windows that hold thousands of calls, whose fronts lie more than a
/// settle's reach (4,096 calls) behind the newest: the fast path keeps them,
/// and settles land on calls near the fronts.
#[tokio::test]
async fn a_kept_front_slides_as_the_log_and_no_settle_changes_it() {
    let counts = Twins {
        a: vec![(6, 9_000), (12, 16_000)],
        b: vec![(5, 6_000)],
        steps: 16_000,
        gap_us: 2_000,
        units: 3,
        unsettled: 5_000,
        compare_every: 16,
    }
    .run()
    .await;
    // (pool a logs about 4,000 calls in 6 s and 8,000 in 12 s, a few
    // refused near its budgets: from about step 12,000 on, fronts are kept)
    assert!(
        counts.fronts > 100 && counts.settles > 2_500 && counts.rejected > 100,
        "{counts:?}"
    );
}
