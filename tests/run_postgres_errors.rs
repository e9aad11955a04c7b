//! `output.postgres` refusing what it cannot do, against a real server
//! (tests/common/postgres.rs): a server that cannot be reached (69,
//! nothing charged), a login, database or table it refuses (78), a URL
//! with its password in the file (78), a server stopped mid-run (69, no
//! row lost), `sslmode`, and an item without a usable key. Never the
//! password in what is said.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::deployment::{Deployment, embedded_store, finish, spawn};
use crate::common::postgres::{PASSWORD, PgServer, TLS_ONLY, shared};
use crate::common::standin::Standin;
use crate::common::wait_until;
use crate::run_postgres::{count, keys_where, pg_rows, url_file};
use crate::run_sqlite::{summary, trending, trending_at};

/// The units the credential's first window has used.
fn used(d: &Deployment) -> serde_json::Value {
    d.status_json()["credentials"][0]["pools"][0]["windows"][0]["used"].clone()
}

#[test]
fn a_server_that_cannot_be_reached_is_69_naming_it_and_nothing_is_charged() {
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    let port = crate::common::free_port();
    url_file(
        &d,
        &format!("postgres://portion:{PASSWORD}@127.0.0.1:{port}/nowhere"),
    );
    d.write(&trending(&store, &up.base(), &["US"], &pg_rows("videos")));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 69, "{r:?}");
    assert!(r.stderr.contains(&format!("127.0.0.1:{port}")), "{r:?}");
    assert!(!r.all().contains(PASSWORD), "{r:?}");
    assert!(up.seen().is_empty(), "no request sent");
    assert_eq!(used(&d), 0, "nothing charged");
    let r = d.portion(&["check"]);
    assert_eq!(r.code, 69, "{r:?}");
    assert!(!r.all().contains(PASSWORD), "{r:?}");
}

#[test]
fn a_wrong_password_a_missing_database_or_a_table_of_another_shape_is_78_at_check_and_run() {
    let pg = shared();
    let db = pg.database();
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    d.write(&trending(&store, &up.base(), &["US"], &pg_rows("videos")));
    let wrong = pg.url(&db).replace(PASSWORD, "not-the-password");
    let missing = pg.url("no_such_database");
    for (url, field, words) in [
        (wrong.as_str(), "url", "password authentication failed"),
        (missing.as_str(), "url", "no_such_database"),
    ] {
        url_file(&d, url);
        for cmd in ["check", "run"] {
            let r = d.portion(&[cmd]);
            assert_eq!(r.code, 78, "{cmd} {r:?}");
            assert!(
                r.stderr
                    .contains(&format!("jobs.trending.output.postgres.{field}")),
                "{r:?}"
            );
            assert!(r.stderr.contains(words), "{r:?}");
            assert!(
                !r.all().contains("not-the-password") && !r.all().contains(PASSWORD),
                "{r:?}"
            );
        }
    }
    // A table of that name with other columns: named, 78, left as it was.
    let mut c = pg.connect(&db).unwrap();
    c.batch_execute("CREATE TABLE videos (id int PRIMARY KEY, title text)")
        .unwrap();
    url_file(&d, &pg.url(&db));
    for cmd in ["check", "run"] {
        let r = d.portion(&[cmd]);
        assert_eq!(r.code, 78, "{cmd} {r:?}");
        assert!(
            r.stderr.contains("jobs.trending.output.postgres.table"),
            "{r:?}"
        );
        assert!(
            r.stderr
                .contains("table videos exists with columns (id integer, title text)"),
            "{r:?}"
        );
    }
    assert!(up.seen().is_empty(), "no request sent");
    assert_eq!(used(&d), 0, "nothing charged");
    // Another table: check passes and names it and the server, as
    // --dry-run does, without the password.
    d.write(&trending(
        &store,
        &up.base(),
        &["US"],
        &pg_rows("res.videos"),
    ));
    for args in [&["check"][..], &["run", "--dry-run"]] {
        let r = d.portion(args);
        assert_eq!(r.code, 0, "{args:?} {r:?}");
        let server = format!(
            "PostgreSQL at 127.0.0.1:{} database {db}, table res.videos",
            pg.port
        );
        assert!(r.stdout.contains(&server), "{args:?} {r:?}");
        assert!(!r.all().contains(PASSWORD), "{r:?}");
    }
}

#[test]
fn a_url_written_in_the_file_with_a_password_is_78() {
    let pg = shared();
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    let inline =
        pg_rows("videos").replace("{ file: results.url }", &format!("\"{}\"", pg.url("x")));
    d.write(&trending(&store, &up.base(), &["US"], &inline));
    for cmd in ["check", "run"] {
        let r = d.portion(&[cmd]);
        assert_eq!(r.code, 78, "{r:?}");
        assert!(
            r.stderr.contains("jobs.trending.output.postgres.url"),
            "{r:?}"
        );
        assert!(r.stderr.contains("holds a password"), "{r:?}");
        assert!(!r.all().contains(PASSWORD), "{r:?}");
    }
}

/// Every key of `regions` × 3 pages × 5 items, as the stand-in names them.
fn all_keys(regions: &[&str]) -> BTreeSet<String> {
    (regions.iter())
        .flat_map(|r| (0..3).flat_map(move |p| (0..5).map(move |i| format!("{r}{p:02}{i:03}"))))
        .collect()
}

#[test]
fn a_server_stopped_mid_run_is_69_the_pages_committed_stay_and_the_next_run_completes() {
    let mut pg = PgServer::start();
    let db = pg.database();
    // Second pages answer in 3 s: the server stops while they are in
    // flight, the three regions' first pages committed.
    let slow = Standin::start(&["--slow", "pageToken=CAUQ1=3s"]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    url_file(&d, &pg.url(&db));
    let regions = ["US", "GB", "DE"];
    d.write(&trending_at(
        &store,
        &slow.base(),
        &regions,
        &pg_rows("videos"),
        3,
    ));
    let run = spawn(&mut d.cmd(&["run"]));
    wait_until(Duration::from_secs(30), "page 2 never asked for", || {
        let seen = slow.seen();
        (regions.iter()).all(|r| seen.iter().any(|s| s.page == 1 && s.region == *r))
    });
    pg.stop();
    let r = finish(run);
    assert_eq!(r.code, 69, "{r:?}");
    assert!(
        r.stderr.contains(&format!("127.0.0.1:{}", pg.port)),
        "{r:?}"
    );
    assert!(!r.all().contains(PASSWORD), "{r:?}");
    pg.restart();
    let mut c = pg.connect(&db).unwrap();
    assert_eq!(count(&mut c, "videos"), 15, "the first pages stay");
    let up = Standin::start(&[]);
    d.write(&trending_at(
        &store,
        &up.base(),
        &regions,
        &pg_rows("videos"),
        3,
    ));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(keys_where(&mut c, "videos", "true"), all_keys(&regions));
}

/// `sslmode` as libpq reads it, TLS through rustls: `require` encrypts
/// (a role the server refuses without TLS gets in), `disable` does not
/// (refused: 78), `verify-full` checks the certificate against the
/// system's roots (the test's own CA is not one of them: 78) or
/// `sslrootcert`'s (then it gets in).
#[test]
fn sslmode_require_verify_full_and_sslrootcert_are_honoured() {
    let ca = crate::common::tls::TestCa::new();
    let pg = PgServer::start_tls(&ca);
    let db = pg.database();
    let mut c = pg.connect(&db).unwrap();
    c.batch_execute(&format!(
        "CREATE ROLE {TLS_ONLY} LOGIN PASSWORD '{PASSWORD}'; ALTER DATABASE {db} OWNER TO {TLS_ONLY}"
    ))
    .unwrap();
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    d.write(&trending(&store, &up.base(), &["US"], &pg_rows("videos")));
    let url = |host: &str, query: &str| {
        format!(
            "postgres://{TLS_ONLY}:{PASSWORD}@{host}:{}/{db}?{query}",
            pg.port
        )
    };
    let ca_file = ca.file("ca.pem");
    for (query, code, words) in [
        ("sslmode=disable", 78, "rejects connection"),
        ("sslmode=verify-full", 78, "certificate"),
        ("sslmode=require", 0, ""),
        (&format!("sslmode=verify-full&sslrootcert={ca_file}"), 0, ""),
        ("sslmode=prefer", 0, ""),
    ] {
        url_file(&d, &url("localhost", query));
        let r = d.portion(&["run"]);
        assert_eq!(r.code, code, "{query}: {r:?}");
        assert!(r.stderr.contains(words), "{query}: {r:?}");
        assert!(!r.all().contains(PASSWORD), "{r:?}");
        assert!(!r.stderr.contains("NOTICE"), "{query}: {r:?}");
    }
    assert_eq!(count(&mut c, "videos"), 15);
}

/// A row key that is neither text nor a number (an object here) is
/// skipped and counted, never a failed page.
#[test]
fn an_item_whose_key_is_not_text_or_a_number_is_skipped_and_counted() {
    let pg = shared();
    let db = pg.database();
    let up = Standin::start(&[]);
    let d = Deployment::new("");
    let store = embedded_store(&d);
    url_file(&d, &pg.url(&db));
    let output = pg_rows("videos").replace("key: /id", "key: /snippet");
    d.write(&trending(&store, &up.base(), &["US"], &output));
    let r = d.portion(&["run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        summary(&r, "trending")
            .contains("0 rows upserted (0 new, 0 replaced; 15 items without a key skipped)"),
        "{r:?}"
    );
    let mut c = pg.connect(&db).unwrap();
    assert_eq!(count(&mut c, "videos"), 0);
}
