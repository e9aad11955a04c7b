//! Metered costs (issue 13) in both stores at once: a settle far behind
//! its pool's newest call lands alike in each. The cases every store runs
//! on its own are in `common::metered`, run by `ledger_conformance`.

use portion::ledger::{EmbeddedLedger, Ledger, RedisLedger, SETTLE_REACH, Settled};

use crate::common::ledger::{S, T0, cost, embedded_path, pool, used, window};
use crate::common::metered::{charge_at, receipt, settle};
use crate::common::redis::RedisServer;

/// Further behind its pool's newest call than [`SETTLE_REACH`], an excess
/// goes on the newest call (counted later, so longer) and a refund is
/// dropped; both stores alike.
#[tokio::test]
async fn a_settle_far_behind_goes_on_the_newest_call_in_both_stores() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisLedger::connect(&server.url()).await.unwrap();
    let embedded = EmbeddedLedger::open(&embedded_path(&dir)).unwrap();
    async fn far_behind(ledger: impl Ledger) -> Vec<u64> {
        let tokens = pool(
            "tokens",
            vec![window(30, 1_000_000, 0), window(3, 1_000_000, 0)],
        );
        let early = receipt(&charge_at(&ledger, &[cost(&tokens, 10)], T0).await);
        let refund = receipt(&charge_at(&ledger, &[cost(&tokens, 10)], T0 + 1).await);
        let n = SETTLE_REACH as i64 + 1;
        for i in 0..n {
            assert!(
                charge_at(&ledger, &[cost(&tokens, 1)], T0 + 2 + i * 100)
                    .await
                    .is_allowed()
            );
        }
        let now = T0 + 10 * S;
        assert_eq!(settle(&ledger, &early, (10, 30), now).await, Settled::Late);
        assert_eq!(settle(&ledger, &refund, (10, 1), now).await, Settled::Late);
        // The excess of 20 sits on the newest call (T0 + 0.41 s), the
        // refund's estimate stays; at T0 + 30 s the first call has left.
        let mut out = used(&ledger, "settle", std::slice::from_ref(&tokens), now).await;
        out.extend(
            used(
                &ledger,
                "settle",
                std::slice::from_ref(&tokens),
                T0 + 30 * S,
            )
            .await,
        );
        out
    }
    let r = far_behind(redis).await;
    let e = far_behind(embedded).await;
    let calls = SETTLE_REACH + 1;
    assert_eq!(r, [10 + 10 + calls + 20, 0, 10 + calls + 20, 0]);
    assert_eq!(r, e);
}
