//! The connection: the URL's settings with a bounded wait for the server
//! (a server that does not answer costs a run at most that, before its
//! first charge), TLS as `sslmode` says, and what a failure is: a server
//! that cannot be reached (69, the next tick may find it), a login or
//! database it refuses (78: the configuration's to fix), a connection lost
//! later (69), or a statement refused (the rows' error). Every message
//! names the server and never the password.

use std::time::Duration;

use postgres::Client;
use postgres::error::SqlState;

use super::PgError;
use crate::config::postgres_url::PgUrl;

/// How long a connection waits for the server to answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to the URL's server, or why not.
pub(super) fn connect(url: &PgUrl) -> Result<Client, PgError> {
    connect_with(url, CONNECT_TIMEOUT)
}

/// [`connect`], waiting at most `timeout` for the server.
pub(super) fn connect_with(url: &PgUrl, timeout: Duration) -> Result<Client, PgError> {
    let mut config = url.config.clone();
    config
        .connect_timeout(timeout)
        .application_name("portion")
        // (a server gone without a word is found within a minute or two,
        // not when the kernel gives up on the socket)
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(30));
    let tls = super::tls::connector(url.tls, url.root_cert.as_deref()).map_err(PgError::Refused)?;
    config.connect(tls).map_err(|e| at_connect(&e))
}

/// A failure to connect: refused by the server for the login or the
/// database (78), else the server unreachable (69).
pub(super) fn at_connect(e: &postgres::Error) -> PgError {
    match e.code() {
        Some(code) if refused(code) => PgError::Refused(text(e)),
        // (its own kind of TLS failure: the server's certificate, or no
        // TLS where `sslmode` requires it, is the configuration's)
        _ if e.as_db_error().is_none() && is_tls(e) => PgError::Refused(text(e)),
        _ => PgError::Unreachable(text(e)),
    }
}

/// A failure of a statement: the connection lost (69), a login's or a
/// database's refusal, else the statement's own error.
pub(super) fn at_statement(e: &postgres::Error) -> PgError {
    match e.code() {
        Some(code) if refused(code) => PgError::Refused(text(e)),
        Some(code) if lost(code) => PgError::Lost(text(e)),
        Some(_) => PgError::Rows(text(e)),
        None if e.as_db_error().is_some() => PgError::Rows(text(e)),
        None => PgError::Lost(text(e)),
    }
}

/// The SQL states of a login or a database refused.
fn refused(code: &SqlState) -> bool {
    code.code().starts_with("28") || *code == SqlState::INVALID_CATALOG_NAME
}

/// The SQL states of a server going away (shut down, restarting, or
/// crashed and taking its connections with it).
fn lost(code: &SqlState) -> bool {
    code.code().starts_with("57P") || code.code().starts_with("08")
}

fn is_tls(e: &postgres::Error) -> bool {
    let t = e.to_string().to_ascii_lowercase();
    t.contains("tls") || t.contains("ssl") || t.contains("certificate")
}

/// An error's words: the server's message (and its detail), or the
/// client's with its causes.
pub(super) fn text(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut t = format!("{}: {}", db.severity(), db.message());
        if let Some(d) = db.detail() {
            t.push_str(&format!(" ({d})"));
        }
        return t;
    }
    let mut t = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let more = s.to_string();
        if !t.contains(&more) {
            t.push_str(&format!(": {more}"));
        }
        source = s.source();
    }
    t
}
