//! A secret as it is read: too short to mask safely is a 78 naming its
//! source and the rule (never the value), and a file's leading byte order
//! mark is not part of the key.

use crate::common::deployment::{Deployment, deployment_yaml, embedded_store, run, videos_job};
use crate::common::standin::Standin;

fn deployment(up: &Standin, secret: &str) -> Deployment {
    let d = Deployment::new("");
    let yaml = deployment_yaml(
        &embedded_store(&d),
        &["{ limit: 100, per: 1h }"],
        "fail_closed",
        &[videos_job("trending", "main", &["US"], 1, &up.base())],
    );
    d.write(&yaml.replace("{ file: key }", secret));
    d
}

/// Pages are masked wherever the secret occurs: a one-character key `7`
/// turned `{"id": 7}` into `{"id": ***}`. Under 8 bytes is refused.
#[test]
fn a_secret_shorter_than_8_bytes_is_78_naming_its_source_not_its_value() {
    const SHORT: &str = "Qz7k!x9";
    let up = Standin::start(&["--key", SHORT]);
    let d = deployment(&up, "{ file: key }");
    std::fs::write(d.path().join("key"), format!("{SHORT}\n")).unwrap();
    let env = deployment(&up, "{ env: SHORT_KEY }");
    for (d, source) in [(&d, "file key"), (&env, "env SHORT_KEY")] {
        for cmd in ["check", "run"] {
            let r = run(d.cmd(&[cmd]).env("SHORT_KEY", SHORT));
            assert_eq!(r.code, 78, "{source} ({cmd}): {r:?}");
            for want in [
                d.config().display().to_string().as_str(),
                "credentials.main.secret",
                source,
                "shorter than 8 bytes",
            ] {
                assert!(
                    r.stderr.contains(want),
                    "{source} ({cmd}) says {want:?}: {r:?}"
                );
            }
            assert!(!r.all().contains(SHORT), "{r:?}");
        }
    }
    assert!(up.seen().is_empty(), "nothing was sent: {:?}", up.seen());
    // 8 bytes is enough.
    std::fs::write(d.path().join("key"), "Qz7k!x9w\n").unwrap();
    assert_eq!(d.portion(&["check"]).code, 0);
}

/// Some editors begin a file with U+FEFF: it was sent as part of the key.
#[test]
fn a_byte_order_mark_before_a_secret_file_is_dropped() {
    let up = Standin::start(&[]);
    let d = deployment(&up, "{ file: key }");
    std::fs::write(d.path().join("key"), "\u{feff}demo-key\n").unwrap();
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    let seen = up.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        seen[0].status, 200,
        "the key went without the mark: {seen:?}"
    );
}
