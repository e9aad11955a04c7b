//! The upstream of the binary tests: the stand-in (the `portion-standin`
//! binary of the workspace's `standin/` package, a metered YouTube-shaped
//! imitation) on a free loopback port, and what it saw.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use super::wait_until;

/// One request the stand-in saw (the fields of its log line the tests read).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Seen {
    pub at_us: u64,
    pub region: String,
    pub page: u32,
    pub status: u16,
    #[serde(default)]
    pub method: String,
    #[serde(default)]
    pub path: String,
    /// The `pageToken` it was asked for.
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub referer: Option<String>,
    #[serde(default)]
    pub x_api_key: Option<String>,
    /// The query string (the paths of `apis.rs` only).
    #[serde(default)]
    pub query: Option<String>,
    /// The `Host` header (the paths of `apis.rs` only).
    #[serde(default)]
    pub host: Option<String>,
    /// The request's body, when it was JSON (the paths of `apis.rs` only).
    #[serde(default)]
    pub body: Option<serde_json::Value>,
    /// Requests in flight when it was logged, itself included.
    #[serde(default)]
    pub in_flight: u64,
}

/// The YouTube stand-in (`portion-standin`) on a free loopback port, logging
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
        let mut child = Command::new(binary())
            .args(["--listen", "127.0.0.1:0", "--log"])
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

    /// A base URL whose requests the stand-in answers with a `status`
    /// redirect to the same path on `origin` (query and key kept).
    pub fn away(&self, status: u16, origin: &str) -> String {
        let encoded: String = origin
            .bytes()
            .map(|b| match b {
                b':' => "%3A".to_string(),
                b'/' => "%2F".to_string(),
                b => (b as char).to_string(),
            })
            .collect();
        format!("{}/away/{status}/{encoded}", self.base())
    }

    /// A base URL whose requests go through `hops` same-origin redirects.
    pub fn hops(&self, hops: u32) -> String {
        format!("{}/hop/{hops}", self.base())
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

/// The stand-in's binary, built first by cargo (once per test process) with
/// the profile of these tests. It is another package's binary, so cargo
/// neither names it to these tests (`CARGO_BIN_EXE_*`) nor rebuilds it for
/// `cargo test --test lib` alone: without this, an edited stand-in would
/// go untested, or a fresh checkout would have none.
fn binary() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        // The tests run from <target>/<profile dir>/deps/.
        let exe = std::env::current_exe().expect("the test binary's path");
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>");
        let profile = match dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "dev",
            Some(name) => name,
        };
        // The workspace's default members, not `--package portion-standin`
        // alone: its dependencies then have the features `cargo build`
        // gives them, and the binary it built is used as it is.
        let out = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "--message-format=json"])
            .args(["--bin", "portion-standin", "--profile", profile])
            .arg("--manifest-path")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .stderr(Stdio::inherit())
            .output()
            .expect("run cargo to build the stand-in");
        assert!(out.status.success(), "cargo could not build the stand-in");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|m| m["target"]["name"] == "portion-standin" && m["executable"].is_string())
            .and_then(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo names the stand-in's executable")
    })
}
