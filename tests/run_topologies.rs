//! `quota run` on a real 3-master Redis Cluster and a real Sentinel group
//! (one master, one replica, three sentinels), and a Sentinel failover in
//! the middle of a run.

mod common;

use std::process::Stdio;

use common::{RedisCluster, RedisSentinel, Standin, deployment_yaml, videos_job};

const SMALL: &str = "        - { limit: 5, per: 1h }";

fn used_1h(d: &common::Deployment) -> u64 {
    let r = d.quota(&["status", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    v["credentials"][0]["pools"][0]["windows"][0]["used"]
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
        let d = common::trending_with(&up, &url, SMALL, &["US", "GB", "DE"], 3, "fail_closed");

        let r = d.quota(&["run"]);
        assert_eq!(r.code, 75, "{kind}: {r:?}");
        assert!(r.stderr.contains("5 calls, spent units 5"), "{kind}: {r:?}");
        assert!(
            r.stderr.contains("next run starts at GB step 0 page 2"),
            "{kind}: {r:?}"
        );
        let r = d.quota(&["run"]);
        assert_eq!(r.code, 75, "{kind}: {r:?}");
        assert!(r.stderr.contains("0 calls"), "{kind}: {r:?}");
        assert_eq!(up.seen().len(), 5, "{kind}");
        assert_eq!(used_1h(&d), 5, "{kind}");
        // A wrong password is refused, and no message shows either one.
        let wrong = url.replace("-pw-0xC0FFEE", "-pw-wrong");
        let r = common::run(&mut d.cmd(&["--store", &wrong, "run"]));
        assert_eq!(r.code, 69, "{kind}: {r:?}");
        assert!(
            !r.all().contains("0xC0FFEE") && !r.all().contains("pw-wrong"),
            "{kind}: {r:?}"
        );
        assert_eq!(up.seen().len(), 5, "{kind}");
    }
}

/// `rediss://` with a password: TLS to a redis-server that only speaks TLS,
/// its certificate verified against a CA of the test's own.
#[test]
fn a_job_runs_over_tls_with_a_password() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).display().to_string();
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &p("ca.key"),
        "-out",
        &p("ca.pem"),
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
        &p("server.key"),
        "-out",
        &p("server.csr"),
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(
        dir.path().join("san.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        &p("server.csr"),
        "-CA",
        &p("ca.pem"),
        "-CAkey",
        &p("ca.key"),
        "-CAcreateserial",
        "-out",
        &p("server.pem"),
        "-days",
        "2",
        "-extfile",
        &p("san.ext"),
    ]);

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = std::process::Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .args([
            "--tls-cert-file",
            &p("server.pem"),
            "--tls-key-file",
            &p("server.key"),
            "--tls-ca-cert-file",
            &p("ca.pem"),
        ])
        .args([
            "--tls-auth-clients",
            "no",
            "--requirepass",
            "tls-pw-0xBEEF",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the TLS redis-server did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    let up = Standin::start(&["--pages", "3"]);
    let d = common::Deployment::new("");
    let job = videos_job("trending", "main", &["US", "GB", "DE"], 3, &up.base());
    let url = format!("rediss://:tls-pw-0xBEEF@localhost:{port}/0");
    d.write(&deployment_yaml(&url, SMALL, "fail_closed", &[job]));
    // The CA is trusted through SSL_CERT_FILE, as an operator would.
    let r = common::run(d.cmd(&["run"]).env("SSL_CERT_FILE", p("ca.pem")));
    assert_eq!(r.code, 75, "{r:?}");
    assert!(r.stderr.contains("5 calls, spent units 5"), "{r:?}");
    assert!(!r.all().contains("0xBEEF"), "{r:?}");
    // Without the CA, the certificate is refused: the store is unreachable.
    let r = d.quota(&["run"]);
    assert_eq!(r.code, 69, "{r:?}");
    assert_eq!(up.seen().len(), 5);
    let _ = server.kill();
    let _ = server.wait();
}

#[test]
fn a_sentinel_failover_mid_run_keeps_the_budget() {
    let group = RedisSentinel::start();
    let old_master = group.master_port();
    let up = Standin::start(&["--pages", "3", "--delay", "250ms"]);
    let d = common::Deployment::new("");
    let job = videos_job("trending", "main", &["US", "GB", "DE", "FR"], 3, &up.base());
    let budget = "        - { limit: 8, per: 1h }";
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
    let r = d.quota(&["run"]);
    if seen == 8 {
        assert_eq!(r.code, 75, "{r:?}");
        assert!(r.stderr.contains("0 calls"), "{r:?}");
    }
    assert!(up.seen().len() <= 8, "over budget after the failover");
}
