//! A distinctive API key never appears in any output, log line, error,
//! output file or the store, even with `RUST_LOG=trace`, through success,
//! retries, a refused key and a network error.

use crate::common::deployment::{Deployment, deployment_yaml, quota, run, videos_job};
use crate::common::redis::RedisServer;
use crate::common::standin::Standin;

const KEY: &str = "AIzaSyD-distinctive-7f3c9e21";
const WRONG: &str = "AIzaSyD-wrong-key-55b0a1";

fn assert_clean(what: &str, text: &str) {
    for k in [KEY, WRONG, "AIzaSyD"] {
        assert!(!text.contains(k), "{what} shows a key:\n{text}");
    }
}

#[test]
fn the_api_key_never_appears_anywhere() {
    let redis = RedisServer::start_with(&["--rdbcompression", "no"]);
    let up = Standin::start(&["--key", KEY, "--fail-first", "2", "--pages", "2"]);
    let d = Deployment::new("");
    std::fs::write(d.path().join("key"), format!("{KEY}\n")).unwrap();
    std::fs::write(d.path().join("wrong"), format!("{WRONG}\n")).unwrap();
    let mut jobs = vec![videos_job("good", "main", &["US", "GB"], 2, &up.base())];
    // A job whose upstream is a closed port: network errors, retried.
    jobs.push(videos_job(
        "unreachable",
        "main",
        &["US"],
        1,
        "http://127.0.0.1:1",
    ));
    let mut yaml = deployment_yaml(
        &redis.url(),
        "        - { limit: 1000, per: 1h }",
        "fail_closed",
        &jobs,
    );
    // A second credential with a key the upstream refuses (400).
    yaml = yaml.replace(
        "endpoints:\n",
        "  other:\n    secret: { file: wrong }\n    pools: { units: [ { limit: 1000, per: 1h } ] }\nendpoints:\n",
    );
    yaml.push_str(&videos_job("refused", "other", &["US"], 1, &up.base()));
    d.write(&yaml);

    let mut seen_codes = Vec::new();
    for args in [
        &["check"][..],
        &["-vv", "run", "good"],
        &["run", "refused"],
        &["run", "unreachable"],
    ] {
        let r = run(d.cmd(args).env("RUST_LOG", "trace"));
        assert_clean(&format!("quota {args:?}"), &r.all());
        seen_codes.push(r.code);
        if args.contains(&"refused") {
            assert!(r.stderr.contains("API key not valid"), "{r:?}");
        }
        if args.contains(&"unreachable") {
            assert!(r.stderr.contains("could not connect"), "{r:?}");
            assert!(
                r.stderr.contains("key=***"),
                "the URL is shown with the key masked: {r:?}"
            );
        }
        if args.contains(&"good") {
            // Trace logging was on, and did reach the HTTP layer's neighbours.
            assert!(
                r.stderr.contains("TRACE") || r.stderr.contains("DEBUG"),
                "{r:?}"
            );
        }
    }
    assert_eq!(seen_codes, [0, 0, 1, 1]);
    assert!(
        up.seen().len() >= 6,
        "the good job really ran: {:?}",
        up.seen()
    );

    for f in d.outputs("good") {
        assert_clean(
            &f,
            &std::fs::read_to_string(d.path().join("out/good").join(&f)).unwrap(),
        );
    }

    // The store: every key and value, straight from an uncompressed dump.
    assert_eq!(redis.cli(&["SAVE"]), "OK");
    let dump = std::fs::read(redis.dir.path().join("dump.rdb")).expect("dump.rdb");
    assert!(
        dump.windows(9).any(|w| w == b"quota:job"),
        "the dump holds the store's keys"
    );
    assert_clean("the Redis store", &String::from_utf8_lossy(&dump));
}

/// A store password given through `$QUOTA_STORE` never shows in help, the
/// man page or an error.
#[test]
fn a_store_password_in_the_environment_never_shows() {
    let home = tempfile::tempdir().unwrap();
    let url = format!("redis://:{KEY}@127.0.0.1:1/0");
    for args in [&["--help"][..], &["run", "--help"], &["man"], &["status"]] {
        let mut cmd = quota(home.path());
        cmd.args(args).env("QUOTA_STORE", &url);
        if args == ["status"] {
            std::fs::write(home.path().join("quota.yaml"), "credentials: {}\n").unwrap();
            cmd.current_dir(home.path());
        }
        let r = run(&mut cmd);
        assert_clean(&format!("quota {args:?}"), &r.all());
        if args == ["status"] {
            assert_eq!(r.code, 69, "{r:?}");
            assert!(r.stderr.contains("redis://:***@127.0.0.1:1/0"), "{r:?}");
        }
    }
}
