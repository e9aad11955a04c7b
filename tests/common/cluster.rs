//! A 3-master Redis Cluster on loopback, for the ledger's Cluster topology:
//! real `redis-server --cluster-enabled yes` nodes joined by
//! `redis-cli --cluster create`, no replicas.

use std::process::Command;
use std::time::Duration;

use super::free_port;
use super::redis::RedisServer;
use super::wait_until;

/// A 3-master Redis Cluster on loopback, no replicas; killed on drop.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    password: Option<String>,
}

impl RedisCluster {
    pub fn start() -> Self {
        Self::start_with_password(None)
    }

    /// A cluster whose nodes require `password` (`requirepass`, `masterauth`).
    pub fn start_with_password(password: Option<&str>) -> Self {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                let bus = free_port().to_string();
                let mut args = vec![
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    &bus,
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                ];
                if let Some(p) = password {
                    args.extend(["--requirepass", p, "--masterauth", p]);
                }
                RedisServer::start_with(&args)
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut create = Command::new("redis-cli");
        if let Some(p) = password {
            create.args(["-a", p, "--no-auth-warning"]);
        }
        let out = create
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = RedisCluster {
            nodes,
            password: password.map(String::from),
        };
        wait_until(
            Duration::from_secs(20),
            "the cluster never became ok",
            || {
                cluster.nodes.iter().all(|n| {
                    n.cli_as(&cluster.password, &["CLUSTER", "INFO"])
                        .contains("cluster_state:ok")
                })
            },
        );
        cluster
    }

    pub fn url(&self) -> String {
        let addrs: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let auth = self
            .password
            .as_ref()
            .map(|p| format!(":{p}@"))
            .unwrap_or_default();
        format!("redis+cluster://{auth}{}", addrs.join(","))
    }

    /// Empty every master.
    pub fn flush(&self) {
        for n in &self.nodes {
            n.cli_as(&self.password, &["FLUSHALL"]);
        }
    }
}
