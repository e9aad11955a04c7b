//! `output.postgres`: the connection URL (a secret, as an API key is: a URL
//! written in the file must not hold a password), the table (optionally
//! `schema.table`), and the rows as `output.sqlite` takes them, with a
//! `search` column's fields and its text search configuration. The server
//! itself is `check`'s and the run's to reach: this checks what the file
//! says.

use super::output::{columns_named, sql_name};
use super::*;
use crate::config::PostgresOutput;
use crate::config::postgres_url::parse_url;

impl Validator<'_> {
    pub(super) fn postgres(&self, at: &str, raw: RawPostgres) -> Result<PostgresOutput> {
        let (url, url_source) = self.postgres_url(&format!("{at}.url"), &raw.url)?;
        let field = format!("{at}.table");
        let (schema, table) = match raw.table.split_once('.') {
            Some((s, t)) => (Some(s.to_string()), t.to_string()),
            None => (None, raw.table.clone()),
        };
        for name in schema.iter().chain([&table]) {
            if !sql_name(name) || name.len() > 50 {
                return Err(self.err(
                    &field,
                    format!(
                        "'{}': a table is NAME or SCHEMA.NAME, each letters, digits and _ (at most 50), not starting with a digit",
                        raw.table
                    ),
                ));
            }
        }
        let (items, key) = self.items_and_key(at, raw.items, raw.key)?;
        let mut search: Vec<String> = Vec::new();
        for (i, p) in raw.search.into_iter().enumerate() {
            let field = format!("{at}.search[{i}]");
            self.pointer(&field, &p)?;
            if p.split('/').any(|part| part == "*") || search.contains(&p) {
                return Err(self.err(
                    field,
                    format!("'{p}': a field of the row, once: no `*` in it, none named twice"),
                ));
            }
            search.push(p);
        }
        let search_language = raw.search_language.unwrap_or_else(|| "simple".into());
        if !sql_name(&search_language) {
            return Err(self.err(
                format!("{at}.search_language"),
                format!(
                    "'{search_language}': a text search configuration's name (simple, english, german, …): letters, digits and _"
                ),
            ));
        }
        let columns = self.columns(&format!("{at}.columns"), raw.columns)?;
        Ok(PostgresOutput {
            url,
            url_source,
            dir: self.dir.to_path_buf(),
            schema,
            table,
            items,
            key,
            search,
            search_language,
            columns,
        })
    }

    /// Jobs writing one PostgreSQL table (one URL or URL source, one
    /// table, names in any case) as for SQLite: each names its own `key`
    /// (with the input's or region's their rows would replace each
    /// other's), and they agree on the `search` column.
    pub(super) fn shared_postgres_tables(&self, jobs: &[Job]) -> Result<()> {
        let mut seen: Vec<(&str, &PostgresOutput)> = Vec::new();
        for job in jobs {
            let Some(p) = &job.postgres else { continue };
            let same = |o: &PostgresOutput| {
                o.table_name().eq_ignore_ascii_case(&p.table_name())
                    && o.url_source == p.url_source
                    && (o.url_source.is_some() || o.url == p.url)
            };
            let Some((first, o)) = seen.iter().find(|(_, o)| same(o)) else {
                seen.push((&job.name, p));
                continue;
            };
            if o.key.is_empty() || p.key.is_empty() {
                let which = if p.key.is_empty() { &job.name } else { *first };
                return Err(self.err(
                    format!("jobs.{which}.output.postgres.key"),
                    format!(
                        "jobs {first} and {} both write PostgreSQL table {}, and {which} names no `key` pointer: \
                         with the default key (the input's or region's) their rows would replace each other's; \
                         jobs may share a table only if each names its own `key`, else give each job its own table",
                        job.name,
                        p.table_name()
                    ),
                ));
            }
            if (&o.search, &o.search_language) != (&p.search, &p.search_language) {
                return Err(self.err(
                    format!("jobs.{}.output.postgres.search", job.name),
                    format!(
                        "{} writes PostgreSQL table {} as job {first} does, whose search is {} [{}] where this one's is {} [{}]: \
                         jobs sharing a table share its search column, so give them the same `search` and `search_language` (or another table)",
                        job.name,
                        p.table_name(),
                        o.search_language,
                        o.search.join(", "),
                        p.search_language,
                        p.search.join(", ")
                    ),
                ));
            }
            let (theirs, ours) = (columns_named(&o.columns), columns_named(&p.columns));
            if theirs != ours {
                return Err(self.err(
                    format!("jobs.{}.output.postgres.columns", job.name),
                    format!(
                        "{} writes PostgreSQL table {} as job {first} does, whose `columns` are {theirs} where this one's are {ours}: \
                         jobs sharing a table share its columns, so give them the same names and types (the pointers may differ), or another table",
                        job.name,
                        p.table_name(),
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The URL: a secret's source (read as an API key is), or text in the
    /// file without a password. Neither error shows the URL.
    fn postgres_url(&self, field: &str, v: &Value) -> Result<(Secret, Option<SecretSource>)> {
        if let Value::String(text) = v {
            let url = parse_url(text).map_err(|m| self.err(field, m))?;
            if url.has_password() {
                return Err(self.err(
                    field,
                    "the URL written in the file holds a password: write { env: NAME }, { file: PATH } or { credential: NAME }, as for an API key (the URL is a secret)",
                ));
            }
            return Ok((Secret::new(text.clone()), None));
        }
        let source = self.secret_source(field, v)?;
        let url = match self.secrets {
            Secrets::ReadVisible if source.outside_its_unit() => Secret::new(String::new()),
            Secrets::Read | Secrets::ReadVisible => {
                source.read(self.dir).map_err(|m| self.err(field, m))?
            }
            Secrets::Skip => Secret::new(String::new()),
        };
        if !url.expose().is_empty() {
            parse_url(url.expose()).map_err(|m| self.err(field, format!("from {source}: {m}")))?;
        }
        Ok((url, Some(source)))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{Config, Secrets};

    /// The configuration `per_run`'s tests load, its output `output`.
    fn with_output(output: &str) -> crate::Result<Config> {
        let text = crate::config::per_run::tests::CONFIG.replace("output: out/fan", output);
        Config::parse(Path::new("portion.yaml"), &text, Secrets::Skip)
    }

    fn refusal(output: &str) -> (String, String) {
        match with_output(output) {
            Err(crate::Error::Config { field, message, .. }) => (field, message),
            other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn a_table_of_a_schema_and_every_output_at_once() {
        let c = with_output(
            "output: { folder: out, sqlite: { path: r.db, table: t, items: /items/*, key: /id }, \
             postgres: { url: { env: RESULTS_URL }, table: res.t, items: /items/*, key: /id, \
             search: [/title, /a/b], search_language: english } }",
        )
        .unwrap();
        let pg = c.jobs[0].postgres.as_ref().unwrap();
        assert_eq!(
            (pg.schema.as_deref(), pg.table.as_str()),
            (Some("res"), "t")
        );
        assert_eq!(pg.table_name(), "res.t");
        assert_eq!(pg.search, ["/title", "/a/b"]);
        assert_eq!(pg.search_language, "english");
        assert!(c.jobs[0].sqlite.is_some() && c.jobs[0].output.is_some());
        let c = with_output("output: { postgres: { url: postgres://me@db/r, table: t, items: /items/*, key: /id } }")
            .unwrap();
        let pg = c.jobs[0].postgres.as_ref().unwrap();
        assert_eq!(
            (pg.url_source.as_ref(), pg.search_language.as_str()),
            (None, "simple")
        );
    }

    #[test]
    fn a_password_in_the_file_a_bad_table_or_language_are_refused() {
        let (field, message) = refusal(
            "output: { postgres: { url: \"postgres://me:s3cret-pw-9@db/r\", table: t, items: /items/*, key: /id } }",
        );
        assert_eq!(field, "jobs.fan.output.postgres.url");
        assert!(message.contains("holds a password"), "{message}");
        assert!(!message.contains("s3cret"), "{message}");
        let (field, _) = refusal(
            "output: { postgres: { url: { env: U }, table: a.b.c, items: /items/*, key: /id } }",
        );
        assert_eq!(field, "jobs.fan.output.postgres.table");
        let (field, _) = refusal(
            "output: { postgres: { url: { env: U }, table: t, items: /items/*, key: /id, search_language: \"x'y\" } }",
        );
        assert_eq!(field, "jobs.fan.output.postgres.search_language");
        let (field, _) =
            refusal("output: { postgres: { url: { env: U }, table: t, items: /items/* } }");
        assert_eq!(field, "jobs.fan.output.postgres.key");
    }

    /// Two jobs of one file writing one PostgreSQL table: refused with
    /// another `search` (or `search_language`); each its own key and one
    /// `search`: taken.
    #[test]
    fn jobs_sharing_a_table_agree_on_search() {
        let text = crate::config::per_run::tests::CONFIG;
        let job = text[text.find("  fan:").unwrap()..].to_string();
        let two = |a: &str, b: &str| {
            let second = job
                .replace("  fan:", "  other:")
                .replace("output: out/fan", b);
            let text = format!("{}{second}", text.replace("output: out/fan", a));
            Config::parse(Path::new("portion.yaml"), &text, Secrets::Skip)
        };
        let pg = |table: &str, extra: &str| {
            format!(
                "output: {{ postgres: {{ url: {{ env: U }}, table: {table}, items: /items/*{extra} }} }}"
            )
        };
        let field = |r: crate::Result<Config>| match r {
            Err(crate::Error::Config { field, .. }) => field,
            other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
        };
        let keyed = pg("t", ", key: /id");
        assert!(two(&keyed, &pg("T", ", key: /name")).is_ok());
        assert_eq!(
            field(two(&keyed, &pg("t", ", key: /id, search: [/title]"))),
            "jobs.other.output.postgres.search"
        );
        assert_eq!(
            field(two(
                &keyed,
                &pg("t", ", key: /id, search_language: english")
            )),
            "jobs.other.output.postgres.search"
        );
        assert!(
            two(&keyed, &pg("s.t", ", key: /id, search: [/title]")).is_ok(),
            "another schema"
        );
        let elsewhere = pg("t", ", key: /id, search: [/title]").replace("env: U", "env: V");
        assert!(two(&keyed, &elsewhere).is_ok(), "another server");
    }
}
