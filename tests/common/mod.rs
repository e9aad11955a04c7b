//! Fixtures shared by the tests, one module each: real processes
//! (`redis-server` alone, as a Cluster, as a Sentinel group, over TLS; the
//! stand-in upstream; the `portion` binary) on free loopback ports, each
//! killed when its handle drops. There is no mock store: a machine without
//! `redis-server` fails these tests (CI installs it first). And what the
//! test modules share, so that none imports another: the configuration
//! builder (`yaml`), the known state of the operator's reports (`known`),
//! the ledger's building blocks and the metered cases every store runs.

pub mod cluster;
pub mod deployment;
pub mod inputs;
pub mod kept;
pub mod known;
pub mod ledger;
pub mod metered;
pub mod openmetrics;
pub mod postgres;
pub mod redis;
pub mod relay;
pub mod sentinel;
pub mod server;
pub mod sinks;
pub mod standin;
pub mod tls;
pub mod yaml;

use std::net::TcpListener;
use std::time::{Duration, Instant};

/// Poll `ready` until it holds; panics with `what` after `within`.
pub fn wait_until(within: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ready() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral port")
        .local_addr()
        .unwrap()
        .port()
}
