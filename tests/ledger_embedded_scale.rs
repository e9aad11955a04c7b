//! The embedded store's bounded-work log (issue 11) decides as the full
//! recount did: window sums from running totals, rows that left the
//! retention but are not deleted yet, and a store file from a build without
//! running totals must all give the decisions and reports a recount gives.
//! Also a timing harness, run by hand (ignored): see `timing`.

use std::path::Path;
use std::time::{Duration, Instant};

use portion::ledger::{At, Charge, ChargeDecision, EmbeddedLedger, Ledger, Pool, PoolCost};

use crate::common::ledger::{S, T0, charge, cost, embedded_path, pool, used, window};

/// A small deterministic generator (xorshift), so a failure replays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The configurations a sequence moves between: `units` lengthened,
/// shortened, a window added, and one past the 60 s retention; `search`.
fn configs(k: u64) -> [Pool; 2] {
    let units = match k % 4 {
        0 => vec![window(10, 40, 2), window(3, 15, 0)],
        1 => vec![window(30, 60, 0), window(3, 15, 0)],
        2 => vec![window(5, 30, 0)],
        _ => vec![window(120, 90, 0), window(3, 15, 0)],
    };
    [pool("units", units), pool("search", vec![window(5, 20, 2)])]
}

/// One random step: time passes, maybe the configuration changes, then a
/// charge of one or both pools (costs above 1, ids sometimes repeated);
/// the decision and the usage report after it, as text.
async fn step(ledger: &impl Ledger, rng: &mut Rng, t: &mut i64, config: &mut u64) -> Vec<String> {
    *t += rng.below(900_000) as i64 + if rng.below(40) == 0 { 70 * S } else { 0 };
    if rng.below(25) == 0 {
        *config = rng.below(4);
    }
    let [units, search] = configs(*config);
    let mut costs = vec![cost(&units, 1 + rng.below(7))];
    if rng.below(3) == 0 {
        costs.push(cost(&search, 1 + rng.below(5)));
    }
    let id = (rng.below(3) == 0).then(|| format!("id{}", rng.below(6)));
    let c = Charge {
        id: id.as_deref(),
        ..charge("c", &costs)
    };
    let d = ledger.charge(&c, At::Fixed(*t)).await.expect("charge");
    let u = ledger
        .usage("c", &[units, search], At::Fixed(*t))
        .await
        .expect("usage");
    vec![format!("{d:?}"), format!("{u:?}")]
}

/// Two stores driven by the same `steps` steps from `seed`, the clock at
/// `start` and configuration `config`, answer alike.
async fn assert_same(
    a: &impl Ledger,
    b: &impl Ledger,
    seed: u64,
    steps: usize,
    (start, config): (i64, u64),
) {
    let (mut ra, mut rb) = (Rng(seed), Rng(seed));
    let (mut ta, mut tb, mut ca, mut cb) = (start, start, config, config);
    for i in 0..steps {
        let x = step(a, &mut ra, &mut ta, &mut ca).await;
        let y = step(b, &mut rb, &mut tb, &mut cb).await;
        assert_eq!(x, y, "step {i} of seed {seed}");
    }
}

/// The log and credential tables of a build without running totals.
const OLD_SCHEMA: &str = "
CREATE TABLE log (credential TEXT NOT NULL, pool TEXT NOT NULL, at INTEGER NOT NULL,
                  cost INTEGER NOT NULL, tag TEXT NOT NULL);
CREATE INDEX log_by_time ON log (credential, pool, at);
CREATE TABLE credential (name TEXT PRIMARY KEY, last INTEGER NOT NULL DEFAULT 0,
    serial INTEGER NOT NULL DEFAULT 0, retain INTEGER NOT NULL DEFAULT 0,
    blocked_until INTEGER NOT NULL DEFAULT 0, blocked_reason TEXT NOT NULL DEFAULT '',
    lost_at INTEGER NOT NULL DEFAULT 0);
CREATE TABLE charge_id (credential TEXT NOT NULL, id TEXT NOT NULL, at INTEGER NOT NULL,
                        PRIMARY KEY (credential, id));
";

/// Copy the store at `from` into a new file at `to` in the old layout.
fn copy_to_old_layout(from: &Path, to: &Path) {
    let old = rusqlite::Connection::open(to).unwrap();
    old.execute_batch(OLD_SCHEMA).unwrap();
    old.execute("ATTACH ?1 AS new", [from.to_str().unwrap()])
        .unwrap();
    old.execute_batch(
        "INSERT INTO log SELECT credential, pool, at, cost, tag FROM new.log ORDER BY rowid;
         INSERT INTO credential SELECT name, last, serial, retain, blocked_until,
                blocked_reason, lost_at FROM new.credential;
         INSERT INTO charge_id SELECT credential, id, at FROM new.charge_id;",
    )
    .unwrap();
}

/// Every row's (pool, at, cost, cum), in insertion order.
fn totals(path: &Path) -> Vec<(String, i64, i64, i64)> {
    let c = rusqlite::Connection::open(path).unwrap();
    let mut stmt = c
        .prepare("SELECT pool, at, cost, cum FROM log ORDER BY rowid")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_without_running_totals_gets_them_and_decides_alike() {
    let dir = tempfile::tempdir().unwrap();
    let (new_path, old_path) = (embedded_path(&dir), dir.path().join("old.sqlite3"));
    let new = EmbeddedLedger::open(&new_path).unwrap();
    let mut rng = Rng(7);
    let (mut t, mut config) = (T0, 0);
    for _ in 0..300 {
        step(&new, &mut rng, &mut t, &mut config).await;
    }
    copy_to_old_layout(&new_path, &old_path);
    let old = EmbeddedLedger::open(&old_path).unwrap();
    let rows = totals(&old_path);
    assert!(
        rows.len() > 20,
        "the log holds rows to fill: {}",
        rows.len()
    );
    let mut sums = std::collections::HashMap::new();
    for (pool, at, cost, cum) in &rows {
        let sum = sums.entry(pool.clone()).or_insert(0);
        *sum += cost;
        assert_eq!(
            cum, sum,
            "{pool} at {at}: the filled total is the running one"
        );
    }
    // From here on both stores see the same steps and must answer alike.
    assert_same(&new, &old, 11, 300, (t, config)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_past_the_retention_not_yet_deleted_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clean = EmbeddedLedger::open(&embedded_path(&dir)).unwrap();
    let path = dir.path().join("garbage.sqlite3");
    let dirty = EmbeddedLedger::open(&path).unwrap();
    // Calls in both pools (more than many charges delete), and ids the steps
    // reuse, all before T0 - 60 s (the retention when the first step charges
    // both pools) but inside the 120 s window it configures: counted by no
    // window, ever, though the retention is 120 s from then on.
    let mut c = rusqlite::Connection::open(&path).unwrap();
    let c = c.transaction().unwrap();
    let mut cum = 0;
    for i in 0..20_000i64 {
        for (pool, cost) in [("units", 3), ("search", 2)] {
            cum += cost;
            c.execute(
                "INSERT INTO log (credential, pool, at, cost, tag, cum)
                 VALUES ('c', ?1, ?2, ?3, 'old\tjob', ?4)",
                rusqlite::params![pool, T0 - 110 * S + i * 2_400, cost, cum],
            )
            .unwrap();
        }
    }
    // (more ids than one batch deletes, the reused ones last)
    for i in 0..600 {
        c.execute(
            "INSERT INTO charge_id (credential, id, at) VALUES ('c', ?1, ?2)",
            rusqlite::params![format!("g{i}"), T0 - 100 * S + i],
        )
        .unwrap();
    }
    for i in 0..6 {
        c.execute(
            "INSERT INTO charge_id (credential, id, at) VALUES ('c', ?1, ?2)",
            rusqlite::params![format!("id{i}"), T0 - 61 * S],
        )
        .unwrap();
    }
    c.commit().unwrap();
    // The first step charges both pools, so both get their dead mark.
    for ledger in [&clean, &dirty] {
        let [units, search] = configs(3);
        let d = ledger
            .charge(
                &charge("c", &[cost(&units, 1), cost(&search, 1)]),
                At::Fixed(T0),
            )
            .await
            .unwrap();
        assert!(d.is_allowed(), "{d:?}");
    }
    assert_same(&clean, &dirty, 5, 400, (T0, 3)).await;
}

/// A naive model of the log: every allowed (at, cost) per pool.
#[derive(Default)]
struct Recount {
    log: Vec<Vec<(i64, u64)>>,
}

impl Recount {
    /// Units used in every window of `pools` (in log order), pool after pool.
    fn used_all(&self, pools: &[Pool], now: i64) -> Vec<u64> {
        let mut out = Vec::new();
        for (p, pool) in pools.iter().enumerate() {
            for w in &pool.windows {
                out.push(self.used(p, w.per.as_micros() as i64, now));
            }
        }
        out
    }

    fn used(&self, p: usize, len: i64, now: i64) -> u64 {
        self.log[p]
            .iter()
            .filter(|e| e.0 > now - len)
            .map(|e| e.1)
            .sum()
    }

    /// The decision a recount makes on a charge of (pool index, pool,
    /// units): `Ok(remaining)`, or `Err((pool name, per, retry))` for the
    /// window that keeps the call out longest.
    fn decide(
        &self,
        charged: &[(usize, &Pool, u64)],
        now: i64,
    ) -> Result<Vec<u64>, (String, Duration, i64)> {
        let mut worst: Option<(String, Duration, i64)> = None;
        let mut remaining = Vec::new();
        for &(p, pool, units) in charged {
            for w in &pool.windows {
                let len = w.per.as_micros() as i64;
                let used = self.used(p, len, now);
                remaining.push(w.budget().saturating_sub(used + units));
                let need = (used + units) as i64 - w.budget() as i64;
                if need <= 0 {
                    continue;
                }
                let mut freed = 0;
                let at = self.log[p]
                    .iter()
                    .filter(|e| e.0 > now - len)
                    .find(|e| {
                        freed += e.1 as i64;
                        freed >= need
                    })
                    .map_or(now, |e| e.0);
                let retry = at + len - now;
                if worst.as_ref().is_none_or(|x| retry > x.2) {
                    worst = Some((pool.name.clone(), w.per, retry));
                }
            }
        }
        worst.map_or(Ok(remaining), Err)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_weighted_calls_agree_with_a_recount() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = EmbeddedLedger::open(&embedded_path(&dir)).unwrap();
    // Windows no longer than the 60 s retention: the recount needs no rule
    // for entries the retention drops.
    let configs = [
        [
            vec![window(10, 60, 4), window(2, 20, 0)],
            vec![window(5, 25, 0)],
        ],
        [
            vec![window(30, 150, 0), window(2, 20, 0)],
            vec![window(20, 60, 0)],
        ],
        [
            vec![window(60, 240, 0)],
            vec![window(5, 25, 0), window(1, 9, 0)],
        ],
    ];
    let mut model = Recount {
        log: vec![Vec::new(), Vec::new()],
    };
    let (mut rng, mut t, mut k) = (Rng(3), T0, 0);
    let (mut allowed, mut rejected) = (0, 0);
    for i in 0..4000 {
        t += rng.below(1_500_000) as i64;
        if rng.below(200) == 0 {
            k = rng.below(3) as usize;
        }
        let pools = [
            pool("units", configs[k][0].clone()),
            pool("search", configs[k][1].clone()),
        ];
        let units = [1 + rng.below(8), rng.below(3) * (1 + rng.below(4))];
        let costs: Vec<PoolCost> = (0..2)
            .filter(|&p| units[p] > 0)
            .map(|p| cost(&pools[p], units[p]))
            .collect();
        let charged: Vec<(usize, &Pool, u64)> = (0..2)
            .filter(|&p| units[p] > 0)
            .map(|p| (p, &pools[p], units[p]))
            .collect();
        let want = model.decide(&charged, t);
        let d = ledger
            .charge(&charge("c", &costs), At::Fixed(t))
            .await
            .unwrap();
        match (&d, &want) {
            (ChargeDecision::Allowed { remaining, .. }, Ok(left)) => {
                let got: Vec<u64> = remaining.iter().map(|r| r.remaining).collect();
                assert_eq!(&got, left, "call {i}: {d:?}");
                for &(p, _, u) in &charged {
                    model.log[p].push((t, u));
                }
                allowed += 1;
            }
            (
                ChargeDecision::Rejected {
                    pool,
                    per,
                    retry_after,
                    ..
                },
                Err((p, wper, retry)),
            ) => {
                assert_eq!((pool, per), (p, wper), "call {i}");
                assert_eq!(retry_after.as_micros() as i64, *retry, "call {i}");
                rejected += 1;
            }
            _ => panic!("call {i}: the store said {d:?}, a recount {want:?}"),
        }
        if i % 50 == 0 {
            let naive = model.used_all(&pools, t);
            assert_eq!(used(&ledger, "c", &pools, t).await, naive, "call {i}");
        }
    }
    assert!(
        allowed > 1000 && rejected > 300,
        "{allowed} allowed, {rejected} rejected"
    );
}

/// Time charges and a status read on a store holding `PORTION_SCALE_N`
/// calls (default 10^6) of one pool within 25 s of a 30 s window, written
/// straight into its tables. Run by hand, in a release build:
///
///     cargo test --release --test lib ledger_embedded_scale::timing -- --ignored --nocapture
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a timing harness, run by hand"]
async fn timing() {
    let n: i64 = std::env::var("PORTION_SCALE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let path = embedded_path(&dir);
    let ledger = EmbeddedLedger::open(&path).unwrap();
    let big = pool("units", vec![window(30, 1_000_000_000_000, 0)]);
    ledger
        .charge(&charge("c", &[cost(&big, 1)]), At::Fixed(T0))
        .await
        .unwrap();
    let mut c = rusqlite::Connection::open(&path).unwrap();
    let tx = c.transaction().unwrap();
    tx.execute("DELETE FROM log", []).unwrap();
    {
        let mut ins = tx
            .prepare("INSERT INTO log (credential, pool, at, cost, tag, cum) VALUES ('c', 'units', ?1, 1, 'e\tj', ?2)")
            .unwrap();
        for i in 0..n {
            ins.execute(rusqlite::params![T0 + i * 25 * S / n, i + 1])
                .unwrap();
        }
    }
    tx.execute(
        "UPDATE credential SET serial = ?1, retain = 60000000, last = ?2",
        rusqlite::params![n, T0 + 25 * S],
    )
    .unwrap();
    tx.commit().unwrap();
    let time = |what: &str, since: Instant| eprintln!("{n} rows: {what}: {:?}", since.elapsed());
    let start = Instant::now();
    let u = ledger
        .usage("c", std::slice::from_ref(&big), At::Fixed(T0 + 26 * S))
        .await
        .unwrap();
    time("status (read + summarize)", start);
    assert_eq!(u.pools[0].windows[0].used, n as u64);
    // Allowed, in a full window; rejected (a tight window: the retry lookup).
    for (what, p, at) in [
        ("allowed charge", big.clone(), T0 + 26 * S),
        (
            "rejected charge",
            pool("units", vec![window(30, 10, 0)]),
            T0 + 26 * S,
        ),
        ("charge after the burst left", big.clone(), T0 + 57 * S),
        (
            "charge past the retention (pruning)",
            big.clone(),
            T0 + 90 * S,
        ),
        ("next charge (pruning)", big.clone(), T0 + 91 * S),
    ] {
        let start = Instant::now();
        let d = ledger
            .charge(&charge("c", &[cost(&p, 1)]), At::Fixed(at))
            .await
            .unwrap();
        time(what, start);
        eprintln!("    {d:?}");
    }
}
