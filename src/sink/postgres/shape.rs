//! The tables a job's rows take, as the configuration wants them: the
//! rows' table (`key` text primary key, `job`, `input`, `fetched_at`
//! timestamptz, `item` jsonb), its `search` column (a generated
//! `tsvector` with a GIN index) and `TABLE_runs`, each made if missing
//! (a run's open) and refused if of another shape (a run's open and
//! `check` alike, so `check` refuses what a run would). One transaction
//! under an advisory lock of the table's name, so two hosts' first runs
//! do not make it at once.

use postgres::Transaction;

use super::PgError;
use super::connect::at_statement;
use super::names::{Names, literal};
use crate::config::{Column, ColumnKind, PostgresOutput, pointer_parts};

/// The rows' columns and their types, as PostgreSQL names them.
const COLUMNS: [(&str, &str); 5] = [
    ("key", "text"),
    ("job", "text"),
    ("input", "text"),
    ("fetched_at", "timestamp with time zone"),
    ("item", "jsonb"),
];

/// A typed column's type as PostgreSQL declares it (and names it back).
pub(super) fn pg_type(kind: ColumnKind) -> &'static str {
    match kind {
        ColumnKind::Text => "text",
        ColumnKind::Integer => "bigint",
        ColumnKind::Real => "double precision",
        ColumnKind::Boolean => "boolean",
        ColumnKind::Timestamp => "timestamp with time zone",
    }
}

/// Make (when `create`) or check the job's tables; `runs`: it keeps
/// `TABLE_runs` (a once-job of inputs).
pub(super) fn fit(
    client: &mut postgres::Client,
    spec: &PostgresOutput,
    names: &Names,
    runs: bool,
    create: bool,
) -> Result<(), PgError> {
    let mut tx = client.transaction().map_err(|e| at_statement(&e))?;
    let fitted = (|| {
        // (no "already exists, skipping" notices in the run's log)
        tx.batch_execute("SET LOCAL client_min_messages = warning")?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1))",
            &[&names.table],
        )?;
        if create && let Some(schema) = &names.schema {
            tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))?;
        }
        Ok::<_, postgres::Error>(())
    })();
    fitted.map_err(|e| on_open(&e))?;
    rows_shape(&mut tx, spec, names, create)?;
    search_shape(&mut tx, spec, names, create)?;
    if runs {
        runs_shape(&mut tx, spec, names, create)?;
    }
    let end = if create { tx.commit() } else { tx.rollback() };
    end.map_err(|e| on_open(&e))
}

/// A statement's failure while the tables are made or read: a refusal of
/// the server's (no right to make a table in the schema, a text search
/// configuration it does not have) is the configuration's to fix.
fn on_open(e: &postgres::Error) -> PgError {
    match at_statement(e) {
        PgError::Rows(m) => PgError::Refused(m),
        other => other,
    }
}

/// A table's columns: name, type, and whether generated (none: no table).
fn columns(tx: &mut Transaction, table: &str) -> Result<Vec<(String, String, bool)>, PgError> {
    let rows = tx
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attgenerated <> '' \
             FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 \
             AND NOT a.attisdropped ORDER BY a.attnum",
            &[&table],
        )
        .map_err(|e| on_open(&e))?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

/// The columns of a table's primary key.
fn primary_key(tx: &mut Transaction, table: &str) -> Result<Vec<String>, PgError> {
    let rows = tx
        .query(
            "SELECT a.attname::text FROM pg_index i JOIN pg_attribute a \
             ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
             WHERE i.indrelid = to_regclass($1) AND i.indisprimary ORDER BY a.attnum",
            &[&table],
        )
        .map_err(|e| on_open(&e))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Columns as messages list them: `name type, …`.
fn listed(have: &[(String, String, bool)]) -> String {
    let each: Vec<String> = have.iter().map(|(n, t, _)| format!("{n} {t}")).collect();
    each.join(", ")
}

fn rows_shape(
    tx: &mut Transaction,
    spec: &PostgresOutput,
    names: &Names,
    create: bool,
) -> Result<(), PgError> {
    let t = &names.table;
    let have = columns(tx, t)?;
    if have.is_empty() {
        if create {
            tx.batch_execute(&format!(
                "CREATE TABLE {t} (\"key\" text PRIMARY KEY, \"job\" text NOT NULL, \"input\" text NOT NULL, \
                 \"fetched_at\" timestamptz NOT NULL, \"item\" jsonb NOT NULL); \
                 CREATE INDEX IF NOT EXISTS {} ON {t} (\"job\", \"input\");",
                names.job_input
            ))
            .map_err(|e| on_open(&e))?;
            return typed_columns(tx, spec, names, &[], create);
        }
        return Ok(());
    }
    let ours = have.len() >= COLUMNS.len()
        && (have.iter().zip(COLUMNS))
            .all(|((n, ty, generated), (want, want_ty))| n == want && ty == want_ty && !generated);
    // (past the row model's: the generated search column, and typed ones)
    let extra = |(n, ty, generated): &(String, String, bool)| {
        (n == "search" && ty == "tsvector" && *generated) || (!generated && n != "search")
    };
    let ours = ours && have[COLUMNS.len()..].iter().all(extra);
    if !ours || primary_key(tx, t)? != ["key"] {
        let want: Vec<String> = COLUMNS.iter().map(|(n, t)| format!("{n} {t}")).collect();
        return Err(PgError::Shape(format!(
            "table {} exists with columns ({}), not the rows' ({}, key the primary key; and a generated search tsvector where `search` names fields): name another table",
            spec.table_name(),
            listed(&have),
            want.join(", ")
        )));
    }
    typed_columns(tx, spec, names, &have[COLUMNS.len()..], create)
}

/// An existing table's typed columns (`extra`, past the row model's) as
/// `columns` wants them: one of another type, or one `columns` does not
/// name (its values would go stale as rows are replaced), is refused; one
/// `columns` names that the table lacks (a table of an older build, or
/// before the column was named) is added, its rows NULL there.
fn typed_columns(
    tx: &mut Transaction,
    spec: &PostgresOutput,
    names: &Names,
    extra: &[(String, String, bool)],
    create: bool,
) -> Result<(), PgError> {
    let table = spec.table_name();
    for (name, ty, _) in extra.iter().filter(|(n, _, _)| n != "search") {
        let Some(c) = spec
            .columns
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
        else {
            return Err(PgError::Shape(format!(
                "table {table} has a column {name} that `columns` does not name: its values would stay as they \
                 are when rows are replaced; name it in `columns` or drop it (ALTER TABLE {table} DROP COLUMN {name})"
            )));
        };
        if ty != pg_type(c.kind) {
            return Err(PgError::Shape(format!(
                "table {table} has column {name} of type {ty}, where `columns.{}` is {} ({}): give it that type in `columns`, or another name",
                c.name,
                c.kind.name(),
                pg_type(c.kind)
            )));
        }
    }
    let missing: Vec<&Column> = (spec.columns.iter())
        .filter(|c| !extra.iter().any(|(n, _, _)| c.name.eq_ignore_ascii_case(n)))
        .collect();
    if create {
        for c in missing {
            tx.batch_execute(&format!(
                "ALTER TABLE {} ADD COLUMN {} {}",
                names.table,
                Names::column(&c.name),
                pg_type(c.kind)
            ))
            .map_err(|e| on_open(&e))?;
        }
    }
    Ok(())
}

/// What the `search` column is made of, as its comment keeps it: a
/// column made of other fields is refused rather than silently kept.
fn search_comment(spec: &PostgresOutput) -> String {
    format!(
        "portion search: {} {}",
        spec.search_language,
        spec.search.join(" ")
    )
}

/// The `search` column's expression: each field's text (`""` where the
/// row has none), in the text search configuration named.
fn search_expression(spec: &PostgresOutput) -> String {
    let fields: Vec<String> = (spec.search.iter())
        .map(|p| {
            let parts: Vec<String> = (pointer_parts(p).unwrap_or_default().iter())
                .map(|s| literal(s))
                .collect();
            format!(
                "coalesce(\"item\" #>> ARRAY[{}]::text[], '')",
                parts.join(", ")
            )
        })
        .collect();
    format!(
        "to_tsvector({}::regconfig, {})",
        literal(&spec.search_language),
        fields.join(" || ' ' || ")
    )
}

fn search_shape(
    tx: &mut Transaction,
    spec: &PostgresOutput,
    names: &Names,
    create: bool,
) -> Result<(), PgError> {
    if spec.search.is_empty() {
        // (a search column there is kept current by the server itself)
        return Ok(());
    }
    let t = &names.table;
    let comment: Option<Option<String>> = tx
        .query_opt(
            "SELECT col_description(a.attrelid, a.attnum) FROM pg_attribute a \
             WHERE a.attrelid = to_regclass($1) AND a.attname = 'search' AND NOT a.attisdropped",
            &[t],
        )
        .map_err(|e| on_open(&e))?
        .map(|r| r.get(0));
    let want = search_comment(spec);
    match comment {
        Some(have) if have.as_deref() == Some(want.as_str()) => {}
        Some(have) => {
            return Err(PgError::Shape(format!(
                "the search column of table {} is made of {}, `search` names {}: drop it (ALTER TABLE {} DROP COLUMN search) and the next run makes it again from the rows",
                spec.table_name(),
                have.as_deref()
                    .and_then(|h| h.strip_prefix("portion search: "))
                    .unwrap_or("fields of another's choosing"),
                want.trim_start_matches("portion search: "),
                spec.table_name(),
            )));
        }
        None if create => {
            tx.batch_execute(&format!(
                "ALTER TABLE {t} ADD COLUMN \"search\" tsvector GENERATED ALWAYS AS ({}) STORED; \
                 COMMENT ON COLUMN {t}.\"search\" IS {};",
                search_expression(spec),
                literal(&want)
            ))
            .map_err(|e| on_open(&e))?;
        }
        None => return Ok(()),
    }
    if create {
        tx.batch_execute(&format!(
            "CREATE INDEX IF NOT EXISTS {} ON {t} USING gin (\"search\")",
            names.search_index
        ))
        .map_err(|e| on_open(&e))?;
    }
    Ok(())
}

fn runs_shape(
    tx: &mut Transaction,
    spec: &PostgresOutput,
    names: &Names,
    create: bool,
) -> Result<(), PgError> {
    let have = columns(tx, &names.runs)?;
    if have.is_empty() {
        if create {
            tx.batch_execute(&format!(
                "CREATE TABLE {} (\"job\" text NOT NULL, \"input\" text NOT NULL, \"run\" bigint NOT NULL, \
                 PRIMARY KEY (\"job\", \"input\"))",
                names.runs
            ))
            .map_err(|e| on_open(&e))?;
        }
        return Ok(());
    }
    let kinds: Vec<(&str, &str)> = (have.iter())
        .map(|(n, t, _)| (n.as_str(), t.as_str()))
        .collect();
    if kinds != [("job", "text"), ("input", "text"), ("run", "bigint")] {
        return Err(PgError::Shape(format!(
            "table {}_runs exists with columns ({}), not (job text, input text, run bigint), which keeps the run that wrote each input's rows: name another table",
            spec.table_name(),
            listed(&have)
        )));
    }
    Ok(())
}
