//! A real `redis-server` on a free loopback port, its data in a temp dir,
//! killed when it drops: the single-node store of the tests, and the
//! building block of the Cluster and Sentinel fixtures.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

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
                // (another test's server may hold the port we were given,
                // and answer before ours fails to bind: it must be ours)
                return self.process_id() == Some(self.child.id());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// True when the server answers PING right now.
    fn ping(&self) -> bool {
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

    /// The `process_id` the server on this port reports (`INFO server`),
    /// after `AUTH` with this server's `--requirepass`, if any.
    fn process_id(&self) -> Option<u32> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        let password = self
            .extra
            .iter()
            .position(|a| a == "--requirepass")
            .and_then(|i| self.extra.get(i + 1));
        if let Some(p) = password {
            s.write_all(format!("AUTH {p}\r\n").as_bytes()).ok()?;
        }
        s.write_all(b"INFO server\r\n").ok()?;
        let mut lines = BufReader::new(s).lines();
        if password.is_some() {
            lines.next()?.ok()?; // +OK, or an error that fails below
        }
        lines
            .take(64)
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("process_id:").map(|p| p.trim().to_string()))?
            .parse()
            .ok()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// A connection to this server with the charge script loaded: the
    /// connection and the script's SHA, for tests that fill a log fast
    /// (pipelined EVALSHA) rather than through `portion`.
    pub fn with_charge_script(&self) -> (::redis::Connection, String) {
        let mut con = ::redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let sha: String = ::redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(portion::ledger::script_source("charge").unwrap())
            .query(&mut con)
            .unwrap();
        (con, sha)
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

    /// The server's clock (`TIME`), in µs since the epoch: the store's clock
    /// the ledger's scripts read.
    pub fn time_us(&self) -> i64 {
        let out = self.cli(&["TIME"]);
        let mut parts = out.lines().map(|l| l.trim().parse::<i64>());
        match (parts.next(), parts.next()) {
            (Some(Ok(s)), Some(Ok(us))) => s * 1_000_000 + us,
            _ => panic!("unexpected TIME reply: {out:?}"),
        }
    }

    /// [`RedisServer::cli`], authenticated when there is a password.
    pub fn cli_as(&self, password: &Option<String>, args: &[&str]) -> String {
        match password {
            Some(p) => self.cli(&[&["-a", p.as_str(), "--no-auth-warning"][..], args].concat()),
            None => self.cli(args),
        }
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
