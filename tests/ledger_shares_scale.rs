//! A share's log at scale in Redis (issue 28, point 3): a call charged as
//! a share is logged twice, in its pool's log and in the share's, so the
//! work a charge does on logs is bounded across them, not per log: one
//! trim budget a charge for both (lua/charge/record.lua), and a slide that
//! reads no more of a log than it must (lua/charge/log.lua). Observed by
//! what Redis holds and counts (list lengths, commands run), never by time.
//!
//! Logs are filled by pipelined EVALSHA with fixed times, with the
//! arguments charge.lua's header documents (a charge through the ledger is
//! a round trip: tens of thousands take long in a debug build).

use portion::ledger::{
    Amount, At, Charge, ChargeDecision, EmbeddedLedger, IDEMPOTENCY_HORIZON, Ledger, Pool,
    RedisLedger, Share, Shares, index_key, log_key, log_segment_key, state_key,
};

use crate::common::ledger::{S, T0, charge, cost, embedded_path, pool, window};
use crate::common::redis::RedisServer;

/// A millisecond in µs.
const MS: i64 = 1000;
/// Calls a charge may trim in all (lua/charge.lua's TRIM).
const TRIM: i64 = 16_384;
/// How often a busy log counts its dead calls (lua/charge.lua's TRIM_EVERY).
const TRIM_EVERY: i64 = 128;

fn share_a() -> Shares {
    Shares {
        list: vec![Share {
            name: "a".into(),
            reserve: Amount::Units(10),
            limit: None,
        }],
        lend_after: None,
    }
}

/// Log `n` calls as share a of `units` (in its log and in a's), call `i`
/// at `T0 + i` ms, of [`fill_cost`]`(i)` units.
fn fill_as_a(server: &RedisServer, units: &Pool, n: i64) {
    let (mut con, sha) = server.with_charge_script();
    let a = format!("{}/a", units.name);
    for batch in (0..n).collect::<Vec<_>>().chunks(5000) {
        let mut pipe = ::redis::pipe();
        for &i in batch {
            let cmd = pipe.cmd("EVALSHA").arg(&sha).arg(5).arg(state_key("cred"));
            cmd.arg(log_key("cred", &units.name))
                .arg(log_key("cred", &a));
            cmd.arg(index_key("cred", &units.name))
                .arg(index_key("cred", &a));
            cmd.arg(T0 + i * MS).arg(i + 1).arg(16); // (shares)
            cmd.arg(IDEMPOTENCY_HORIZON.as_micros() as u64)
                .arg("tag:e\ta")
                .arg(0);
            cmd.arg(2)
                .arg(format!("pool:{}", units.name))
                .arg(format!("pool:{a}"));
            for _ in 0..2 {
                cmd.arg(fill_cost(i)).arg(units.windows.len());
                for w in &units.windows {
                    cmd.arg(w.per.as_micros() as u64).arg(w.budget());
                }
            }
            // (one own pool, two recorded, never lends, no other share)
            cmd.arg(1).arg(2).arg(-1).arg(0).ignore();
        }
        let () = pipe.query(&mut con).unwrap();
    }
}

/// What [`fill_as_a`]'s call `i` costs: 1, 2 or 3 units, so that a sum
/// read from the wrong field or call would show.
fn fill_cost(i: i64) -> u64 {
    1 + (i % 3) as u64
}

/// The calls segment 0 of `pool`'s log holds (4 items a call).
fn held(server: &RedisServer, pool: &str) -> i64 {
    let len: i64 = (server.cli(&["LLEN", &log_segment_key("cred", pool, 0)]))
        .trim()
        .parse()
        .unwrap();
    len / 4
}

async fn as_a(ledger: &RedisLedger, shares: &Shares, units: &Pool, at: i64) {
    let costs = [cost(units, 1)];
    let c = Charge {
        job: "a",
        shares: Some(shares),
        ..charge("cred", &costs)
    };
    let d = ledger.charge(&c, At::Fixed(at)).await.expect("charge");
    assert!(matches!(d, ChargeDecision::Allowed { .. }), "{d:?}");
}

/// 40,000 calls as share a, then a charge when 35,001 of them have left the
/// 60 s retention: in the pool's log and a's, 70,002 dead calls, more than
/// a budget's worth in each. That charge trims one budget in all, not one
/// per log (red before: 2 x 16,384); later charges trim the rest, and both
/// logs come down to the calls that still count, as a lone pool's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_as_a_share_trims_one_budget_across_its_logs() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.expect("connect");
    let units = pool("units", vec![window(10, 1_000_000_000, 0)]);
    let n = 40_000;
    fill_as_a(&server, &units, n);
    assert_eq!((held(&server, "units"), held(&server, "units/a")), (n, n));
    let shares = share_a();
    // (T0 + 95 s: calls at or before T0 + 35 s count in no window)
    let now = T0 + 95 * S;
    as_a(&ledger, &shares, &units, now).await;
    let (pool_left, a_left) = (held(&server, "units"), held(&server, "units/a"));
    assert_eq!(
        pool_left + a_left,
        2 * (n + 1) - TRIM,
        "one budget across both logs ({pool_left} and {a_left} calls left)"
    );
    // Every TRIM_EVERY calls a log counts its dead calls again; each count
    // trims at most a budget in all, far more than the calls logged since.
    let more = 4 * TRIM_EVERY;
    for j in 1..=more {
        as_a(&ledger, &shares, &units, now + j * MS).await;
    }
    // (alive at the end: the filled calls after T0 + 35 s + `more` ms,
    // and every charge since; at most TRIM_EVERY more died since a count)
    let live = (n - 35_001 - more) + 1 + more;
    for log in ["units", "units/a"] {
        let left = held(&server, log);
        assert!(
            left >= live && left <= live + TRIM_EVERY,
            "{log}: {left} calls held, {live} live"
        );
    }
    assert_eq!(held(&server, "units"), held(&server, "units/a"));
}

/// The sum of `pool`'s first window as its state holds it (pool:P, packed
/// doubles: head, tail, window count, then per window its length and sum).
fn window_sum(server: &RedisServer, pool: &str) -> u64 {
    let mut con = ::redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let field: Vec<u8> = ::redis::cmd("HGET")
        .arg(state_key("cred"))
        .arg(format!("pool:{pool}"))
        .query(&mut con)
        .unwrap();
    f64::from_le_bytes(field[32..40].try_into().unwrap()) as u64
}

/// Redis's count of the list reads its scripts ran since the last call.
fn list_reads(server: &RedisServer) -> u64 {
    let info = server.cli(&["INFO", "commandstats"]);
    server.cli(&["CONFIG", "RESETSTAT"]);
    (info.lines())
        .filter(|l| l.starts_with("cmdstat_lrange:") || l.starts_with("cmdstat_lindex:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// 10,000 calls of 1 to 3 units as share a within 10 s, then charges as a while they leave
/// the 30 s window: half of them, all but the tail's block, all (the
/// charges since still in it), then every call, older than the retention
/// too. Each charge's units left are exact, in the pool's window and in
/// a's as stored; and once every call before the tail's block has left, a
/// charge reads each log's end only: at most five list reads a log, trim's
/// count included (red before: 18, then 12 a log, the rest of the oldest
/// block read 16 calls at a time and the index searched block by block).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_as_a_share_slides_both_logs_exactly_reading_their_ends() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.expect("connect");
    let budget = 1_000_000_000;
    let units = pool("units", vec![window(30, budget, 0)]);
    let n = 10_000;
    fill_as_a(&server, &units, n);
    let shares = share_a();
    let mut at: Vec<(i64, u64)> = (0..n).map(|i| (T0 + i * MS, fill_cost(i))).collect();
    for (k, now) in [35 * S, 39_990 * MS, 45 * S, 80 * S]
        .into_iter()
        .enumerate()
    {
        let now = T0 + now;
        list_reads(&server);
        let costs = [cost(&units, 1)];
        let c = Charge {
            job: "a",
            shares: Some(&shares),
            ..charge("cred", &costs)
        };
        let d = ledger.charge(&c, At::Fixed(now)).await.expect("charge");
        let reads = list_reads(&server);
        at.push((now, 1));
        let used: u64 = (at.iter())
            .filter(|&&(t, _)| t > now - 30 * S)
            .map(|&(_, c)| c)
            .sum();
        let ChargeDecision::Allowed { remaining, .. } = d else {
            panic!("{d:?}")
        };
        assert_eq!(remaining[0].remaining, budget - used, "charge {k}");
        assert_eq!(
            (window_sum(&server, "units"), window_sum(&server, "units/a")),
            (used, used),
            "charge {k}: the windows as stored, the pool's and a's"
        );
        if k % 2 == 1 {
            // (per log: the window's oldest calls, the last complete
            // block's record, the tail's block; then the trim's count)
            assert!(reads <= 2 * 5, "charge {k}: {reads} list reads");
        }
    }
}

/// The embedded store alike: 600 calls as share a, of which 400 have left
/// the 60 s retention at the next charge; that charge deletes one batch
/// of rows (256) in all from the pool's log and a's, not one a log (red
/// before: 512), and three more charges leave both with the calls that
/// still count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_prunes_one_batch_across_a_shares_logs() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = EmbeddedLedger::open(&embedded_path(&dir)).expect("open");
    let units = pool("units", vec![window(10, 1_000_000_000, 0)]);
    let shares = share_a();
    let costs = [cost(&units, 1)];
    let c = Charge {
        job: "a",
        shares: Some(&shares),
        ..charge("cred", &costs)
    };
    for i in 1..=600 {
        ledger
            .charge(&c, At::Fixed(T0 + i * 100 * MS))
            .await
            .unwrap();
    }
    let db = rusqlite::Connection::open(embedded_path(&dir)).unwrap();
    let rows = |pool: &str| -> i64 {
        let sql = "SELECT count(*) FROM log WHERE credential = 'cred' AND pool = ?1";
        (db.query_row(sql, [pool], |r| r.get(0))).unwrap()
    };
    assert_eq!((rows("units"), rows("units/a")), (600, 600));
    // (T0 + 100 s: calls at or before T0 + 40 s count in no window)
    let now = T0 + 100 * S;
    ledger.charge(&c, At::Fixed(now)).await.unwrap();
    assert_eq!(rows("units") + rows("units/a"), 2 * 601 - 256);
    for j in 1..=3 {
        ledger.charge(&c, At::Fixed(now + j * MS)).await.unwrap();
    }
    // (the calls after T0 + 40 s, and the four charges since)
    assert_eq!((rows("units"), rows("units/a")), (200 + 4, 200 + 4));
}
