//! A Redis Sentinel group on loopback, for the ledger's Sentinel topology
//! and the failover drill: one master, one replica and three sentinels
//! watching service [`SENTINEL_SERVICE`] (quorum 2).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::redis::RedisServer;
use super::tls::TestCa;
use super::{free_port, wait_until};

/// The service name every sentinel here watches.
pub const SENTINEL_SERVICE: &str = "mymaster";

/// A Sentinel group on loopback: one master, one replica, three sentinels
/// watching service `mymaster` (quorum 2). Killed on drop.
pub struct RedisSentinel {
    pub master: RedisServer,
    pub replica: RedisServer,
    sentinels: Vec<(Child, u16, tempfile::TempDir)>,
    password: Option<String>,
}

impl RedisSentinel {
    pub fn start() -> Self {
        Self::start_with_password(None)
    }

    /// A group whose master and replica require `password`.
    pub fn start_with_password(password: Option<&str>) -> Self {
        let auth: Vec<&str> = match password {
            Some(p) => vec!["--requirepass", p, "--masterauth", p],
            None => vec![],
        };
        let master = RedisServer::start_with(&auth);
        let port = master.port.to_string();
        let replica = RedisServer::start_with(
            &[&["--replicaof", "127.0.0.1", port.as_str()][..], &auth].concat(),
        );
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            sentinels.push(spawn_sentinel(master.port, password, None));
        }
        let group = RedisSentinel {
            master,
            replica,
            sentinels,
            password: password.map(String::from),
        };
        // Ready when the replica is in sync and every sentinel knows the
        // replica and the two other sentinels (needed for a failover).
        wait_until(
            Duration::from_secs(30),
            "the sentinel group never became ready",
            || {
                let synced = group
                    .replica
                    .cli_as(&group.password, &["INFO", "replication"])
                    .contains("master_link_status:up");
                synced
                    && group.sentinels.iter().all(|(_, p, _)| {
                        let replicas =
                            sentinel_cli(*p, &["SENTINEL", "REPLICAS", SENTINEL_SERVICE]);
                        let others = sentinel_cli(*p, &["SENTINEL", "SENTINELS", SENTINEL_SERVICE]);
                        replicas.contains(&group.replica.port.to_string())
                            && others.matches("runid").count() >= 2
                    })
            },
        );
        group
    }

    pub fn url(&self) -> String {
        let addrs: Vec<String> = self
            .sentinels
            .iter()
            .map(|(_, p, _)| format!("127.0.0.1:{p}"))
            .collect();
        let auth = self
            .password
            .as_ref()
            .map(|p| format!(":{p}@"))
            .unwrap_or_default();
        format!(
            "redis+sentinel://{auth}{}/{SENTINEL_SERVICE}",
            addrs.join(",")
        )
    }

    /// Ask the sentinels for a failover now; returns once the old replica
    /// reports itself master.
    pub fn failover(&self) {
        let port = self.sentinels[0].1;
        let reply = sentinel_cli(port, &["SENTINEL", "FAILOVER", SENTINEL_SERVICE]);
        assert_eq!(reply, "OK", "SENTINEL FAILOVER");
        wait_until(
            Duration::from_secs(30),
            "the replica was never promoted",
            || {
                self.replica
                    .cli_as(&self.password, &["INFO", "replication"])
                    .contains("role:master")
            },
        );
    }

    /// The port of the server the sentinels name as master now.
    pub fn master_port(&self) -> u16 {
        let reply = sentinel_cli(
            self.sentinels[0].1,
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SENTINEL_SERVICE],
        );
        reply
            .lines()
            .nth(1)
            .and_then(|p| p.trim().parse().ok())
            .expect("a master address")
    }

    pub fn flush(&self) {
        self.master.cli_as(&self.password, &["FLUSHALL"]);
        wait_until(
            Duration::from_secs(10),
            "the replica never caught up",
            || self.replica.cli_as(&self.password, &["DBSIZE"]) == "0",
        );
    }
}

/// One sentinel watching the master on `master_port` as `SENTINEL_SERVICE`
/// (quorum 2), with the master's password, over TLS when `tls` is given.
pub fn spawn_sentinel(
    master_port: u16,
    password: Option<&str>,
    tls: Option<&TestCa>,
) -> (Child, u16, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut conf = format!("bind 127.0.0.1\ndir {}\n", dir.path().display());
    match tls {
        None => conf.push_str(&format!("port {port}\n")),
        Some(ca) => conf.push_str(&format!(
            "port 0\ntls-port {port}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\ntls-auth-clients no\ntls-replication yes\n",
            ca.file("server.pem"),
            ca.file("server.key"),
            ca.file("ca.pem"),
        )),
    }
    conf.push_str(&format!(
        "sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {master_port} 2\nsentinel down-after-milliseconds {SENTINEL_SERVICE} 2000\nsentinel failover-timeout {SENTINEL_SERVICE} 10000\n"
    ));
    if let Some(p) = password {
        conf.push_str(&format!("sentinel auth-pass {SENTINEL_SERVICE} {p}\n"));
    }
    let path = dir.path().join("sentinel.conf");
    std::fs::write(&path, conf).unwrap();
    let child = Command::new("redis-server")
        .arg(&path)
        .arg("--sentinel")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server --sentinel");
    (child, port, dir)
}

fn sentinel_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        for (child, _, _) in &mut self.sentinels {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
