//! `portion bench --capacity`: size a deployment. Charges per second and p99
//! latency with 1, 50 and 200 concurrent clients spread over 1, 100 and
//! 10,000 credentials, against one Redis or a Cluster; on a Cluster, the
//! share of the charges each master served (from `INFO commandstats`).
//! With `--baseline URL`, the 1-client latency of another store beside it.

use std::sync::Arc;

use serde::Serialize;

use super::measure::{HOUR, charge_one, connect, percentiles, pool, spread, verdict};
use crate::cli::BenchArgs;
use crate::ledger::topology::Topology;
use crate::ledger::{PoolCost, RedisLedger};
use crate::{Error, Result};

const CLIENTS: [usize; 3] = [1, 50, 200];
const CREDENTIALS: [usize; 3] = [1, 100, 10_000];

#[derive(Debug, Serialize)]
pub struct Scenario {
    pub clients: usize,
    pub credentials: usize,
    pub per_second: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// On a Cluster: (master address, share of the charges it ran).
    pub masters: Vec<(String, f64)>,
}

#[derive(Debug, Serialize)]
pub struct Capacity {
    pub store: String,
    pub requests: usize,
    pub scenarios: Vec<Scenario>,
    /// `--baseline`: its 1-client, 1-credential scenario.
    pub baseline: Option<Scenario>,
}

/// The masters of a Cluster (`CLUSTER NODES`); empty for one server.
async fn masters(url: &str) -> Result<Vec<String>> {
    if !url.contains("+cluster://") {
        return Ok(Vec::new());
    }
    let ledger = RedisLedger::connect(url).await?;
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut ledger.connection())
        .await
        .map_err(Error::redis("CLUSTER NODES"))?;
    Ok(nodes
        .lines()
        .filter(|l| l.contains("master"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|a| a.split('@').next().unwrap_or(a).to_string())
        .collect())
}

/// The URL of the Cluster node at `addr`, with the scheme, credentials and
/// TLS options of the store's seed nodes.
fn node_url(store: &str, addr: &str) -> String {
    let seed = match Topology::parse(store) {
        Ok(Topology::Cluster(nodes)) => nodes.into_iter().next().unwrap_or_default(),
        _ => String::new(),
    };
    let Some((scheme, rest)) = seed.split_once("://") else {
        return format!("redis://{addr}");
    };
    let (auth, hostpart) = match rest.rsplit_once('@') {
        Some((a, h)) => (format!("{a}@"), h),
        None => (String::new(), rest),
    };
    let tail = hostpart.find(['/', '#']).map_or("", |i| &hostpart[i..]);
    format!("{scheme}://{auth}{addr}{tail}")
}

/// `EVALSHA` calls a master has run since its stats were reset.
async fn evalsha_calls(store: &str, addr: &str, reset: bool) -> Result<u64> {
    let client = redis::Client::open(node_url(store, addr)).map_err(Error::redis(addr))?;
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .map_err(Error::redis(addr))?;
    if reset {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut c)
            .await
            .map_err(Error::redis("a benchmark command"))?;
        return Ok(0);
    }
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .map_err(Error::redis("a benchmark command"))?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}

/// `requests` charges of cost 1 from `clients` clients at once, each client
/// cycling through its share of `credentials` credentials.
async fn scenario(
    url: &str,
    clients: usize,
    credentials: usize,
    requests: usize,
) -> Result<Scenario> {
    let masters = masters(url).await?;
    for m in &masters {
        evalsha_calls(url, m, true).await?;
    }
    let tag = hex::encode(rand::random::<[u8; 3]>());
    let names: Arc<Vec<String>> = Arc::new(
        (0..credentials)
            .map(|i| format!("portion-bench-{tag}-{i}"))
            .collect(),
    );
    let cost = Arc::new(vec![PoolCost {
        pool: pool(&[HOUR]),
        units: 1,
    }]);
    let ledgers = connect(url, clients).await?;
    // Warm the script cache on every node the credentials live on.
    for name in names.iter().take(64) {
        charge_one(&ledgers[0], name, &cost).await?;
    }
    let run = spread(ledgers, requests.div_ceil(clients), move |ledger, n| {
        let (names, cost) = (names.clone(), cost.clone());
        async move { charge_one(&ledger, &names[n % names.len()], &cost).await }
    })
    .await?;
    let mut split = Vec::new();
    let mut total = 0;
    for m in &masters {
        let n = evalsha_calls(url, m, false).await?;
        total += n;
        split.push((m.clone(), n));
    }
    let per_second = run.times.len() as f64 / run.elapsed.as_secs_f64();
    let latency = percentiles(run.times);
    Ok(Scenario {
        clients,
        credentials,
        per_second,
        p50_us: latency.p50_us,
        p99_us: latency.p99_us,
        masters: split
            .into_iter()
            .map(|(m, n)| (m, n as f64 / total.max(1) as f64))
            .collect(),
    })
}

/// Every scenario, credentials by clients, and the baseline if asked for.
pub async fn measure(url: &str, args: &BenchArgs) -> Result<Capacity> {
    let mut scenarios = Vec::new();
    for credentials in CREDENTIALS {
        for clients in CLIENTS {
            scenarios.push(scenario(url, clients, credentials, args.requests).await?);
        }
    }
    let baseline = match &args.baseline {
        Some(b) => Some(scenario(b, 1, 1, args.requests).await?),
        None => None,
    };
    Ok(Capacity {
        store: crate::ledger::redact_url(url),
        requests: args.requests,
        scenarios,
        baseline,
    })
}

/// The report as text.
pub fn render(c: &Capacity) -> String {
    let mut out = format!(
        "capacity of {} ({} charges per scenario, cost 1, one 1h window; keys expire after the window)\n",
        c.store, c.requests
    );
    out.push_str("  credentials  clients    charges/s     p50 µs     p99 µs   per-master split\n");
    for s in &c.scenarios {
        let split: Vec<String> = s
            .masters
            .iter()
            .map(|(m, f)| format!("{m} {:.0}%", f * 100.0))
            .collect();
        out.push_str(&format!(
            "  {:>11}  {:>7}  {:>11.0}  {:>9.1}  {:>9.1}   {}\n",
            s.credentials,
            s.clients,
            s.per_second,
            s.p50_us,
            s.p99_us,
            split.join(", ")
        ));
    }
    if let Some(b) = &c.baseline {
        let own = &c.scenarios[0];
        out.push_str(&format!(
            "baseline ({} charges, 1 client, 1 credential): p50 {:.1} µs, p99 {:.1} µs, {:.0}/s\n",
            c.requests, b.p50_us, b.p99_us, b.per_second
        ));
        let ratio = own.p50_us / b.p50_us;
        out.push_str(&format!(
            "target: a charge through this store at 1 client <= 1.3x the baseline (p50): {ratio:.2}x {}\n",
            verdict(ratio <= 1.3)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::node_url;

    #[test]
    fn node_urls_keep_the_seed_scheme_credentials_and_options() {
        let store = "rediss+cluster://:pw@localhost:1,localhost:2#insecure";
        assert_eq!(
            node_url(store, "127.0.0.1:7"),
            "rediss://:pw@127.0.0.1:7/#insecure"
        );
        assert_eq!(node_url("redis+cluster://a:1", "b:2"), "redis://b:2");
    }
}
