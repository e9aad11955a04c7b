//! A page's rows into PostgreSQL: upserted in one transaction with those
//! of the pages that came meanwhile (one statement a page over arrays of
//! keys and items, so a page is one round trip),
//! with the run that wrote its input's rows (a once-job's), committed when
//! this returns; and the reads the run makes of the rows (which inputs
//! have rows, whether a row is there, the highest run).

use std::collections::{HashMap, HashSet};

use postgres::Client;

use super::PgError;
use super::connect::at_statement;
use super::names::Names;
use crate::sink::PageRows;
use crate::sink::sqlite::PreparedRows;

/// Upsert the rows of `pages` (and, `runs`, each input's run) of job
/// `job` in one transaction, committed when this returns (pages that came
/// while the one before was being committed share a commit, as SQLite's
/// do); the first error fails them all, nothing of any written. What each
/// page gave, its new rows counted.
pub(super) fn write_group(
    client: &mut Client,
    names: &Names,
    job: &str,
    pages: &[&PreparedRows],
    runs: bool,
) -> Result<Vec<PageRows>, PgError> {
    let mut found: Vec<PageRows> = pages.iter().map(|p| p.found).collect();
    // (a page that is not JSON has no rows, and marks no input done)
    if pages.iter().all(|p| p.found.not_json) {
        return Ok(found);
    }
    let on = |e: postgres::Error| at_statement(&e);
    let mut tx = client.transaction().map_err(on)?;
    let upsert = tx.prepare(&format!(
        "INSERT INTO {} (\"key\", \"job\", \"input\", \"fetched_at\", \"item\") \
         SELECT u.k, $2::text, $3::text, $4::text::timestamptz, u.i::jsonb \
         FROM unnest($1::text[], $5::text[]) AS u(k, i) \
         ON CONFLICT (\"key\") DO UPDATE SET \"job\" = excluded.\"job\", \"input\" = excluded.\"input\", \
         \"fetched_at\" = excluded.\"fetched_at\", \"item\" = excluded.\"item\" \
         RETURNING (xmax = 0)",
        names.table
    ));
    let upsert = upsert.map_err(on)?;
    let input_run = format!(
        "INSERT INTO {} (\"job\", \"input\", \"run\") VALUES ($1, $2, $3) \
         ON CONFLICT (\"job\", \"input\") DO UPDATE SET \"run\" = excluded.\"run\"",
        names.runs
    );
    for (page, found) in pages.iter().zip(&mut found) {
        if page.found.not_json {
            continue;
        }
        let (keys, items) = last_of_each_key(page);
        let inserted = tx
            .query(
                &upsert,
                &[&keys, &job, &page.input, &page.fetched_at, &items],
            )
            .map_err(on)?;
        found.new = inserted.iter().filter(|r| r.get::<_, bool>(0)).count() as u64;
        if runs {
            tx.execute(&input_run, &[&job, &page.input, &(page.run as i64)])
                .map_err(on)?;
        }
    }
    tx.commit().map_err(on)?;
    Ok(found)
}

/// A page's keys and items, a key the page holds twice once, its last
/// row kept (one statement cannot touch a row twice; one upsert after
/// another would leave the last).
fn last_of_each_key(page: &PreparedRows) -> (Vec<&str>, Vec<&str>) {
    let mut last: HashMap<&str, usize> = HashMap::new();
    for (i, (key, _)) in page.rows.iter().enumerate() {
        last.insert(key, i);
    }
    (page.rows.iter().enumerate())
        .filter(|(i, (key, _))| last.get(key.as_str()) == Some(i))
        .map(|(_, (k, item))| (k.as_str(), item.as_str()))
        .unzip()
}

/// Whether the table holds the row of `key`.
pub(super) fn has_row(client: &mut Client, names: &Names, key: &str) -> Result<bool, PgError> {
    let sql = format!(
        "SELECT EXISTS (SELECT 1 FROM {} WHERE \"key\" = $1)",
        names.table
    );
    let row = client
        .query_one(&sql, &[&key])
        .map_err(|e| at_statement(&e))?;
    Ok(row.get(0))
}

/// The inputs with rows of `job`.
pub(super) fn inputs_with_rows(
    client: &mut Client,
    names: &Names,
    job: &str,
) -> Result<HashSet<String>, PgError> {
    let sql = format!(
        "SELECT DISTINCT \"input\" FROM {} WHERE \"job\" = $1",
        names.table
    );
    let rows = client.query(&sql, &[&job]).map_err(|e| at_statement(&e))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The run that last wrote `input`'s rows of `job` (none: no run did).
pub(super) fn run_of(
    client: &mut Client,
    names: &Names,
    job: &str,
    input: &str,
) -> Result<Option<i64>, PgError> {
    let sql = format!(
        "SELECT \"run\" FROM {} WHERE \"job\" = $1 AND \"input\" = $2",
        names.runs
    );
    let row = (client.query_opt(&sql, &[&job, &input])).map_err(|e| at_statement(&e))?;
    Ok(row.map(|r| r.get(0)))
}

/// The highest run that wrote rows of `job` (0: none).
pub(super) fn highest_run(client: &mut Client, names: &Names, job: &str) -> Result<u64, PgError> {
    let sql = format!(
        "SELECT coalesce(max(\"run\"), 0) FROM {} WHERE \"job\" = $1",
        names.runs
    );
    let row = client
        .query_one(&sql, &[&job])
        .map_err(|e| at_statement(&e))?;
    Ok(row.get::<_, i64>(0).max(0) as u64)
}

/// The output's id, kept in its one-row table (made, and the id with it,
/// if it has none), and whether the table holds a row of `job`.
pub(super) fn id(client: &mut Client, names: &Names, job: &str) -> Result<(String, bool), PgError> {
    let on = |e: postgres::Error| at_statement(&e);
    let mut tx = client.transaction().map_err(on)?;
    tx.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {} (id text NOT NULL); LOCK TABLE {} IN EXCLUSIVE MODE;",
        names.id, names.id
    ))
    .map_err(on)?;
    let had: Option<String> = tx
        .query_opt(
            &format!("SELECT id FROM {} WHERE id <> '' LIMIT 1", names.id),
            &[],
        )
        .map_err(on)?
        .map(|r| r.get(0));
    let id = match had {
        Some(id) => id,
        None => {
            let id = crate::sink::output_id::new_id();
            tx.execute(&format!("DELETE FROM {}", names.id), &[])
                .map_err(on)?;
            tx.execute(
                &format!("INSERT INTO {} (id) VALUES ($1)", names.id),
                &[&id],
            )
            .map_err(on)?;
            id
        }
    };
    let holds = tx
        .query_opt(
            &format!("SELECT 1 FROM {} WHERE \"job\" = $1 LIMIT 1", names.table),
            &[&job],
        )
        .map_err(on)?
        .is_some();
    tx.commit().map_err(on)?;
    Ok((id, holds))
}
