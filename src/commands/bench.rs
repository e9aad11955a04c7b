//! `quota bench`: measure the ledger against a real Redis, so operators can
//! size a deployment. Every figure comes from the same run on the same server:
//! the PING round trip and a trivial script are the floor the charge is
//! compared with. Keys it writes are named `quota:{quota-bench-…}:…` and
//! deleted at the end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use serde::Serialize;

use crate::cli::BenchArgs;
use crate::ledger::topology as quota_conn;
use crate::ledger::{
    At, Charge, Ledger, Pool, PoolCost, RedisLedger, StoreLocation, Window, log_key, state_key,
};
use crate::{Error, Result};

/// Latency percentiles of one measurement, in microseconds.
#[derive(Debug, Serialize)]
pub struct Latency {
    pub p50_us: f64,
    pub p99_us: f64,
}

/// Requests per second of one measurement.
#[derive(Debug, Serialize)]
pub struct Throughput {
    pub clients: usize,
    pub per_second: f64,
}

/// Everything one `quota bench` run measures.
#[derive(Debug, Serialize)]
pub struct Report {
    pub redis_version: String,
    pub ping: Latency,
    pub charge_1_window: Latency,
    pub charge_2_windows: Latency,
    pub evalsha_floor: Vec<Throughput>,
    /// `return 1` sent with a charge's keys and arguments: the transport and
    /// client cost of a charge, without its work in Redis.
    pub evalsha_charge_args: Vec<Throughput>,
    pub charge_cost_1: Vec<Throughput>,
    pub charge_cost_100: Vec<Throughput>,
    pub charge_cost_1_two_windows: Vec<Throughput>,
    pub log_bytes_per_call_cost_1: f64,
    pub log_bytes_per_call_cost_100: f64,
    pub memory_calls: usize,
    /// Rounds of the throughput measurements; each series gives its median.
    pub rounds: usize,
}

fn percentiles(mut samples: Vec<Duration>) -> Latency {
    samples.sort();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i].as_secs_f64() * 1e6
    };
    Latency {
        p50_us: at(0.50),
        p99_us: at(0.99),
    }
}

/// A pool that never runs out during a benchmark: the measured path is the
/// allowed charge, which is the one that writes.
fn bench_pool(windows: usize) -> Pool {
    let day = Window {
        per: Duration::from_secs(86_400),
        limit: 1_000_000_000_000,
        headroom: 0,
    };
    let hour = Window {
        per: Duration::from_secs(3_600),
        ..day.clone()
    };
    Pool {
        name: "units".into(),
        windows: [day, hour].into_iter().take(windows).collect(),
    }
}

fn bench_credential(what: &str) -> String {
    format!(
        "quota-bench-{}-{what}",
        hex::encode(rand::random::<[u8; 4]>())
    )
}

/// One charge of `cost` to `credential`; a refusal is an error (benchmark
/// budgets never run out).
pub(super) async fn charge_one(
    ledger: &RedisLedger,
    credential: &str,
    cost: &[PoolCost],
) -> Result<()> {
    let charge = Charge {
        credential,
        cost,
        endpoint: "bench",
        job: "bench",
        id: None,
    };
    let decision = ledger.charge(&charge, At::StoreClock).await?;
    if !decision.is_allowed() {
        return Err(Error::Benchmark(format!(
            "a charge was not allowed: {decision:?}"
        )));
    }
    Ok(())
}

/// Run `requests` operations spread over `clients` connections; ops per second.
async fn throughput<F, Fut>(url: &str, clients: usize, requests: usize, op: F) -> Result<Throughput>
where
    F: Fn(Arc<RedisLedger>) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let mut ledgers = Vec::new();
    for _ in 0..clients {
        ledgers.push(Arc::new(RedisLedger::connect(url).await?));
    }
    let per_client = requests.div_ceil(clients);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for ledger in ledgers {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..per_client {
                op(ledger.clone()).await?;
            }
            Ok::<_, Error>(())
        }));
    }
    for t in tasks {
        t.await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;
    }
    Ok(Throughput {
        clients,
        per_second: (per_client * clients) as f64 / start.elapsed().as_secs_f64(),
    })
}

async fn latency<F, Fut>(samples: usize, op: F) -> Result<Latency>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    for _ in 0..samples / 10 {
        op().await?; // warm up: connection, script cache
    }
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        op().await?;
        times.push(t.elapsed());
    }
    Ok(percentiles(times))
}

async fn memory_usage(conn: &mut quota_conn::Conn, key: &str) -> Result<u64> {
    let bytes: Option<u64> = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(conn)
        .await
        .map_err(Error::redis("MEMORY USAGE"))?;
    Ok(bytes.unwrap_or(0))
}

/// Log `calls` charges of `units` each, then measure the bytes per call of the
/// log (list + state hash, `MEMORY USAGE`; charge ids ride in the log).
async fn bytes_per_call(ledger: &RedisLedger, units: u64, calls: usize) -> Result<f64> {
    let credential = bench_credential(&format!("mem{units}"));
    let cost = [PoolCost {
        pool: bench_pool(1),
        units,
    }];
    let mut conn = ledger.connection();
    for _ in 0..calls {
        charge_one(ledger, &credential, &cost).await?;
    }
    let log = memory_usage(&mut conn, &log_key(&credential, "units")).await?
        + memory_usage(&mut conn, &state_key(&credential)).await?;
    cleanup(&mut conn, &credential).await;
    Ok(log as f64 / calls as f64)
}

/// Delete the keys a benchmark credential left.
async fn cleanup(conn: &mut quota_conn::Conn, credential: &str) {
    let keys = [state_key(credential), log_key(credential, "units")];
    let _: redis::RedisResult<()> = conn.del(&keys).await;
}

/// Measure one scenario of charges at 1 and `clients` clients.
async fn charge_throughput(
    url: &str,
    args: &BenchArgs,
    units: u64,
    windows: usize,
) -> Result<Vec<Throughput>> {
    let mut out = Vec::new();
    for clients in [1, args.clients] {
        let credential = Arc::new(bench_credential("tp"));
        let cost = Arc::new(vec![PoolCost {
            pool: bench_pool(windows),
            units,
        }]);
        let c = credential.clone();
        out.push(
            throughput(url, clients, args.requests, move |ledger| {
                let (credential, cost) = (c.clone(), cost.clone());
                async move { charge_one(&ledger, &credential, &cost).await }
            })
            .await?,
        );
        let ledger = RedisLedger::connect(url).await?;
        cleanup(&mut ledger.connection(), &credential).await;
    }
    Ok(out)
}

/// One round of the throughput series, at 1 and `args.clients` clients: the
/// trivial `EVALSHA`, the same with a charge's arguments, and charges of cost
/// 1, cost 100, and cost 1 in two windows.
async fn throughput_round(url: &str, args: &BenchArgs) -> Result<[Vec<Throughput>; 5]> {
    let trivial = redis::Script::new("return 1");
    let mut evalsha_floor = Vec::new();
    for clients in [1, args.clients] {
        let trivial = trivial.clone();
        evalsha_floor.push(
            throughput(url, clients, args.requests, move |ledger| {
                let trivial = trivial.clone();
                async move {
                    let _: i64 = trivial
                        .invoke_async(&mut ledger.connection())
                        .await
                        .map_err(Error::redis("a benchmark command"))?;
                    Ok(())
                }
            })
            .await?,
        );
    }
    let mut evalsha_charge_args = Vec::new();
    for clients in [1, args.clients] {
        let trivial = trivial.clone();
        let cost = Arc::new(vec![PoolCost {
            pool: bench_pool(1),
            units: 1,
        }]);
        evalsha_charge_args.push(
            throughput(url, clients, args.requests, move |ledger| {
                let (trivial, cost) = (trivial.clone(), cost.clone());
                async move {
                    let charge = Charge {
                        credential: "quota-bench-args",
                        cost: &cost,
                        endpoint: "bench",
                        job: "bench",
                        id: None,
                    };
                    let mut inv = trivial.prepare_invoke();
                    ledger.charge_arguments(&charge, &mut inv);
                    let _: i64 = inv
                        .invoke_async(&mut ledger.connection())
                        .await
                        .map_err(Error::redis("a benchmark command"))?;
                    Ok(())
                }
            })
            .await?,
        );
    }
    Ok([
        evalsha_floor,
        evalsha_charge_args,
        charge_throughput(url, args, 1, 1).await?,
        charge_throughput(url, args, 100, 1).await?,
        charge_throughput(url, args, 1, 2).await?,
    ])
}

/// Per client count, the median of one series' figures over the rounds.
fn median_round<'a>(rounds: impl Iterator<Item = &'a Vec<Throughput>>) -> Vec<Throughput> {
    let rounds: Vec<_> = rounds.collect();
    (0..rounds[0].len())
        .map(|i| {
            let mut v: Vec<f64> = rounds.iter().map(|r| r[i].per_second).collect();
            v.sort_by(f64::total_cmp);
            Throughput {
                clients: rounds[0][i].clients,
                per_second: v[v.len() / 2],
            }
        })
        .collect()
}

/// Run every measurement against the Redis at `store`.
pub async fn measure(url: &str, args: &BenchArgs) -> Result<Report> {
    let ledger = RedisLedger::connect(url).await?;
    let mut conn = ledger.connection();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .map_err(Error::redis("INFO"))?;
    let redis_version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("unknown")
        .trim()
        .to_string();

    let samples = args.requests.min(5_000);
    let ping = latency(samples, || {
        let mut conn = ledger.connection();
        async move {
            let _: String = redis::cmd("PING")
                .query_async(&mut conn)
                .await
                .map_err(Error::redis("a benchmark command"))?;
            Ok(())
        }
    })
    .await?;
    let mut single = Vec::new();
    for windows in [1, 2] {
        let credential = bench_credential("lat");
        let cost = vec![PoolCost {
            pool: bench_pool(windows),
            units: 1,
        }];
        single.push(latency(samples, || charge_one(&ledger, &credential, &cost)).await?);
        cleanup(&mut conn, &credential).await;
    }
    let charge_2_windows = single.pop().expect("two measurements");
    let charge_1_window = single.pop().expect("two measurements");

    // Throughput varies from one second to the next on a shared machine:
    // every series is measured once a round, so the floor and the charges
    // see the same conditions, and each series reports its median.
    let mut rounds = Vec::new();
    for _ in 0..args.rounds {
        rounds.push(throughput_round(url, args).await?);
    }
    let [
        evalsha_floor,
        evalsha_charge_args,
        charge_cost_1,
        charge_cost_100,
        charge_cost_1_two_windows,
    ] = std::array::from_fn(|series| median_round(rounds.iter().map(|r| &r[series])));
    let log1 = bytes_per_call(&ledger, 1, args.memory_calls).await?;
    let log100 = bytes_per_call(&ledger, 100, args.memory_calls).await?;

    Ok(Report {
        redis_version,
        ping,
        charge_1_window,
        charge_2_windows,
        evalsha_floor,
        evalsha_charge_args,
        charge_cost_1,
        charge_cost_100,
        charge_cost_1_two_windows,
        log_bytes_per_call_cost_1: log1,
        log_bytes_per_call_cost_100: log100,
        memory_calls: args.memory_calls,
        rounds: args.rounds,
    })
}

fn verdict(ok: bool) -> &'static str {
    if ok { "ok" } else { "MISSED" }
}

/// The `quota bench` command.
pub async fn run(store: Option<&str>, args: &BenchArgs) -> Result<u8> {
    let url = match store.map(StoreLocation::parse) {
        Some(Ok(StoreLocation::Redis(url))) => url,
        Some(Err(e)) => return Err(Error::Usage(e)),
        _ => {
            return Err(Error::Usage(
                "quota bench measures a Redis: name it with --store redis://HOST:PORT/DB or $QUOTA_STORE".into(),
            ));
        }
    };
    if args.capacity {
        let c = super::capacity::measure(&url, args).await?;
        if args.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&c).expect("a report serializes")
            );
        } else {
            print!("{}", super::capacity::render(&c));
        }
        return Ok(0);
    }
    if args.clients == 0 || args.requests == 0 || args.memory_calls == 0 || args.rounds == 0 {
        return Err(Error::Usage(
            "--clients, --requests, --rounds and --memory-calls must be positive".into(),
        ));
    }
    let r = measure(&url, args).await?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).expect("a report serializes")
        );
        return Ok(0);
    }
    let n = args.clients;
    let floor_n = r.evalsha_floor[1].per_second;
    println!(
        "Redis {} ({} requests per measurement; throughput: the median of {} rounds)",
        r.redis_version, args.requests, args.rounds
    );
    println!(
        "  PING round trip            p50 {:>7.1} µs   p99 {:>7.1} µs",
        r.ping.p50_us, r.ping.p99_us
    );
    println!(
        "  charge, 1 window           p50 {:>7.1} µs   p99 {:>7.1} µs",
        r.charge_1_window.p50_us, r.charge_1_window.p99_us
    );
    println!(
        "  charge, 2 windows          p50 {:>7.1} µs   p99 {:>7.1} µs",
        r.charge_2_windows.p50_us, r.charge_2_windows.p99_us
    );
    println!(
        "  throughput                 {:>10} {:>10}",
        "1 client",
        format!("{n} clients")
    );
    for (name, t) in [
        ("EVALSHA `return 1` (floor)", &r.evalsha_floor),
        ("  the same, a charge's args", &r.evalsha_charge_args),
        ("charge cost 1", &r.charge_cost_1),
        ("charge cost 100", &r.charge_cost_100),
        ("charge cost 1, 2 windows", &r.charge_cost_1_two_windows),
    ] {
        println!(
            "  {name:<26} {:>8.0}/s {:>8.0}/s",
            t[0].per_second, t[1].per_second
        );
    }
    println!(
        "  memory per logged call     cost 1: {:.1} B   cost 100: {:.1} B   (charge ids included)",
        r.log_bytes_per_call_cost_1, r.log_bytes_per_call_cost_100,
    );
    println!("targets:");
    let ratio = r.charge_1_window.p50_us / r.ping.p50_us;
    println!(
        "  charge p50 <= 1.5x PING p50: {:.2}x {}",
        ratio,
        verdict(ratio <= 1.5)
    );
    for (name, t) in [
        ("cost 1", &r.charge_cost_1),
        ("cost 100", &r.charge_cost_100),
    ] {
        let share = t[1].per_second / floor_n;
        println!(
            "  {n}-client charge {name} >= 60% of floor: {:.0}% {}",
            share * 100.0,
            verdict(share >= 0.6)
        );
    }
    let second = r.charge_2_windows.p50_us / r.charge_1_window.p50_us;
    println!(
        "  2 windows < 1.3x 1 window (p50): {:.2}x {}",
        second,
        verdict(second < 1.3)
    );
    let bytes = r
        .log_bytes_per_call_cost_1
        .max(r.log_bytes_per_call_cost_100);
    println!(
        "  <= 40 B per logged call: {:.1} B {}",
        bytes,
        verdict(bytes <= 40.0)
    );
    Ok(0)
}
