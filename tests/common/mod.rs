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
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(dir.path())
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be installed (apt-get install redis-server); tests never skip without it");
            let mut server = RedisServer { child, port, dir };
            if server.wait_ready(Duration::from_secs(10)) {
                return server;
            }
            // Port taken between probe and bind, most likely: try another.
            let _ = server.child.kill();
        }
        panic!("redis-server did not start on a free loopback port");
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
        BufReader::new(s).read_line(&mut line).is_ok() && line.starts_with("+PONG")
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
pub fn embedded_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("ledger.sqlite3")
}
