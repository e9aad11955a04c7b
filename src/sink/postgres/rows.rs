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
use super::shape::pg_type;
use crate::config::Column;
use crate::sink::PageRows;
use crate::sink::columns::Typed;
use crate::sink::sqlite::PreparedRows;

/// Upsert the rows of `pages` (and, `runs`, each input's run) of job
/// `job` in one transaction, committed when this returns (pages that came
/// while the one before was being committed share a commit, as SQLite's
/// do); the first error fails them all, nothing of any written. What each
/// page gave, its new rows counted.
pub(super) fn write_group(
    client: &mut Client,
    names: &Names,
    (job, columns): (&str, &[Column]),
    pages: &[&PreparedRows],
    runs: bool,
) -> Result<Vec<PageRows>, PgError> {
    let mut found: Vec<PageRows> = pages.iter().map(|p| p.found()).collect();
    // (a page that is not JSON has no rows, and marks no input done)
    if pages.iter().all(|p| p.found.not_json) {
        return Ok(found);
    }
    let on = |e: postgres::Error| at_statement(&e);
    let mut tx = client.transaction().map_err(on)?;
    let upsert = tx.prepare(&upsert_sql(names, columns));
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
        let kept = last_of_each_key(page);
        let keys: Vec<&str> = kept.iter().map(|&i| page.rows[i].0.as_str()).collect();
        let items: Vec<&str> = kept.iter().map(|&i| page.rows[i].1.as_str()).collect();
        // (each typed column an array of its text, cast in the statement)
        let cells: Vec<Vec<Option<String>>> = (0..columns.len())
            .map(|c| {
                (kept.iter())
                    .map(|&i| page.cells(i, columns.len())[c].as_ref().map(cell_text))
                    .collect()
            })
            .collect();
        let mut params: Vec<&(dyn postgres::types::ToSql + Sync)> =
            vec![&keys, &job, &page.input, &page.fetched_at, &items];
        params.extend(
            cells
                .iter()
                .map(|c| c as &(dyn postgres::types::ToSql + Sync)),
        );
        let inserted = tx.query(&upsert, &params).map_err(on)?;
        found.new = inserted.iter().filter(|r| r.get::<_, bool>(0)).count() as u64;
        if runs {
            tx.execute(&input_run, &[&job, &page.input, &(page.run as i64)])
                .map_err(on)?;
        }
    }
    tx.commit().map_err(on)?;
    Ok(found)
}

/// The statement that upserts a page's rows: its keys and items (`$1`,
/// `$5`) and each typed column's values (`$6` on, as text, cast to the
/// column's type) unnested side by side, a replaced row's columns
/// replaced with it.
fn upsert_sql(names: &Names, columns: &[Column]) -> String {
    let mut insert = String::from("\"key\", \"job\", \"input\", \"fetched_at\", \"item\"");
    let mut select = String::from("u.k, $2::text, $3::text, $4::text::timestamptz, u.i::jsonb");
    let mut arrays = String::from("$1::text[], $5::text[]");
    let mut alias = String::from("k, i");
    let mut update = String::from(
        "\"job\" = excluded.\"job\", \"input\" = excluded.\"input\", \
         \"fetched_at\" = excluded.\"fetched_at\", \"item\" = excluded.\"item\"",
    );
    for (n, c) in columns.iter().enumerate() {
        let name = Names::column(&c.name);
        insert.push_str(&format!(", {name}"));
        select.push_str(&format!(", u.c{n}::{}", pg_type(c.kind)));
        arrays.push_str(&format!(", ${}::text[]", n + 6));
        alias.push_str(&format!(", c{n}"));
        update.push_str(&format!(", {name} = excluded.{name}"));
    }
    format!(
        "INSERT INTO {} ({insert}) SELECT {select} FROM unnest({arrays}) AS u({alias}) \
         ON CONFLICT (\"key\") DO UPDATE SET {update} RETURNING (xmax = 0)",
        names.table
    )
}

/// A typed value as the text PostgreSQL casts to the column's type.
fn cell_text(v: &Typed) -> String {
    match v {
        Typed::Text(t) => t.clone(),
        Typed::Integer(n) => n.to_string(),
        // (Rust writes a double's shortest text that reads back the same)
        Typed::Real(x) => x.to_string(),
        Typed::Boolean(b) => b.to_string(),
        Typed::Timestamp(t) => Typed::timestamp_text(t),
    }
}

/// The rows of a page to write, by index: a key the page holds twice
/// once, its last row kept (one statement cannot touch a row twice; one
/// upsert after another would leave the last).
fn last_of_each_key(page: &PreparedRows) -> Vec<usize> {
    let mut last: HashMap<&str, usize> = HashMap::new();
    for (i, (key, _)) in page.rows.iter().enumerate() {
        last.insert(key, i);
    }
    (page.rows.iter().enumerate())
        .filter(|(i, (key, _))| last.get(key.as_str()) == Some(i))
        .map(|(i, _)| i)
        .collect()
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
