//! `portion bench` (without `--capacity`): what one charge costs a real
//! Redis, so operators can size a deployment. Every figure comes from the
//! same run on the same server: the PING round trip and a trivial script
//! are the floor the charge is compared with. Keys it writes are named
//! `portion:{portion-bench-…}:…` and deleted at the end.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::measure::{
    DAY, HOUR, Latency, Throughput, charge_one, cleanup, fresh_credential, latency, pool,
    throughput, verdict,
};
use crate::cli::BenchArgs;
use crate::ledger::topology::Conn;
use crate::ledger::{
    Charge, LOG_SEGMENT, PoolCost, RedisLedger, index_segment_key, log_segment_key, state_key,
};
use crate::{Error, Result};

/// A charge in one window (a day), and in two (a day and an hour).
const ONE_WINDOW: &[Duration] = &[DAY];
const TWO_WINDOWS: &[Duration] = &[DAY, HOUR];

/// Everything one `portion bench` run measures.
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

/// The bytes `key` takes in Redis (`MEMORY USAGE`, every element counted).
async fn memory_usage(conn: &mut Conn, key: &str) -> Result<u64> {
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
    let credential = fresh_credential(&format!("mem{units}"));
    let cost = [PoolCost {
        pool: pool(ONE_WINDOW),
        units,
    }];
    let mut conn = ledger.connection();
    for _ in 0..calls {
        charge_one(ledger, &credential, &cost).await?;
    }
    let mut log = memory_usage(&mut conn, &state_key(&credential)).await?;
    for k in 0..=calls as u64 / LOG_SEGMENT {
        log += memory_usage(&mut conn, &log_segment_key(&credential, "units", k)).await?
            + memory_usage(&mut conn, &index_segment_key(&credential, "units", k)).await?;
    }
    cleanup(&mut conn, &credential).await;
    Ok(log as f64 / calls as f64)
}

/// Measure one scenario of charges at 1 and `clients` clients.
async fn charge_throughput(
    url: &str,
    args: &BenchArgs,
    units: u64,
    windows: &[Duration],
) -> Result<Vec<Throughput>> {
    let mut out = Vec::new();
    for clients in [1, args.clients] {
        let credential = Arc::new(fresh_credential("tp"));
        let cost = Arc::new(vec![PoolCost {
            pool: pool(windows),
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
            pool: pool(ONE_WINDOW),
            units: 1,
        }]);
        evalsha_charge_args.push(
            throughput(url, clients, args.requests, move |ledger| {
                let (trivial, cost) = (trivial.clone(), cost.clone());
                async move {
                    let charge = Charge {
                        credential: "portion-bench-args",
                        cost: &cost,
                        endpoint: "bench",
                        job: "bench",
                        id: None,
                        seen_serial: 0,
                        observe: false,
                        estimated: &[],
                        shares: None,
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
        charge_throughput(url, args, 1, ONE_WINDOW).await?,
        charge_throughput(url, args, 100, ONE_WINDOW).await?,
        charge_throughput(url, args, 1, TWO_WINDOWS).await?,
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
    for windows in [ONE_WINDOW, TWO_WINDOWS] {
        let credential = fresh_credential("lat");
        let cost = vec![PoolCost {
            pool: pool(windows),
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

/// The report as text: the figures, then each target and whether it was met.
pub fn render(r: &Report, args: &BenchArgs) -> String {
    let n = args.clients;
    let mut out = format!(
        "Redis {} ({} requests per measurement; throughput: the median of {} rounds)\n",
        r.redis_version, args.requests, args.rounds
    );
    for (name, l) in [
        ("PING round trip", &r.ping),
        ("charge, 1 window", &r.charge_1_window),
        ("charge, 2 windows", &r.charge_2_windows),
    ] {
        out.push_str(&format!(
            "  {name:<26} p50 {:>7.1} µs   p99 {:>7.1} µs\n",
            l.p50_us, l.p99_us
        ));
    }
    out.push_str(&format!(
        "  throughput                 {:>10} {:>10}\n",
        "1 client",
        format!("{n} clients")
    ));
    for (name, t) in [
        ("EVALSHA `return 1` (floor)", &r.evalsha_floor),
        ("  the same, a charge's args", &r.evalsha_charge_args),
        ("charge cost 1", &r.charge_cost_1),
        ("charge cost 100", &r.charge_cost_100),
        ("charge cost 1, 2 windows", &r.charge_cost_1_two_windows),
    ] {
        out.push_str(&format!(
            "  {name:<26} {:>8.0}/s {:>8.0}/s\n",
            t[0].per_second, t[1].per_second
        ));
    }
    out.push_str(&format!(
        "  memory per logged call     cost 1: {:.1} B   cost 100: {:.1} B   (charge ids included)\n",
        r.log_bytes_per_call_cost_1, r.log_bytes_per_call_cost_100,
    ));
    out.push_str(&targets(r, n));
    out
}

/// The targets the figures are held to, at `n` clients.
fn targets(r: &Report, n: usize) -> String {
    let mut out = String::from("targets:\n");
    let ratio = r.charge_1_window.p50_us / r.ping.p50_us;
    out.push_str(&format!(
        "  charge p50 <= 1.5x PING p50: {:.2}x {}\n",
        ratio,
        verdict(ratio <= 1.5)
    ));
    let floor_n = r.evalsha_floor[1].per_second;
    for (name, t) in [
        ("cost 1", &r.charge_cost_1),
        ("cost 100", &r.charge_cost_100),
    ] {
        let share = t[1].per_second / floor_n;
        out.push_str(&format!(
            "  {n}-client charge {name} >= 60% of floor: {:.0}% {}\n",
            share * 100.0,
            verdict(share >= 0.6)
        ));
    }
    let second = r.charge_2_windows.p50_us / r.charge_1_window.p50_us;
    out.push_str(&format!(
        "  2 windows < 1.3x 1 window (p50): {:.2}x {}\n",
        second,
        verdict(second < 1.3)
    ));
    let bytes = r
        .log_bytes_per_call_cost_1
        .max(r.log_bytes_per_call_cost_100);
    out.push_str(&format!(
        "  <= 40 B per logged call: {:.1} B {}\n",
        bytes,
        verdict(bytes <= 40.0)
    ));
    out
}
