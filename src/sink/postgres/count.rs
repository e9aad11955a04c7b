//! `status`: a job's rows in its PostgreSQL table, one `count(*)` on a
//! connection of its own, bounded (the connection and the statement each
//! wait at most [`COUNT_TIMEOUT`]), so a large table or a server that
//! does not answer makes the count "unknown", never a slow `status`.

use std::time::Duration;

use super::names::Names;
use super::{PgError, url_of};
use crate::config::PostgresOutput;

/// How long the count waits, to connect and for its statement.
pub const COUNT_TIMEOUT: Duration = Duration::from_secs(2);

/// The rows of `job` in `spec`'s table, or why they are unknown (the
/// words masked). The URL is read from its source here when the command
/// did not read it.
pub fn rows_of_job(spec: &PostgresOutput, job: &str) -> Result<u64, String> {
    let mut spec = spec.clone();
    if spec.url.expose().is_empty()
        && let Some(source) = &spec.url_source
    {
        spec.url = source.read(&spec.dir)?;
    }
    // (named as the connection's errors name it)
    let (url, masker) = url_of(&spec).map_err(|e| e.to_string())?;
    let names = Names::of(&spec);
    let job = job.to_string();
    let counted = std::thread::spawn(move || -> Result<u64, PgError> {
        let mut client = super::connect::connect_with(&url, COUNT_TIMEOUT)?;
        let on = |e: postgres::Error| match e.code() {
            Some(c) if *c == postgres::error::SqlState::QUERY_CANCELED => PgError::Rows(format!(
                "the count ran out of its {}s",
                COUNT_TIMEOUT.as_secs()
            )),
            _ => super::connect::at_statement(&e),
        };
        let mut tx = client.transaction().map_err(on)?;
        tx.batch_execute(&format!(
            "SET LOCAL statement_timeout = {}",
            COUNT_TIMEOUT.as_millis()
        ))
        .map_err(on)?;
        let sql = format!("SELECT count(*) FROM {} WHERE \"job\" = $1", names.table);
        let n: i64 = tx.query_one(&sql, &[&job]).map_err(on)?.get(0);
        Ok(n.max(0) as u64)
    })
    .join()
    .unwrap_or_else(|_| Err(PgError::Rows("the count failed".into())));
    counted.map_err(|e| e.masked(&masker).to_string())
}
