//! Rows in PostgreSQL (`output.postgres`) against a real server
//! (tests/common/postgres.rs): the fixture itself, then the sink.

use crate::common::postgres::{PgServer, shared};

/// The shared server gives each test a database of its own, and a
/// server of a test's own stops and comes back on its port.
#[test]
fn the_fixture_makes_a_database_per_test_and_restarts_a_server() {
    let pg = shared();
    let (a, b) = (pg.database(), pg.database());
    assert_ne!(a, b);
    let mut c = postgres::Client::connect(&pg.url(&a), postgres::NoTls).unwrap();
    let one: i32 = c.query_one("SELECT 1", &[]).unwrap().get(0);
    assert_eq!(one, 1);
    let mut own = PgServer::start();
    let db = own.database();
    own.connect(&db).unwrap();
    own.stop();
    assert!(
        own.connect(&db).is_err(),
        "a stopped server answers nothing"
    );
    own.restart();
    own.connect(&db).unwrap();
}
