//! Redis over TLS, for `rediss://` on every topology: a certificate
//! authority of the test's own (made with `openssl`), and `redis-server`
//! processes that speak only TLS, as one server, a Cluster or a Sentinel
//! group.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::sentinel::{SENTINEL_SERVICE, spawn_sentinel};
use super::{free_port, wait_until};

/// A certificate authority of the test's own, and a server certificate it
/// signed for `localhost` and `127.0.0.1` (made with `openssl`).
pub struct TestCa {
    pub dir: tempfile::TempDir,
}

impl TestCa {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let p = |f: &str| dir.path().join(f).display().to_string();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .output()
                .expect("openssl");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let (ca_key, ca, key, csr, cert) = (
            p("ca.key"),
            p("ca.pem"),
            p("server.key"),
            p("server.csr"),
            p("server.pem"),
        );
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &ca_key,
            "-out",
            &ca,
            "-days",
            "2",
            "-subj",
            "/CN=portion test CA",
        ]);
        openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            "/CN=localhost",
        ]);
        std::fs::write(
            dir.path().join("san.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        )
        .unwrap();
        let ext = p("san.ext");
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &cert,
            "-days",
            "2",
            "-extfile",
            &ext,
        ]);
        TestCa { dir }
    }

    pub fn file(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

/// `redis-server` processes that speak only TLS (and want `password`):
/// one server, or a 3-master Cluster whose bus is TLS too. Killed on drop.
pub struct TlsRedis {
    children: Vec<Child>,
    pub ports: Vec<u16>,
    _dirs: Vec<tempfile::TempDir>,
}

impl TlsRedis {
    pub fn single(ca: &TestCa, password: &str) -> Self {
        Self::start(ca, password, 1, false)
    }

    pub fn cluster(ca: &TestCa, password: &str) -> Self {
        let servers = Self::start(ca, password, 3, true);
        let addrs: Vec<String> = servers
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let out = Command::new("redis-cli")
            .args([
                "--tls",
                "--cacert",
                &ca.file("ca.pem"),
                "-a",
                password,
                "--no-auth-warning",
            ])
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
        wait_until(
            Duration::from_secs(20),
            "the TLS cluster never became ok",
            || {
                servers.ports.iter().all(|p| {
                    servers
                        .cli(ca, password, *p, &["CLUSTER", "INFO"])
                        .contains("cluster_state:ok")
                })
            },
        );
        servers
    }

    /// A Sentinel group speaking only TLS: a master, a replica (TLS
    /// replication) and three sentinels. `ports`: master, replica, sentinels.
    pub fn sentinel(ca: &TestCa, password: &str) -> Self {
        let mut group = Self::start(ca, password, 1, false);
        let master = group.ports[0];
        let replica = Self::start_with(
            ca,
            password,
            1,
            false,
            &[
                "--replicaof",
                "127.0.0.1",
                &master.to_string(),
                "--tls-replication",
                "yes",
            ],
        );
        group.absorb(replica);
        for _ in 0..3 {
            let (child, port, dir) = spawn_sentinel(master, Some(password), Some(ca));
            group.children.push(child);
            group.ports.push(port);
            group._dirs.push(dir);
        }
        wait_until(
            Duration::from_secs(30),
            "the TLS sentinel group never became ready",
            || {
                let synced = group
                    .cli(ca, password, group.ports[1], &["INFO", "replication"])
                    .contains("master_link_status:up");
                synced
                    && group.ports[2..].iter().all(|p| {
                        group
                            .cli(
                                ca,
                                password,
                                *p,
                                &["SENTINEL", "REPLICAS", SENTINEL_SERVICE],
                            )
                            .contains(&group.ports[1].to_string())
                    })
            },
        );
        group
    }

    fn absorb(&mut self, mut other: TlsRedis) {
        self.children.append(&mut other.children);
        self.ports.append(&mut other.ports);
        self._dirs.append(&mut other._dirs);
    }

    fn start(ca: &TestCa, password: &str, n: usize, cluster: bool) -> Self {
        Self::start_with(ca, password, n, cluster, &[])
    }

    /// `n` servers, started again on other ports when one does not come
    /// up (a port taken between the probe and the bind, most likely), as
    /// [`crate::common::redis::RedisServer::start_with`] does.
    fn start_with(ca: &TestCa, password: &str, n: usize, cluster: bool, extra: &[&str]) -> Self {
        for _ in 0..5 {
            if let Some(servers) = Self::try_start(ca, password, n, cluster, extra) {
                return servers;
            }
        }
        panic!("a TLS redis-server did not start on a free loopback port");
    }

    fn try_start(
        ca: &TestCa,
        password: &str,
        n: usize,
        cluster: bool,
        extra: &[&str],
    ) -> Option<Self> {
        let mut servers = TlsRedis {
            children: Vec::new(),
            ports: Vec::new(),
            _dirs: Vec::new(),
        };
        for _ in 0..n {
            let dir = tempfile::tempdir().unwrap();
            let port = free_port();
            let mut cmd = Command::new("redis-server");
            cmd.args([
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .args([
                "--tls-cert-file",
                &ca.file("server.pem"),
                "--tls-key-file",
                &ca.file("server.key"),
            ])
            .args([
                "--tls-ca-cert-file",
                &ca.file("ca.pem"),
                "--tls-auth-clients",
                "no",
            ])
            .args(["--requirepass", password, "--masterauth", password])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path());
            cmd.args(extra);
            if cluster {
                let bus = free_port().to_string();
                cmd.args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    &bus,
                    "--tls-cluster",
                    "yes",
                ])
                .args(["--cluster-config-file", "nodes.conf"]);
            }
            let child = cmd
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server");
            servers.children.push(child);
            servers.ports.push(port);
            servers._dirs.push(dir);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !servers
            .ports
            .iter()
            .all(|p| servers.cli(ca, password, *p, &["PING"]) == "PONG")
        {
            if std::time::Instant::now() > deadline {
                return None; // (dropped: its servers killed)
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(servers)
    }

    fn cli(&self, ca: &TestCa, password: &str, port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args([
                "--tls",
                "--cacert",
                &ca.file("ca.pem"),
                "-a",
                password,
                "--no-auth-warning",
            ])
            .args(["-p", &port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
