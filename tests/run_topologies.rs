//! `portion run` on a real 3-master Redis Cluster and a real Sentinel group
//! (one master, one replica, three sentinels), and a Sentinel failover in
//! the middle of a run.

use std::process::Stdio;

use crate::common::cluster::RedisCluster;
use crate::common::deployment::{Deployment, deployment_yaml, run, trending_with, videos_job};
use crate::common::redis::RedisServer;
use crate::common::sentinel::{RedisSentinel, SENTINEL_SERVICE};
use crate::common::standin::Standin;
use crate::common::tls::{TestCa, TlsRedis};

const SMALL: &[&str] = &["{ limit: 5, per: 1h }"];

fn used_1h(d: &Deployment) -> u64 {
    d.status_json()["credentials"][0]["pools"][0]["windows"][0]["used"]
        .as_u64()
        .unwrap()
}

/// With a password on each topology (the URL carries it; no message shows it).
#[test]
fn a_job_runs_end_to_end_on_a_cluster_and_on_sentinel() {
    let cluster = RedisCluster::start_with_password(Some("cluster-pw-0xC0FFEE"));
    let sentinel = RedisSentinel::start_with_password(Some("sentinel-pw-0xC0FFEE"));
    for (kind, url) in [("cluster", cluster.url()), ("sentinel", sentinel.url())] {
        let up = Standin::start(&["--pages", "3"]);
        let d = trending_with(&up, &url, SMALL, &["US", "GB", "DE"], 3, "fail_closed");

        let r = d.portion(&["run"]);
        assert_eq!(r.code, 75, "{kind}: {r:?}");
        assert!(r.stderr.contains("5 calls, spent units 5"), "{kind}: {r:?}");
        assert!(
            r.stderr.contains("next run starts at GB step 0 page 2"),
            "{kind}: {r:?}"
        );
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 75, "{kind}: {r:?}");
        assert!(r.stderr.contains("0 calls"), "{kind}: {r:?}");
        assert_eq!(up.seen().len(), 5, "{kind}");
        assert_eq!(used_1h(&d), 5, "{kind}");
        // A wrong password is refused, and no message shows either one.
        let wrong = url.replace("-pw-0xC0FFEE", "-pw-wrong");
        let r = run(&mut d.cmd(&["--store", &wrong, "run"]));
        assert_eq!(r.code, 69, "{kind}: {r:?}");
        assert!(
            !r.all().contains("0xC0FFEE") && !r.all().contains("pw-wrong"),
            "{kind}: {r:?}"
        );
        assert_eq!(up.seen().len(), 5, "{kind}");
        // No password at all: the servers answer NOAUTH, which is as good as
        // unreachable (69), and the message says what to do.
        let none = url.replace(&format!(":{kind}-pw-0xC0FFEE@"), "");
        assert!(!none.contains('@'), "{none}");
        let r = run(&mut d.cmd(&["--store", &none, "run"]));
        assert_eq!(r.code, 69, "{kind}: {r:?}");
        assert!(r.stderr.contains("wants a password"), "{kind}: {r:?}");
        assert_eq!(up.seen().len(), 5, "{kind}");
    }
}

/// One server with a password, named without one: 69, nothing sent.
#[test]
fn a_store_that_wants_a_password_and_gets_none_is_unavailable() {
    let redis = RedisServer::start_with(&["--requirepass", "pw-0xBEEF"]);
    let up = Standin::start(&["--pages", "1"]);
    let d = trending_with(&up, &redis.url(), SMALL, &["US"], 1, "fail_closed");
    for args in [&["run"][..], &["status"][..]] {
        let r = d.portion(args);
        assert_eq!(r.code, 69, "{args:?}: {r:?}");
        assert!(r.stderr.contains("wants a password"), "{args:?}: {r:?}");
    }
    assert!(up.seen().is_empty());
}

/// `rediss://`, `rediss+cluster://` and `rediss+sentinel://` with a password:
/// TLS to servers that only speak TLS (a Cluster's bus, replication and the
/// sentinels included), certificates verified against
/// a CA of the test's own, trusted through `SSL_CERT_FILE` as an operator
/// would.
#[test]
fn a_job_runs_over_tls_with_a_password_on_every_topology() {
    let ca = TestCa::new();
    let single = TlsRedis::single(&ca, "tls-pw-0xBEEF");
    let cluster = TlsRedis::cluster(&ca, "tls-pw-0xBEEF");
    let sentinel = TlsRedis::sentinel(&ca, "tls-pw-0xBEEF");
    let urls = [
        (
            "single",
            format!("rediss://:tls-pw-0xBEEF@localhost:{}/0", single.ports[0]),
        ),
        (
            "cluster",
            format!(
                "rediss+cluster://:tls-pw-0xBEEF@localhost:{},localhost:{}",
                cluster.ports[0], cluster.ports[1]
            ),
        ),
        (
            "sentinel",
            format!(
                "rediss+sentinel://:tls-pw-0xBEEF@localhost:{},localhost:{},localhost:{}/{}",
                sentinel.ports[2], sentinel.ports[3], sentinel.ports[4], SENTINEL_SERVICE
            ),
        ),
    ];
    for (kind, url) in urls {
        let up = Standin::start(&["--pages", "3"]);
        let d = trending_with(&up, &url, SMALL, &["US", "GB", "DE"], 3, "fail_closed");
        let r = run(d.cmd(&["run"]).env("SSL_CERT_FILE", ca.file("ca.pem")));
        assert_eq!(r.code, 75, "{kind}: {r:?}");
        assert!(r.stderr.contains("5 calls, spent units 5"), "{kind}: {r:?}");
        assert!(!r.all().contains("0xBEEF"), "{kind}: {r:?}");
        let r = run(d
            .cmd(&["status", "--json"])
            .env("SSL_CERT_FILE", ca.file("ca.pem")));
        assert!(r.stdout.contains("\"used\": 5"), "{kind}: {r:?}");
        // Without the CA, the certificate is refused: the store is unreachable.
        let r = d.portion(&["run"]);
        assert_eq!(r.code, 69, "{kind}: {r:?}");
        assert_eq!(up.seen().len(), 5, "{kind}");
    }
}

#[test]
fn a_sentinel_failover_mid_run_keeps_the_budget() {
    let group = RedisSentinel::start();
    let old_master = group.master_port();
    let up = Standin::start(&["--pages", "3", "--delay", "250ms"]);
    let d = Deployment::new("");
    let job = videos_job("trending", "main", &["US", "GB", "DE", "FR"], 3, &up.base());
    let budget = &["{ limit: 8, per: 1h }"];
    d.write(&deployment_yaml(
        &group.url(),
        budget,
        "fail_closed",
        &[job],
    ));

    let run = d
        .cmd(&["run"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    up.wait_for(3);
    group.failover();
    let out = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let code = out.status.code().unwrap();
    // It carried on against the new master (the budget stopped it) or stopped cleanly.
    assert_eq!(code, 75, "{stderr}");
    assert_ne!(group.master_port(), old_master, "the master moved");

    // Never over budget: the upstream saw at most 8 calls, and the new
    // master knows every one of them.
    let seen = up.seen().len();
    assert!(seen <= 8, "{seen} calls reached the upstream: {stderr}");
    assert_eq!(
        used_1h(&d) as usize,
        seen,
        "every call is in the new master's log"
    );
    // A later run learns the window is full from the new master.
    let r = d.portion(&["run"]);
    if seen == 8 {
        assert_eq!(r.code, 75, "{r:?}");
        assert!(r.stderr.contains("0 calls"), "{r:?}");
    }
    assert!(up.seen().len() <= 8, "over budget after the failover");
}
