//! The package's example and the man page (issue 36, item 20): the
//! packaged `/etc/portion/portion.yaml` names the unit's store, so a script
//! charging it spends the unit's ledger; `check` outside the unit (no
//! `$CREDENTIALS_DIRECTORY`) names the secret it could not see and checks
//! the rest; the man page's configuration part knows every field the
//! README's configuration table lists.

use crate::common::deployment::{Deployment, portion, run};

/// `packaging/portion.yaml`, its pages written into the deployment (`check`
/// makes sure a job's output folder takes a file).
fn packaged(d: &Deployment) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/packaging/portion.yaml")).unwrap();
    let out = d.path().join("trending");
    text.replace("/var/lib/portion/trending", &out.display().to_string())
}

#[test]
fn the_packaged_example_names_the_units_store_and_checks_outside_the_unit() {
    let d = Deployment::new("");
    d.write(&packaged(&d));
    let check = |creds: Option<&std::path::Path>| {
        let mut cmd = d.cmd(&["check"]);
        match creds {
            Some(dir) => cmd.env("CREDENTIALS_DIRECTORY", dir),
            None => cmd.env_remove("CREDENTIALS_DIRECTORY"),
        };
        run(&mut cmd)
    };
    // Outside the unit: the key is named as not seen, the rest is checked.
    let r = check(None);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("store: embedded, /var/lib/portion/ledger.sqlite3\n"),
        "the unit's store: {}",
        r.stdout
    );
    assert!(
        r.stderr.contains("systemd credential yt")
            && r.stderr.contains("$CREDENTIALS_DIRECTORY is not set"),
        "{r:?}"
    );
    assert!(r.stdout.contains("NOT SEEN"), "{}", r.stdout);
    assert!(r.stdout.contains("1 secret(s) not seen"), "{}", r.stdout);
    // The rest is still checked: a bad window is refused.
    d.write(&packaged(&d).replace("limit: 800, per: 2h", "limit: 800, per: soon"));
    let r = check(None);
    assert_eq!(r.code, 78, "{r:?}");
    d.write(&packaged(&d));

    // Inside the unit, the key is read as `run` reads it: a missing one is
    // a configuration error, a present one is not shown.
    let creds = tempfile::tempdir().unwrap();
    let r = check(Some(creds.path()));
    assert_eq!(r.code, 78, "{r:?}");
    assert!(
        r.stderr.contains("credentials.youtube-main.secret"),
        "{r:?}"
    );
    std::fs::write(creds.path().join("yt"), "a-key-of-some-length\n").unwrap();
    let r = check(Some(creds.path()));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("(present, not shown)"), "{}", r.stdout);
    assert!(!r.stderr.contains("not checked"), "{r:?}");

    // `run` never goes without its key: outside the unit it is refused.
    let r = run(d.cmd(&["run"]).env_remove("CREDENTIALS_DIRECTORY"));
    assert_eq!(r.code, 78, "{r:?}");

    // A script's charge against the example spends the unit's ledger: the
    // one named in the file, not one under $HOME.
    let home = tempfile::tempdir().unwrap();
    let r = run(portion(home.path()).args(["-c", &d.config().display().to_string(), "status"]));
    assert!(
        r.all().contains("/var/lib/portion/ledger.sqlite3"),
        "status reads the unit's ledger: {r:?}"
    );
}
