//! A Redis log longer than one segment (`lua/charge.lua`: 65,536 calls a
//! list, so that no read walks a long list): decisions, retries and usage
//! stay exact across segment boundaries; segments that left are unlinked;
//! a log past its expiry is empty, not lost; a segment that vanished makes
//! its pool count as spent; the one-list log of the build before segments
//! is refused.
//!
//! Logs are filled by pipelined EVALSHA with fixed times (a charge through
//! the ledger is a round trip: 140,000 of them would take minutes in a
//! debug build), with the arguments charge.lua's header documents.

use portion::ledger::{
    At, ChargeDecision, IDEMPOTENCY_HORIZON, LOG_SEGMENT, Ledger, Pool, RedisLedger, StoreError,
    index_segment_key, log_key, log_segment_key, state_key,
};

use crate::common::ledger::{S, T0, charge, cost, pool, used, window};
use crate::common::redis::RedisServer;

/// A millisecond in µs.
const MS: i64 = 1000;

/// The calls a test logged: time and cost of each, oldest first.
struct Log {
    at: Vec<i64>,
    cost: Vec<u64>,
}

impl Log {
    /// The cost of the calls inside the window of length `per_s` at `now`.
    fn used(&self, per_s: i64, now: i64) -> u64 {
        self.at
            .iter()
            .zip(&self.cost)
            .filter(|&(&t, _)| t > now - per_s * S && t <= now)
            .map(|(_, &c)| c)
            .sum()
    }

    /// When `need` units of the window of length `per_s` at `now` will
    /// have left it: when the newest of the oldest calls holding them does.
    fn freed_at(&self, per_s: i64, now: i64, need: u64) -> i64 {
        let mut freed = 0;
        for (&t, &c) in self.at.iter().zip(&self.cost) {
            if t > now - per_s * S && t <= now {
                freed += c;
                if freed >= need {
                    return t + per_s * S;
                }
            }
        }
        panic!("fewer than {need} units in the window");
    }
}

/// Log `n` calls of `pool` for `credential`, call `i` at `T0 + i` ms with
/// cost `1 + i % 3`, tagged by two endpoints in turn.
fn fill(server: &RedisServer, credential: &str, pool: &Pool, n: i64) -> Log {
    fill_from(server, credential, pool, 0, n)
}

/// Log calls `from..to` as [`fill`] numbers them; the [`Log`] holds all of
/// `0..to`.
fn fill_from(server: &RedisServer, credential: &str, pool: &Pool, from: i64, n: i64) -> Log {
    let (mut con, sha) = server.with_charge_script();
    let log = Log {
        at: (0..n).map(|i| T0 + i * MS).collect(),
        cost: (0..n).map(|i| 1 + (i % 3) as u64).collect(),
    };
    for batch in (from..n).collect::<Vec<_>>().chunks(5000) {
        let mut pipe = ::redis::pipe();
        for &i in batch {
            let cmd = pipe
                .cmd("EVALSHA")
                .arg(&sha)
                .arg(3)
                .arg(state_key(credential))
                .arg(log_key(credential, &pool.name))
                .arg(portion::ledger::index_key(credential, &pool.name))
                .arg(log.at[i as usize])
                .arg(i + 1) // charge id
                .arg("0")
                .arg(IDEMPOTENCY_HORIZON.as_micros() as u64)
                .arg(if i % 2 == 0 { "tag:a\tj" } else { "tag:b\tj" })
                .arg(0)
                .arg(1)
                .arg(format!("pool:{}", pool.name))
                .arg(log.cost[i as usize])
                .arg(pool.windows.len());
            for w in &pool.windows {
                cmd.arg(w.per.as_micros() as u64).arg(w.budget());
            }
            cmd.ignore();
        }
        let () = pipe.query(&mut con).unwrap();
    }
    log
}

fn exists(server: &RedisServer, key: &str) -> bool {
    server.cli(&["EXISTS", key]) == "1"
}

#[tokio::test]
async fn a_log_across_segments_decides_and_reports_exactly() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let big = 1_000_000_000;
    let units = pool("units", vec![window(10, big, 0), window(100, big, 0)]);
    let n = 140_000; // segments 0, 1 and 2
    let log = fill(&server, "seg", &units, n);
    for k in 0..3 {
        assert!(exists(&server, &log_segment_key("seg", "units", k)));
        assert!(exists(&server, &index_segment_key("seg", "units", k)));
    }
    assert!(!exists(&server, &log_segment_key("seg", "units", 3)));
    let now = T0 + n * MS;
    let (used_10, used_100) = (log.used(10, now), log.used(100, now));
    // The status read: blocks of three index segments, calls where a
    // window's start cuts a block; the 100 s window starts in segment 0.
    assert_eq!(
        used(&ledger, "seg", std::slice::from_ref(&units), now).await,
        [used_10, used_100]
    );
    let u = ledger
        .usage("seg", std::slice::from_ref(&units), At::Fixed(now))
        .await
        .unwrap();
    let by_endpoint = &u.pools[0].windows[1].by_endpoint;
    assert_eq!(by_endpoint.values().sum::<u64>(), used_100);
    assert!(
        by_endpoint["a"] > 0 && by_endpoint["b"] > 0,
        "{by_endpoint:?}"
    );

    // A charge that needs 70,000 units of the 100 s window to leave: the
    // calls holding them reach from segment 0 into segment 1.
    let need = 70_000;
    let tight = pool(
        "units",
        vec![window(10, big, 0), window(100, used_100 + 10 - need, 0)],
    );
    let one = [cost(&tight, 10)];
    let expected = log.freed_at(100, now, need);
    assert!(
        log.at[LOG_SEGMENT as usize] < expected - 100 * S,
        "crosses a segment"
    );
    let d = ledger
        .charge(&charge("seg", &one), At::Fixed(now))
        .await
        .unwrap();
    let ChargeDecision::Rejected { retry_after, .. } = d else {
        panic!("{d:?}")
    };
    assert_eq!(retry_after.as_micros() as i64, expected - now);

    // The index segment in the middle vanishes: the same answers, walking.
    server.cli(&["DEL", &index_segment_key("seg", "units", 1)]);
    let d = ledger
        .charge(&charge("seg", &one), At::Fixed(now))
        .await
        .unwrap();
    let ChargeDecision::Rejected { retry_after, .. } = d else {
        panic!("{d:?}")
    };
    assert_eq!(retry_after.as_micros() as i64, expected - now);
    assert_eq!(
        used(&ledger, "seg", std::slice::from_ref(&units), now).await,
        [used_10, used_100]
    );
    // And the slide past it, 30 s later, lands exactly.
    let later = now + 30 * S;
    let d = ledger
        .charge(&charge("seg", &[cost(&units, 1)]), At::Fixed(later))
        .await
        .unwrap();
    let ChargeDecision::Allowed { remaining, .. } = d else {
        panic!("{d:?}")
    };
    assert_eq!(remaining[1].remaining, big - log.used(100, later) - 1);

    // A log segment in the middle vanishes: the pool counts as spent.
    server.cli(&["DEL", &log_segment_key("seg", "units", 1)]);
    let d = ledger
        .charge(
            &charge("seg", &[cost(&units, 1)]),
            At::Fixed(later + 30 * S),
        )
        .await
        .unwrap();
    assert!(matches!(d, ChargeDecision::LogLost { .. }), "{d:?}");
}

#[tokio::test]
async fn segments_that_left_are_unlinked_and_the_head_trimmed() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    // A 10 s window: calls stay for the 60 s horizon, then are trimmed.
    let units = pool("units", vec![window(10, 1_000_000_000, 0)]);
    let n = 140_000;
    let log = fill(&server, "trim", &units, n);
    let now = T0 + n * MS;
    let seg = |k| log_segment_key("trim", "units", k);
    // Segment 0 (calls of 0 to 65.5 s) left the 60 s retention whole; the
    // head of segment 1 was trimmed up to it, a bounded step at a time.
    assert!(!exists(&server, &seg(0)));
    assert!(!exists(&server, &index_segment_key("trim", "units", 0)));
    let kept: i64 = server.cli(&["LLEN", &seg(1)]).parse().unwrap();
    let first: i64 = server.cli(&["LINDEX", &seg(1), "0"]).parse().unwrap();
    assert!(kept < LOG_SEGMENT as i64 * 4, "segment 1 trimmed");
    assert!(
        first > now - 60 * S - 20 * S && first <= now - 60 * S + MS,
        "the head is the retention's cutoff at the last call, within a bounded step: {}",
        (now - first) / MS
    );
    assert_eq!(
        used(&ledger, "trim", std::slice::from_ref(&units), now).await,
        [log.used(10, now)]
    );
    // 61 s after the last call, every call has left: the segments go, and
    // the next call starts the tail's segment afresh.
    let d = ledger
        .charge(&charge("trim", &[cost(&units, 5)]), At::Fixed(now + 61 * S))
        .await
        .unwrap();
    let ChargeDecision::Allowed { remaining, .. } = d else {
        panic!("{d:?}")
    };
    assert_eq!(remaining[0].remaining, 1_000_000_000 - 5);
    assert!(!exists(&server, &seg(1)));
    assert_eq!(server.cli(&["LLEN", &seg(2)]), "4", "only the new call");
    assert_eq!(
        used(&ledger, "trim", std::slice::from_ref(&units), now + 62 * S).await,
        [5]
    );
}

/// A pool charged once, then idle while another pool of its credential is
/// charged: its log expires (every call had long left), and its next charge
/// finds an empty log, not a lost one.
#[tokio::test]
async fn a_log_past_its_expiry_is_empty_not_lost() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let busy = pool("busy", vec![window(60, 1000, 0)]);
    let quiet = pool("quiet", vec![window(60, 4, 0)]);
    assert!(
        ledger
            .charge(&charge("exp", &[cost(&quiet, 3)]), At::Fixed(T0))
            .await
            .unwrap()
            .is_allowed()
    );
    let quiet_log = log_segment_key("exp", "quiet", 0);
    let ttl: i64 = server.cli(&["PTTL", &quiet_log]).parse().unwrap();
    assert!(ttl > 60_000, "{ttl}");
    // The busy pool's charges every 30 s keep the state alive; the quiet
    // log's TTL runs out with the fixed clock (as Redis would expire it).
    let mut t = 0;
    while t <= 10 * 60 {
        t += 30;
        let left: i64 = server.cli(&["PTTL", &quiet_log]).parse().unwrap();
        if left > 0 && left <= 30_000 {
            server.cli(&["DEL", &quiet_log]);
        } else if left > 0 {
            server.cli(&["PEXPIRE", &quiet_log, &(left - 30_000).to_string()]);
        }
        let d = ledger
            .charge(&charge("exp", &[cost(&busy, 1)]), At::Fixed(T0 + t * S))
            .await
            .unwrap();
        assert!(d.is_allowed(), "{d:?}");
    }
    assert!(!exists(&server, &quiet_log), "the quiet log expired");
    let u = ledger
        .usage("exp", std::slice::from_ref(&quiet), At::Fixed(T0 + t * S))
        .await
        .unwrap();
    assert_eq!(u.pools[0].log_lost, None, "status: not lost");
    assert_eq!(u.pools[0].windows[0].remaining, 4);
    let d = ledger
        .charge(&charge("exp", &[cost(&quiet, 4)]), At::Fixed(T0 + t * S))
        .await
        .unwrap();
    let ChargeDecision::Allowed { remaining, .. } = d else {
        panic!("{d:?}")
    };
    assert_eq!(remaining[0].remaining, 0);
}

/// What the builds before this layout left is refused, not read: one list
/// per pool at the prefix itself with a pool state two fields shorter (the
/// build before segments), and a meta of four numbers (the build before
/// the loss time). A charge and a status both fail with the older-layout
/// error, and nothing is written.
#[tokio::test]
async fn keys_of_the_builds_before_this_layout_are_refused_and_left_alone() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let units = pool("units", vec![window(100, 1_000_000, 0)]);
    fill(&server, "old", &units, 300);
    fill(&server, "meta4", &units, 10);
    let mut con = ::redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let field = |credential: &str, name: &str, con: &mut ::redis::Connection| -> Vec<u8> {
        ::redis::cmd("HGET")
            .arg(state_key(credential))
            .arg(name)
            .query(con)
            .unwrap()
    };
    // Back to the older layouts.
    let state = field("old", "pool:units", &mut con);
    let () = ::redis::cmd("HSET")
        .arg(state_key("old"))
        .arg("pool:units")
        .arg(&state[..state.len() - 16])
        .query(&mut con)
        .unwrap();
    server.cli(&[
        "RENAME",
        &log_segment_key("old", "units", 0),
        &log_key("old", "units"),
    ]);
    server.cli(&["DEL", &index_segment_key("old", "units", 0)]);
    let meta = field("meta4", "meta", &mut con);
    let () = ::redis::cmd("HSET")
        .arg(state_key("meta4"))
        .arg("meta")
        .arg(&meta[..32])
        .query(&mut con)
        .unwrap();

    let now = T0 + 300 * MS + 20 * S;
    for credential in ["old", "meta4"] {
        let dump = |con: &mut ::redis::Connection| {
            let keys: Vec<String> = ::redis::cmd("KEYS").arg("*").query(con).unwrap();
            let state: Vec<(String, Vec<u8>)> = ::redis::cmd("HGETALL")
                .arg(state_key(credential))
                .query(con)
                .unwrap();
            (keys, state)
        };
        let before = dump(&mut con);
        let e = ledger
            .charge(&charge(credential, &[cost(&units, 1)]), At::Fixed(now))
            .await
            .unwrap_err();
        assert!(
            matches!(e, StoreError::OlderLayout { .. }),
            "{credential}: {e:?}"
        );
        let e = ledger
            .usage(credential, std::slice::from_ref(&units), At::Fixed(now))
            .await
            .unwrap_err();
        assert!(
            matches!(e, StoreError::OlderLayout { .. }),
            "{credential}: {e:?}"
        );
        assert_eq!(dump(&mut con), before, "{credential}: nothing written");
    }
    assert_eq!(server.cli(&["LLEN", &log_key("old", "units")]), "1200");
}

/// An index segment that lost records while logging went on: later records
/// count from a new origin, and a record out of place (the segment shorter
/// at its end) names another block. Neither may be read as the block
/// asked for or subtracted across origins: the answers stay exact.
#[tokio::test]
async fn index_records_of_another_origin_or_place_are_never_mixed() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let units = pool("units", vec![window(200, 1_000_000_000, 0)]);
    let ix = |k| index_segment_key("orig", "units", k);
    fill_from(&server, "orig", &units, 0, 70_000);
    // Blocks 512 to 546 lose their records; block 547 then finds no
    // predecessor and starts a new origin.
    server.cli(&["DEL", &ix(1)]);
    let log = fill_from(&server, "orig", &units, 70_000, 100_000);
    let now = T0 + 100_000 * MS;
    // A need that frees at call 90,000, in the new origin's records; the
    // search starts in block 0's origin.
    let need: u64 = log.cost[..=90_000].iter().sum();
    let used_now = log.used(200, now);
    let tight = pool("units", vec![window(200, used_now + 1 - need, 0)]);
    let expected = log.freed_at(200, now, need);
    assert_eq!(expected, T0 + 90_000 * MS + 200 * S);
    let retry = |d: ChargeDecision| match d {
        ChargeDecision::Rejected { retry_after, .. } => retry_after.as_micros() as i64,
        d => panic!("{d:?}"),
    };
    let one = [cost(&tight, 1)];
    let d = ledger
        .charge(&charge("orig", &one), At::Fixed(now))
        .await
        .unwrap();
    assert_eq!(retry(d), expected - now);
    // The last record of index segment 0 goes: every position in it is one
    // off, and each record names a block one before the one asked for.
    server.cli(&["RPOP", &ix(0)]);
    let need: u64 = log.cost[..=30_000].iter().sum();
    let tight = pool("units", vec![window(200, used_now + 1 - need, 0)]);
    let one = [cost(&tight, 1)];
    let d = ledger
        .charge(&charge("orig", &one), At::Fixed(now))
        .await
        .unwrap();
    assert_eq!(retry(d), log.freed_at(200, now, need) - now);
    assert_eq!(
        used(&ledger, "orig", std::slice::from_ref(&units), now).await,
        [used_now]
    );
}

/// Review findings on Redis alone: a state lost while its log lives is a
/// lost log (its live calls may be anywhere); in observe mode a log shorter
/// than its state is reported and recorded through; a Late settle sent
/// again adds nothing; the keys live until others' units leave.
#[tokio::test]
async fn lost_state_short_logs_late_resends_and_others_ttl() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let units = pool("units", vec![window(100, 1_000_000_000, 0)]);
    let one = [cost(&units, 1)];
    let log = fill(&server, "st", &units, 5000);
    let now = T0 + 5000 * MS;
    server.cli(&["DEL", &state_key("st")]);
    let d = ledger
        .charge(&charge("st", &one), At::Fixed(now))
        .await
        .unwrap();
    assert!(matches!(d, ChargeDecision::LogLost { .. }), "{d:?}");

    // Observe mode, a log segment gone under a live state.
    let log2 = fill(&server, "short", &units, 300);
    server.cli(&["DEL", &log_segment_key("short", "units", 0)]);
    let tight = pool("units", vec![window(100, 100, 0)]);
    let c = [cost(&tight, 1)];
    let observe = portion::ledger::Charge {
        observe: true,
        ..charge("short", &c)
    };
    let d = ledger
        .charge(&observe, At::Fixed(T0 + 300 * MS))
        .await
        .unwrap();
    let ChargeDecision::Allowed { observed, .. } = &d else {
        panic!("{d:?}")
    };
    assert_eq!(observed.as_ref().map(|w| w.per), Some(None), "{d:?}");
    assert!(log2.at.len() == 300 && log.at.len() == 5000);

    // A Late settle sent twice (a lost reply): the excess once.
    let big = [cost(&units, 10)];
    let d = ledger
        .charge(&charge("late", &big), At::Fixed(T0))
        .await
        .unwrap();
    let ChargeDecision::Allowed { receipt, .. } = d else {
        panic!("{d:?}")
    };
    for i in 0..=portion::ledger::SETTLE_REACH as i64 {
        assert!(
            ledger
                .charge(&charge("late", &one), At::Fixed(T0 + 1 + i))
                .await
                .unwrap()
                .is_allowed()
        );
    }
    for _ in 0..2 {
        let s = ledger
            .settle("late", &receipt, ("units", 10, 30), At::Fixed(T0 + S))
            .await
            .unwrap();
        assert_eq!(s, portion::ledger::Settled::Late);
    }
    let calls = portion::ledger::SETTLE_REACH + 1;
    assert_eq!(
        used(&ledger, "late", std::slice::from_ref(&units), T0 + S).await,
        [10 + calls + 20]
    );

    // Others' units until a reset two hours off: the state outlives them.
    let minute = pool("units", vec![window(60, 1000, 0)]);
    assert!(
        ledger
            .charge(&charge("ttl", &[cost(&minute, 1)]), At::StoreClock)
            .await
            .unwrap()
            .is_allowed()
    );
    let reset = Some(portion::ledger::BlockEnd::After(
        std::time::Duration::from_secs(7200),
    ));
    let o = ledger
        .upstream_remaining("ttl", &minute, 10, reset, At::StoreClock)
        .await
        .unwrap();
    assert_eq!(o.units, 1000 - 1 - 10);
    let ttl: i64 = server.cli(&["PTTL", &state_key("ttl")]).parse().unwrap();
    assert!(ttl > 7200 * 1000, "PTTL {ttl}");
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.cli(&["PTTL", key]).parse().unwrap()
}

/// Renewing a log's expiry is bounded work at any size: a segment gets its
/// last expiry when the next one opens, and later renewals touch the tail's
/// segments only (a pool whose longest window grew renews every segment,
/// once). So a completed segment can expire before the trim reaches it:
/// when its calls all count in no window, that is not a loss, in `status`
/// and in a charge alike; while they still count, it is.
#[tokio::test]
async fn completed_segments_keep_their_last_expiry_and_may_expire_unlost() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let budget = 1_000_000_000;
    let units = pool("units", vec![window(60, budget, 0)]);
    let pools = std::slice::from_ref(&units);
    // Calls at T0 .. T0 + 65.5 s: segment 1 opened at T0 + 65.536 s, and
    // gave segment 0 (log and index) its last expiry.
    let n = LOG_SEGMENT as i64 + 10;
    for credential in ["exp", "gone"] {
        fill(&server, credential, &units, LOG_SEGMENT as i64);
        let (log, index) = (
            log_segment_key(credential, "units", 0),
            index_segment_key(credential, "units", 0),
        );
        server.cli(&["PEXPIRE", &log, "5000"]);
        server.cli(&["PEXPIRE", &index, "5000"]);
        fill_from(&server, credential, &units, LOG_SEGMENT as i64, n);
        for key in [log, index] {
            let ttl = pttl(&server, &key);
            assert!(ttl > 100_000, "{key} got its last expiry: {ttl}");
        }
    }
    let (seg0, ix0) = (
        log_segment_key("exp", "units", 0),
        index_segment_key("exp", "units", 0),
    );
    let seg1 = log_segment_key("exp", "units", 1);
    // A renewal 10 s on (calls of segment 0 still count) leaves segment 0's
    // expiry as it was, and renews the tail's.
    server.cli(&["PEXPIRE", &seg0, "10000000"]);
    let one = [cost(&units, 1)];
    let d = ledger
        .charge(&charge("exp", &one), At::Fixed(T0 + 75_500 * MS))
        .await
        .unwrap();
    assert!(d.is_allowed(), "{d:?}");
    assert!(
        exists(&server, &seg0),
        "segment 0 still holds calls that count"
    );
    assert!(pttl(&server, &seg0) > 9_000_000, "segment 0 not renewed");
    let tail_ttl = pttl(&server, &seg1);
    assert!(tail_ttl > 100_000 && tail_ttl < 200_000, "{tail_ttl}");

    // At T0 + 200 s segment 0 has expired (its last expiry: 65.5 s + 127.5
    // s), every call it held long out of the 60 s window; the tail lives
    // (renewed at 75.5 s). Not lost: status and the charge say so.
    server.cli(&["DEL", &seg0, &ix0]);
    let at = T0 + 200 * S;
    let u = ledger.usage("exp", pools, At::Fixed(at)).await.unwrap();
    assert_eq!(u.pools[0].log_lost, None, "status: not lost");
    assert_eq!(u.pools[0].windows[0].remaining, budget);
    let d = ledger
        .charge(&charge("exp", &[cost(&units, 7)]), At::Fixed(at))
        .await
        .unwrap();
    let ChargeDecision::Allowed { remaining, .. } = d else {
        panic!("{d:?}")
    };
    assert_eq!(remaining[0].remaining, budget - 7);

    // The same segment gone at T0 + 75.5 s, while calls of it (from 15.5 s
    // on) still count: lost, in status and in the charge.
    server.cli(&[
        "DEL",
        &log_segment_key("gone", "units", 0),
        &index_segment_key("gone", "units", 0),
    ]);
    let at = T0 + 75_500 * MS;
    let u = ledger.usage("gone", pools, At::Fixed(at)).await.unwrap();
    assert!(u.pools[0].log_lost.is_some(), "status: lost");
    let d = ledger
        .charge(&charge("gone", &one), At::Fixed(at))
        .await
        .unwrap();
    assert!(matches!(d, ChargeDecision::LogLost { .. }), "{d:?}");

    // A longest window that grew renews every segment once.
    let longer = pool("units", vec![window(120, budget, 0)]);
    fill(&server, "grow", &units, n);
    let seg0 = log_segment_key("grow", "units", 0);
    server.cli(&["PEXPIRE", &seg0, "5000"]);
    let d = ledger
        .charge(&charge("grow", &[cost(&longer, 1)]), At::Fixed(T0 + 66 * S))
        .await
        .unwrap();
    assert!(d.is_allowed(), "{d:?}");
    let ttl = pttl(&server, &seg0);
    assert!(
        ttl > 120_000,
        "segment 0 renewed for the 120 s window: {ttl}"
    );
}

/// A pool with a short window and few calls runs its trim's count only now
/// and then, so a completed segment can expire while the head still sits in
/// it: the trim passes it (its calls, and the next segment's first, are
/// past the retention) rather than stop there for good.
#[tokio::test]
async fn the_trim_passes_a_head_segment_that_expired_first() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let units = pool("units", vec![window(10, 1_000_000_000, 0)]);
    // Calls at T0 .. T0 + 65.5 s; the trim kept the last 60 s: the head
    // sits in segment 0.
    fill(&server, "stuck", &units, LOG_SEGMENT as i64 + 10);
    let head = |server: &RedisServer| -> f64 {
        let mut con = ::redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let packed: Vec<u8> = ::redis::cmd("HGET")
            .arg(state_key("stuck"))
            .arg("pool:units")
            .query(&mut con)
            .unwrap();
        f64::from_le_bytes(packed[..8].try_into().unwrap())
    };
    // A charge at T0 + 80 s: the window's pointer leaves segment 0, the
    // head (the retention's cutoff) stays in it.
    let one = [cost(&units, 1)];
    let d = ledger
        .charge(&charge("stuck", &one), At::Fixed(T0 + 80 * S))
        .await
        .unwrap();
    assert!(d.is_allowed(), "{d:?}");
    assert!(head(&server) < LOG_SEGMENT as f64, "the head in segment 0");
    // Segment 0 expires (its last expiry ran out) before a trim reached it.
    server.cli(&[
        "DEL",
        &log_segment_key("stuck", "units", 0),
        &index_segment_key("stuck", "units", 0),
    ]);
    // At T0 + 150 s (before the log's own expiry, ~T0 + 190 s) the window
    // is empty, so the trim counts: every call of segment 0 and the first
    // of segment 1 are past the 60 s retention.
    let d = ledger
        .charge(&charge("stuck", &one), At::Fixed(T0 + 150 * S))
        .await
        .unwrap();
    assert!(d.is_allowed(), "{d:?}");
    assert!(
        head(&server) >= LOG_SEGMENT as f64,
        "the head passed segment 0: {}",
        head(&server)
    );
    let u = ledger
        .usage(
            "stuck",
            std::slice::from_ref(&units),
            At::Fixed(T0 + 151 * S),
        )
        .await
        .unwrap();
    assert_eq!(u.pools[0].log_lost, None);
    assert_eq!(u.pools[0].windows[0].used, 1);
}

/// `status` passes an expired head segment by the pool's own windows: after
/// another pool's longer window raised the credential's retention, a
/// segment of this pool that expired with every call out of its windows is
/// not a loss.
#[tokio::test]
async fn status_passes_an_expired_segment_by_the_pools_own_windows() {
    let server = RedisServer::start();
    let ledger = RedisLedger::connect(&server.url()).await.unwrap();
    let a = pool("units", vec![window(60, 1_000_000_000, 0)]);
    let b = pool("other", vec![window(600, 1_000, 0)]);
    fill(&server, "grew", &a, LOG_SEGMENT as i64 + 10);
    let d = ledger
        .charge(&charge("grew", &[cost(&b, 1)]), At::Fixed(T0 + 66 * S))
        .await
        .unwrap();
    assert!(d.is_allowed(), "{d:?}");
    server.cli(&[
        "DEL",
        &log_segment_key("grew", "units", 0),
        &index_segment_key("grew", "units", 0),
    ]);
    // At T0 + 140 s every call of `units` is out of its 60 s window, though
    // inside the 600 s retention that `other` set.
    let u = ledger
        .usage("grew", std::slice::from_ref(&a), At::Fixed(T0 + 140 * S))
        .await
        .unwrap();
    assert_eq!(u.pools[0].log_lost, None, "not lost");
    assert_eq!(u.pools[0].windows[0].used, 0);
}
