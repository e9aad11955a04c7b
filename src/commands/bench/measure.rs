//! The instruments both benchmarks share, so that `portion bench` and
//! `portion bench --capacity` build their pools and credentials, charge,
//! drive clients and read percentiles the same way: a figure from one is
//! comparable with a figure from the other.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use serde::Serialize;

use crate::ledger::topology::Conn;
use crate::ledger::{
    At, Charge, LOG_SEGMENT, Ledger, Pool, PoolCost, RedisLedger, Window, index_segment_key,
    log_segment_key, state_key,
};
use crate::{Error, Result};

pub const DAY: Duration = Duration::from_secs(86_400);
pub const HOUR: Duration = Duration::from_secs(3_600);

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

/// What one run of [`spread`] took: in all, and each operation.
pub struct Timed {
    pub elapsed: Duration,
    pub times: Vec<Duration>,
}

/// The median and the 99th percentile of `samples` (nearest rank).
pub fn percentiles(mut samples: Vec<Duration>) -> Latency {
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

/// A pool named `units` with a window of each length in `pers`, that never
/// runs out during a benchmark: the measured path is the allowed charge,
/// which is the one that writes.
pub fn pool(pers: &[Duration]) -> Pool {
    let window = |&per: &Duration| Window {
        per,
        limit: 1_000_000_000_000,
        headroom: 0,
        aligned: None,
    };
    Pool {
        name: "units".into(),
        windows: pers.iter().map(window).collect(),
    }
}

/// A fresh credential name, `portion-bench-RANDOM-what`, so runs never share
/// keys and every key a benchmark writes is recognisable.
pub fn fresh_credential(what: &str) -> String {
    format!(
        "portion-bench-{}-{what}",
        hex::encode(rand::random::<[u8; 4]>())
    )
}

/// One charge of `cost` to `credential`; a refusal is an error (benchmark
/// budgets never run out).
pub async fn charge_one(ledger: &RedisLedger, credential: &str, cost: &[PoolCost]) -> Result<()> {
    let charge = Charge {
        credential,
        cost,
        endpoint: "bench",
        job: "bench",
        id: None,
        seen_serial: 0,
        observe: false,
        estimated: &[],
        shares: None,
    };
    let decision = ledger.charge(&charge, At::StoreClock).await?;
    if !decision.is_allowed() {
        return Err(Error::Benchmark(format!(
            "a charge was not allowed: {decision:?}"
        )));
    }
    Ok(())
}

/// `clients` connections to the store at `url`, one per simulated client.
pub async fn connect(url: &str, clients: usize) -> Result<Vec<RedisLedger>> {
    let mut ledgers = Vec::with_capacity(clients);
    for _ in 0..clients {
        ledgers.push(RedisLedger::connect(url).await?);
    }
    Ok(ledgers)
}

/// Run `per_client` operations on each of `ledgers` at once, each client
/// in its own task; `op` gets the client's ledger and the operation's
/// number, unique across the clients. The clock starts after connecting.
pub async fn spread<F, Fut>(ledgers: Vec<RedisLedger>, per_client: usize, op: F) -> Result<Timed>
where
    F: Fn(Arc<RedisLedger>, usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (k, ledger) in ledgers.into_iter().enumerate() {
        let (ledger, op) = (Arc::new(ledger), op.clone());
        tasks.push(tokio::spawn(async move {
            let mut times = Vec::with_capacity(per_client);
            for i in 0..per_client {
                let t = Instant::now();
                op(ledger.clone(), k * per_client + i).await?;
                times.push(t.elapsed());
            }
            Ok::<_, Error>(times)
        }));
    }
    let mut times = Vec::new();
    for t in tasks {
        times.extend(
            t.await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?,
        );
    }
    Ok(Timed {
        elapsed: start.elapsed(),
        times,
    })
}

/// Run `requests` operations spread over `clients` connections; ops per second.
pub async fn throughput<F, Fut>(
    url: &str,
    clients: usize,
    requests: usize,
    op: F,
) -> Result<Throughput>
where
    F: Fn(Arc<RedisLedger>) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let ledgers = connect(url, clients).await?;
    let run = spread(ledgers, requests.div_ceil(clients), move |ledger, _| {
        op(ledger)
    })
    .await?;
    Ok(Throughput {
        clients,
        per_second: run.times.len() as f64 / run.elapsed.as_secs_f64(),
    })
}

/// The latency of `op`, one at a time, over `samples` runs after a tenth as
/// many to warm up the connection and the script cache.
pub async fn latency<F, Fut>(samples: usize, op: F) -> Result<Latency>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    for _ in 0..samples / 10 {
        op().await?;
    }
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        op().await?;
        times.push(t.elapsed());
    }
    Ok(percentiles(times))
}

/// Delete the keys a benchmark credential left.
pub async fn cleanup(conn: &mut Conn, credential: &str) {
    let mut keys = vec![state_key(credential)];
    // (the segments of up to 2 * 10^7 calls, the most any bench logs)
    for k in 0..=2 * 10_000_000 / LOG_SEGMENT {
        keys.push(log_segment_key(credential, "units", k));
        keys.push(index_segment_key(credential, "units", k));
    }
    let _: redis::RedisResult<()> = conn.del(&keys).await;
}

/// A target's verdict, as the reports print it.
pub fn verdict(ok: bool) -> &'static str {
    if ok { "ok" } else { "MISSED" }
}
