//! Test fixtures shared by the integration tests: a real `redis-server` on a
//! free loopback port, started per fixture and killed when it drops. There is
//! no mock store: a machine without `redis-server` fails these tests (CI
//! installs it first).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child process on 127.0.0.1, with its data in a temp dir.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
    extra: Vec<String>,
}

fn spawn_redis(port: u16, dir: &tempfile::TempDir, extra: &[String]) -> Child {
    Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir.path())
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server must be installed (apt-get install redis-server); tests never skip without it")
}

/// Poll `ready` until it holds; panics with `what` after `within`.
pub fn wait_until(within: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ready() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral port")
        .local_addr()
        .unwrap()
        .port()
}

impl RedisServer {
    /// Start a fresh server (no persistence). Panics when `redis-server` is
    /// missing or does not come up: tests never skip for want of Redis.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Start a fresh server with extra `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> Self {
        for _ in 0..5 {
            let dir = tempfile::tempdir().expect("temp dir");
            let port = free_port();
            let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            let child = spawn_redis(port, &dir, &extra);
            let mut server = RedisServer {
                child,
                port,
                dir,
                extra,
            };
            if server.wait_ready(Duration::from_secs(10)) {
                return server;
            }
            // Port taken between probe and bind, most likely: try another.
            let _ = server.child.kill();
        }
        panic!("redis-server did not start on a free loopback port");
    }

    /// Kill the server (SIGKILL: no shutdown save) and start it again on the
    /// same port and data directory.
    pub fn restart(&mut self) {
        self.kill();
        self.child = spawn_redis(self.port, &self.dir, &self.extra);
        assert!(
            self.wait_ready(Duration::from_secs(10)),
            "redis-server did not come back"
        );
    }

    /// The server's process id (to stop and continue it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_ready(&mut self, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if self.ping() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// True when the server answers PING right now.
    pub fn ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        if s.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut line = String::new();
        // A server with a password answers NOAUTH: it is up all the same.
        BufReader::new(s).read_line(&mut line).is_ok()
            && (line.starts_with("+PONG") || line.starts_with("-NOAUTH"))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Run a `redis-cli` command against this server; returns its stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli must be installed with redis-server");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Stop the server now (for outage tests).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A path for an embedded store file in `dir`.
/// A TCP relay in front of a server that can lose a reply on purpose: after
/// [`LossyRelay::lose_next_reply`], the next bytes the server sends are
/// dropped and the client's connection is closed, as when a network fails
/// after the server has acted on a request but before the client heard back.
pub struct LossyRelay {
    pub port: u16,
    lose: std::sync::Arc<std::sync::atomic::AtomicBool>,
    lost: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl LossyRelay {
    pub fn start(upstream: u16) -> Self {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let port = listener.local_addr().unwrap().port();
        let lose = Arc::new(AtomicBool::new(false));
        let lost = Arc::new(AtomicUsize::new(0));
        let (l, n) = (lose.clone(), lost.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c_in, &mut s_out);
                    let _ = s_out.shutdown(std::net::Shutdown::Write);
                });
                let (l, n) = (l.clone(), n.clone());
                std::thread::spawn(move || {
                    let (mut from, mut to) = (server, client);
                    let mut buf = [0u8; 65536];
                    while let Ok(k @ 1..) = std::io::Read::read(&mut from, &mut buf) {
                        if l.swap(false, Ordering::SeqCst) {
                            n.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        if to.write_all(&buf[..k]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Both);
                    let _ = from.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        Self { port, lose, lost }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Lose the next reply (and close that connection).
    pub fn lose_next_reply(&self) {
        self.lose.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// How many replies were lost.
    pub fn lost(&self) -> usize {
        self.lost.load(std::sync::atomic::Ordering::SeqCst)
    }
}

pub fn embedded_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("ledger.sqlite3")
}

/// A window of `limit` units per `secs` seconds, `headroom` kept back.
pub fn window(secs: u64, limit: u64, headroom: u64) -> quota::ledger::Window {
    quota::ledger::Window {
        per: Duration::from_secs(secs),
        limit,
        headroom,
    }
}

/// A pool of those windows.
pub fn pool(name: &str, windows: Vec<quota::ledger::Window>) -> quota::ledger::Pool {
    quota::ledger::Pool {
        name: name.into(),
        windows,
    }
}

/// The `quota` binary under test.
pub fn quota_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_quota"))
}

/// A `quota` command with a clean environment: no inherited QUOTA_* or
/// RUST_LOG, state under `home` so nothing touches the real home.
pub fn quota(home: &std::path::Path) -> Command {
    let mut c = Command::new(quota_bin());
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_STATE_HOME", home.join("state"));
    c
}

/// The finished output of a command: exit code, stdout, stderr.
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    pub fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

impl std::fmt::Debug for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

pub fn run(cmd: &mut Command) -> Ran {
    let out = cmd.output().expect("run quota");
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Start a command in the background, its output captured.
pub fn spawn(cmd: &mut Command) -> Child {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn quota")
}

/// Wait for a command started with [`spawn`].
pub fn finish(child: Child) -> Ran {
    let out = child.wait_with_output().unwrap();
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Send `sig` (e.g. "-TERM") to process `pid`.
pub fn kill(sig: &str, pid: u32) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// One request the stand-in saw.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Seen {
    pub at_us: u64,
    pub path: String,
    pub region: String,
    pub page: u32,
    pub status: u16,
    pub pool: String,
}

/// The YouTube stand-in (`quota standin`) on a free loopback port, logging
/// every request it sees; killed when dropped.
pub struct Standin {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Standin {
    pub fn start(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("requests.jsonl");
        let mut child = Command::new(quota_bin())
            .args(["standin", "--listen", "127.0.0.1:0", "--log"])
            .arg(&log)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the stand-in");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("the stand-in says where it listens");
        let port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line from the stand-in: {line:?}"));
        Standin {
            child,
            port,
            log,
            _dir: dir,
        }
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request seen so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        // Only whole lines: the stand-in may be writing the next one.
        let whole = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        whole
            .lines()
            .map(|l| serde_json::from_str(l).expect("a log line"))
            .collect()
    }

    /// Wait (up to 20 s) until the stand-in has seen `n` requests.
    pub fn wait_for(&self, n: usize) {
        wait_until(
            Duration::from_secs(20),
            &format!("the stand-in never saw {n} requests"),
            || self.seen().len() >= n,
        );
    }
}

impl Drop for Standin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A deployment for the binary tests: a folder with `quota.yaml`, the key
/// file `key` (holding `demo-key`, what the stand-in accepts), outputs
/// under `out/`.
pub struct Deployment {
    pub dir: tempfile::TempDir,
}

impl Deployment {
    pub fn new(yaml: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("key"), "demo-key\n").unwrap();
        let d = Deployment { dir };
        d.write(yaml);
        d
    }

    pub fn write(&self, yaml: &str) {
        std::fs::write(self.config(), yaml).unwrap();
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("quota.yaml")
    }

    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// `quota -c quota.yaml ARGS…`, not yet run.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = quota(self.dir.path());
        c.arg("-c").arg(self.config()).args(args);
        c
    }

    pub fn quota(&self, args: &[&str]) -> Ran {
        run(&mut self.cmd(args))
    }

    /// Output files of `job` (visible ones), sorted by name.
    pub fn outputs(&self, job: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.dir.path().join("out").join(job))
            .map(|rd| {
                rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

/// A `store:` value for each kind of store the binary tests run against.
pub fn embedded_store(d: &Deployment) -> String {
    format!("embedded:{}", d.path().join("ledger.sqlite3").display())
}

/// A YAML job block: `regions`, one videos.list step with `max_pages`.
pub fn videos_job(
    name: &str,
    credential: &str,
    regions: &[&str],
    max_pages: u32,
    base: &str,
) -> String {
    format!(
        r#"  {name}:
    credential: {credential}
    regions: [{regions}]
    steps:
      - endpoint: videos.list
        request:
          url: {base}/youtube/v3/videos
          query: {{ part: snippet, chart: mostPopular, regionCode: "{{region}}", key: "{{secret}}" }}
        paginate: {{ token: /nextPageToken, param: pageToken, max_pages: {max_pages} }}
    output: out/{name}
"#,
        regions = regions.join(", ")
    )
}

/// A whole configuration: one credential `main` (secret from the `key`
/// file) with a `units` pool of the given windows, videos.list costing 1
/// unit (`policy` when the store is down), and the given jobs.
pub fn deployment_yaml(store: &str, windows: &str, policy: &str, jobs: &[String]) -> String {
    format!(
        r#"store: {store}
lock_ttl: 2s
http: {{ timeout: 5s, connect_timeout: 2s, retries: 3, backoff: 20ms }}
credentials:
  main:
    secret: {{ file: key }}
    pools:
      units:
{windows}
endpoints:
  videos.list: {{ cost: {{ units: 1 }}, on_store_error: {policy} }}
jobs:
{jobs}"#,
        jobs = jobs.concat()
    )
}

/// A budget no test reaches: 1000 units an hour.
pub const WIDE: &str = "        - { limit: 1000, per: 1h }";

/// A deployment with one job, `trending`, over `regions` (up to `max_pages`
/// pages each) against the stand-in `up`, with the [`WIDE`] budget, on
/// `store` ("embedded": a file in the deployment's folder).
pub fn trending(
    up: &Standin,
    store: &str,
    regions: &[&str],
    max_pages: u32,
    policy: &str,
) -> Deployment {
    trending_with(up, store, WIDE, regions, max_pages, policy)
}

/// [`trending`] with the given windows of the `units` pool.
pub fn trending_with(
    up: &Standin,
    store: &str,
    windows: &str,
    regions: &[&str],
    max_pages: u32,
    policy: &str,
) -> Deployment {
    let d = Deployment::new("");
    let store = if store == "embedded" {
        embedded_store(&d)
    } else {
        store.to_string()
    };
    let job = videos_job("trending", "main", regions, max_pages, &up.base());
    d.write(&deployment_yaml(&store, windows, policy, &[job]));
    d
}

/// A 3-master Redis Cluster on loopback (`redis-server --cluster-enabled yes`
/// plus `redis-cli --cluster create`), no replicas.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    password: Option<String>,
}

/// `redis-cli` against `n`, authenticated when there is a password.
fn cli_as(n: &RedisServer, password: &Option<String>, args: &[&str]) -> String {
    match password {
        Some(p) => n.cli(&[&["-a", p.as_str(), "--no-auth-warning"][..], args].concat()),
        None => n.cli(args),
    }
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
                    cli_as(n, &cluster.password, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
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
            cli_as(n, &self.password, &["FLUSHALL"]);
        }
    }
}

/// A Sentinel group on loopback: one master, one replica, three sentinels
/// watching service `mymaster` (quorum 2).
pub struct RedisSentinel {
    pub master: RedisServer,
    pub replica: RedisServer,
    sentinels: Vec<(Child, u16, tempfile::TempDir)>,
    password: Option<String>,
}

pub const SENTINEL_SERVICE: &str = "mymaster";

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
                let synced = cli_as(&group.replica, &group.password, &["INFO", "replication"])
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
                cli_as(&self.replica, &self.password, &["INFO", "replication"])
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
        cli_as(&self.master, &self.password, &["FLUSHALL"]);
        wait_until(
            Duration::from_secs(10),
            "the replica never caught up",
            || cli_as(&self.replica, &self.password, &["DBSIZE"]) == "0",
        );
    }
}

/// One sentinel watching the master on `master_port` as `SENTINEL_SERVICE`
/// (quorum 2), with the master's password, over TLS when `tls` is given.
fn spawn_sentinel(
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
            "/CN=quota test CA",
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

    fn start_with(ca: &TestCa, password: &str, n: usize, cluster: bool, extra: &[&str]) -> Self {
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
        wait_until(
            Duration::from_secs(10),
            "a TLS redis-server did not start",
            || {
                servers
                    .ports
                    .iter()
                    .all(|p| servers.cli(ca, password, *p, &["PING"]) == "PONG")
            },
        );
        servers
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
