//! The charge's fast path (`fast_charge` in `lua/charge.lua`) against its
//! general path. The same charges go to two credentials: one takes the fast
//! path wherever it applies, its twin is forced through the general path (a
//! charge that names as estimated a pool it does not charge carries a flag
//! the fast path leaves alone, and reserves nothing). Every decision must be
//! the same, and so must the state they leave, field for field. Settles
//! change logged costs, some of them in the fast path's copy of a window's
//! front (`front:pool:P`), which a settle must drop.

use quota::ledger::{At, Charge, ChargeDecision, Ledger, RedisLedger, state_key};

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

#[tokio::test]
async fn the_fast_path_decides_and_writes_as_the_general_path() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let mut con = ::redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let a = pool("a", vec![window(2, 30, 0), window(10, 100, 0)]);
    let b = pool("b", vec![window(5, 40, 0)]);
    let fields = ["meta", "pool:a", "pool:b", "blocked_until"];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: u64| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (seed >> 33) % n
    };
    let (mut now, mut allowed, mut rejected) = (T0, 0, 0);
    // (the latest allowed charges of pool a not settled yet, in both: a
    // settle picks one, most often one at a window's front; how many
    // settles, and how many steps found the fast path's front kept)
    let mut unsettled = std::collections::VecDeque::new();
    let (mut settles, mut fronts) = (0, 0);
    for step in 0..3000 {
        now += next(400) as i64 * 1000;
        let units = 1 + next(6);
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
                allowed += 1;
                if let Some(units) = costs.iter().find(|c| c.pool.name == "a") {
                    unsettled.push_back((x, y, units.units));
                    if unsettled.len() > 64 {
                        unsettled.pop_front();
                    }
                }
            }
            _ => rejected += 1,
        }
        if next(4) == 0
            && let Some((x, y, estimate)) = unsettled.remove(next(64) as usize)
        {
            let actual = next(9);
            let settled = |c, r| ledger.settle(c, r, ("a", estimate, actual), At::Fixed(now));
            let (x, y) = (settled("fast", &x).await, settled("general", &y).await);
            assert_eq!(format!("{x:?}"), format!("{y:?}"), "step {step}: settle");
            settles += 1;
        }
        let front: Option<Vec<u8>> = ::redis::cmd("HGET")
            .arg(state_key("fast"))
            .arg("front:pool:a")
            .query(&mut con)
            .unwrap();
        if front.is_some_and(|f| !f.is_empty()) {
            fronts += 1;
        }
        for f in fields {
            let get = |c: &str, con: &mut ::redis::Connection| -> Option<Vec<u8>> {
                ::redis::cmd("HGET")
                    .arg(state_key(c))
                    .arg(f)
                    .query(con)
                    .unwrap()
            };
            let (x, y) = (get("fast", &mut con), get("general", &mut con));
            assert_eq!(x, y, "step {step}: field {f}");
        }
    }
    // (both kinds of decision were made; a bug planted in the fast path,
    // such as not moving the dead mark, fails this test at its first step)
    assert!(allowed > 1000 && rejected > 100, "{allowed} / {rejected}");
    assert!(
        settles > 300 && fronts > 300,
        "{settles} settles, {fronts} fronts"
    );
}
