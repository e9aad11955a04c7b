//! `portion man`: the man page (roff) from the command-line definitions, plus
//! the sections clap cannot know: the exit codes a timer or a script acts
//! on, the files and environment, and where the configuration is described.

use clap::CommandFactory;

use super::table::emit;
use crate::cli::Cli;

use crate::{Error, ExitStatus, Result};

pub fn execute() -> Result<ExitStatus> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .map_err(|source| Error::Process {
            what: "render the man page",
            source,
        })?;
    let mut page = String::from_utf8_lossy(&out).into_owned();
    page.push_str(&extra_sections());
    emit(&page)
}

/// EXIT STATUS, ENVIRONMENT, FILES and CONFIGURATION, in roff.
fn extra_sections() -> String {
    let codes = [
        (ExitStatus::OK, "every requested job finished its work"),
        (
            ExitStatus::STOPPED,
            "stopped early but cleanly: the quota said no, the upstream reported its quota spent, \
             another run holds the lock, a pool's log was lost, or a stop signal arrived; the next \
             tick resumes (the systemd unit counts it as success)",
        ),
        (
            ExitStatus::CONFIG,
            "configuration error: the message names the file, the field and what is wrong; nothing was charged",
        ),
        (
            ExitStatus::UNAVAILABLE,
            "the store is unreachable (or refuses us) and an endpoint's policy is fail_closed",
        ),
        (
            ExitStatus::FAILURE,
            "anything else, e.g. an upstream error that outlasted the retries",
        ),
        (ExitStatus::USAGE, "command-line usage error"),
    ];
    let mut s = String::from(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in codes {
        s.push_str(&format!(".TP\n\\fB{code}\\fR\n{}\n", roff_text(meaning)));
    }
    s.push_str(
        ".SH ENVIRONMENT\n\
         .TP\n\\fBPORTION_CONFIG\\fR\nthe configuration file, when \\-c is not given (else ./portion.yaml)\n\
         .TP\n\\fBPORTION_STORE\\fR\nthe store, when \\-\\-store is not given (else the file's store:, else the embedded store)\n\
         .TP\n\\fBSTATE_DIRECTORY\\fR, \\fBXDG_STATE_HOME\\fR\nwhere the embedded store and this host's history live\n\
         .TP\n\\fBPORTION_FILE_MODE\\fR\nthe mode of pages, a new embedded store and the history (octal, default 0640, less the umask; never writable by others); the folders portion creates get x for each r bit (0750), and never o+w\n\
         .TP\n\\fBRUST_LOG\\fR\nthe log filter, over \\-v and \\-q\n\
         .SH FILES\n\
         .TP\n\\fB$STATE_DIRECTORY/ledger.sqlite3\\fR, else \\fB~/.local/state/portion/ledger.sqlite3\\fR\n\
         the embedded store, with history.json beside it\n\
         .SH CONFIGURATION\n\
         One YAML file (a UTF\\-8 BOM, merge keys and top\\-level x\\- anchor blocks \
         allowed). Unknown and duplicate keys are errors (exit 78, naming the file and \
         the field). Durations are human (90s, 10m, 1h, 24h); \\fBquota check\\fR \
         prints what a file resolves to; jobs/youtube.yaml is a complete example and \
         the README the full text.\n\
         .TP\n\\fBstore:\\fR URL\nembedded, embedded:PATH, redis://, rediss://, \
         redis+cluster://, redis+sentinel://; optional (default: embedded)\n\
         .TP\n\\fBlock_ttl:\\fR DURATION\nhow long a killed run's lock outlives it (default 30s)\n\
         .TP\n\\fBhttp:\\fR { timeout, connect_timeout, retries, backoff, max_body }\n\
         per request: time limits, attempts after the first (each charged), the first \
         pause between them, the largest body read\n\
         .TP\n\\fBcredentials:\\fR NAME: { secret, upstream_reset, upstream_headers, mode, pools, shares, lend_after }\n\
         secret: { env: VAR }, { file: PATH } or { credential: NAME } (systemd's \
         $CREDENTIALS_DIRECTORY/NAME; check outside the unit warns and checks the rest), never inline; \
         upstream_reset: \\(dqHH:MM Area/City\\(dq, when the upstream's own quota resets; \
         upstream_headers: github, ietf, openai or { POOL: { remaining, reset, limit } }, \
         the upstream's own counts (within one of its periods they only ever lower what is left); \
         mode: enforce (default) or observe; pools: \
         POOL: [ { limit, per, headroom, aligned } ], a window's budget being limit less \
         headroom (units, or a percentage rounded up), aligned: ZONE a calendar window; \
         { from: upstream, per } takes the limit the upstream last announced (upstream_headers), a limit beside it a cap; \
         shares: { JOB: { reserve, limit } } in units or percentages of each budget; \
         lend_after: \\(dq80%\\(dq, when in a calendar period unused reserves start to open\n\
         .TP\n\\fBendpoints:\\fR NAME: { cost, on_store_error }\n\
         cost: { POOL: UNITS, ... }, or a bare number for a credential of one pool; a pool's \
         { estimate, actual } settled from the response; not_modified: N, what a 304 costs; \
         on_store_error: fail_closed (default) or fail_open\n\
         .TP\n\\fBjobs:\\fR NAME: { credential, regions | inputs, once, hosts_from_inputs, steps, output, schedule, concurrency, max_wait }\n\
         regions: the keys the job walks; inputs: { file, key, batch, join }, a .txt, .jsonl or .csv \
         file of keys instead (once: true, each done once; hosts_from_inputs: true, {key} may \
         name the host a request with {secret} goes to); steps: [ { endpoint, request: { url, method \
         (GET, POST, PUT), query, headers, body }, paginate: { token: POINTER, param: NAME \
         | link: next | next_url: POINTER | page: NAME, start: N, until_empty: POINTER \
         | offset: NAME, size: N, until_empty: POINTER; max_pages: N }, for_each: { from, batch, \
         join, per_page }, conditional: true, on_not_modified, incremental: { from, param, \
         initial } } ]; \
         output: a folder (relative to the file's) of one JSON file per page, or \
         { folder, sqlite: { path, table, items, key, search, columns: { NAME: { from, type } } } }, rows upserted into a SQLite table; \
         schedule: every DURATION, for planning; concurrency: requests in flight at once (1 to 64); max_wait: how long a refused charge may wait for its units inside the run (default 0, at most 1d). \
         Placeholders in requests: {region}, \
         {key}, {secret}, {job}, {step}, {page}, {batch}, {input.NAME}.\n",
    );
    s
}

/// Text made safe for roff: backslashes and leading dots or quotes escaped.
fn roff_text(text: &str) -> String {
    let t = text.replace('\\', "\\\\").replace('-', "\\-");
    match t.chars().next() {
        Some('.') | Some('\'') => format!("\\&{t}"),
        _ => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_every_exit_code_and_the_configuration() {
        let s = extra_sections();
        for code in [0, 1, 2, 69, 75, 78] {
            assert!(
                s.contains(&format!("\\fB{code}\\fR\n")),
                "exit {code} missing"
            );
        }
        for section in ["EXIT STATUS", "ENVIRONMENT", "FILES", "CONFIGURATION"] {
            assert!(
                s.contains(&format!(".SH {section}")) || s.contains(&format!(".SH \"{section}\""))
            );
        }
        for key in [
            "store:",
            "credentials:",
            "endpoints:",
            "jobs:",
            "PORTION_FILE_MODE",
        ] {
            assert!(s.contains(key), "{key} missing");
        }
        assert_eq!(roff_text(".x-y"), "\\&.x\\-y");
    }

    /// The man page's configuration part names every field of the README's
    /// configuration table (the last part of its name: `lend_after` for
    /// `credentials.NAME.lend_after`), and every source of a secret: a
    /// field added to one and not the other fails here.
    #[test]
    fn the_configuration_part_knows_every_field_of_the_readmes_table() {
        let readme = include_str!("../../README.md");
        let section = readme
            .split("\n## Configuration\n")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("README has a Configuration section");
        let page = extra_sections();
        let man = page
            .split(".SH CONFIGURATION")
            .nth(1)
            .expect("a CONFIGURATION section");
        let fields: Vec<&str> = section
            .lines()
            .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
            .map(|f| f.rsplit('.').next().unwrap_or(f))
            .filter(|f| !f.chars().all(|c| c.is_ascii_uppercase()))
            .collect();
        assert!(fields.len() >= 20, "the table was not found: {fields:?}");
        // (roff's font changes, \fB and \fR, are not part of a word)
        let man = man.replace("\\fB", " ").replace("\\fR", " ");
        let words: Vec<&str> = man
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .collect();
        let missing: Vec<&&str> = fields.iter().filter(|f| !words.contains(f)).collect();
        assert!(missing.is_empty(), "the man page lacks {missing:?}");
        for source in ["{ env: VAR }", "{ file: PATH }", "{ credential: NAME }"] {
            assert!(
                man.contains(source),
                "the man page lacks the secret {source}"
            );
        }
    }
}
