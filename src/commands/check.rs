//! `portion check`: validate the configuration and print what it resolved,
//! without touching the store or the network. Secrets are read (so a missing
//! one fails here, not at 3 a.m.) but never printed; every request is filled
//! in as it will be sent (its URL and headers checked), and each job's
//! output folder must take a new file. A systemd credential is the one
//! secret `check` may not see: outside its unit (no
//! `$CREDENTIALS_DIRECTORY`) it is named in a warning, and the rest is
//! checked (exit 0).

use std::fmt::Write;

use tracing::warn;

use super::common::rows::{rows_apart, rows_at};
use crate::config::{Config, Credential, Job, Step, StorePolicy};
use crate::ledger::{StoreLocation, redact_url};
use crate::sink::sqlite::SinkError;
use crate::timefmt::fmt_duration;
use crate::{Error, ExitStatus, Result};

pub fn execute(config: &Config, store: &StoreLocation) -> Result<ExitStatus> {
    rows_apart(config, config.jobs.iter(), store)?;
    for c in unseen(config) {
        warn!(
            "credential {}: its secret, {}, was not checked: $CREDENTIALS_DIRECTORY is not set (outside its systemd unit); the rest of {} is checked. To check it too, run check in the unit's environment (README, systemd)",
            c.name,
            c.secret_source,
            config.file.display()
        );
    }
    // What the configuration cannot say by itself: that each job can write
    // its pages (a run checks this too, before its first charge).
    for job in &config.jobs {
        job.output_writable().map_err(|(dir, e)| Error::Config {
            file: config.file.clone(),
            field: format!("jobs.{}.output", job.name),
            message: format!(
                "{}: cannot write in {}: {e}; a run would stop before its first call",
                job.output
                    .as_deref()
                    .unwrap_or(std::path::Path::new(""))
                    .display(),
                dir.display()
            ),
        })?;
        if let Some(spec) = &job.sqlite {
            crate::sink::sqlite::check(spec, job.rows_keep_runs()).map_err(|e| match e {
                // (busy is not wrong: 75, check again)
                SinkError::Busy(_) => Error::Busy(format!(
                    "{}: the results database is {e}: its tables could not be checked; check again",
                    spec.path.display()
                )),
                e => Error::Config {
                    file: config.file.clone(),
                    field: format!(
                        "jobs.{}.output.sqlite.{}",
                        job.name,
                        if matches!(e, SinkError::Shape(_)) {
                            "table"
                        } else {
                            "path"
                        }
                    ),
                    message: format!(
                        "{}: {e}; a run would stop before its first call",
                        spec.path.display()
                    ),
                },
            })?;
        }
        if let Some(spec) = &job.postgres {
            check_postgres(config, job, spec)?;
        }
    }
    super::table::emit(&describe(config, store))
}

/// `check` of a job's PostgreSQL table: connect, and check its tables'
/// shape as a run's open would (creating nothing); a URL in a systemd
/// credential outside its unit is not checked, and said so.
fn check_postgres(config: &Config, job: &Job, spec: &crate::config::PostgresOutput) -> Result<()> {
    if spec.url.expose().is_empty() {
        let source = (spec.url_source.as_ref()).map_or(String::new(), |s| s.to_string());
        tracing::warn!(
            "job {}: its PostgreSQL URL, {source}, was not checked: $CREDENTIALS_DIRECTORY is not set (outside its systemd unit)",
            job.name
        );
        return Ok(());
    }
    let server = crate::sink::postgres::server_of(spec).unwrap_or_default();
    crate::sink::postgres::check(spec, job.rows_keep_runs()).map_err(|e| {
        match crate::sink::postgres::command_error(e, &config.file, &job.name, &server) {
            Error::Config {
                file,
                field,
                message,
            } => Error::Config {
                file,
                field,
                message: format!("{message}; a run would stop before its first call"),
            },
            other => other,
        }
    })
}

/// The credentials whose secret this process cannot see (a systemd
/// credential outside its unit), so it went unchecked.
fn unseen(config: &Config) -> impl Iterator<Item = &Credential> {
    (config.credentials.iter()).filter(|c| c.secret_source.outside_its_unit())
}

/// The resolved configuration, as `portion check` prints it.
pub fn describe(config: &Config, store: &StoreLocation) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "configuration: {}", config.file.display());
    let _ = match store {
        StoreLocation::Redis(url) => writeln!(w, "store: {} (not contacted)", redact_url(url)),
        StoreLocation::Embedded(Some(p)) => writeln!(w, "store: embedded, {}", p.display()),
        StoreLocation::Embedded(None) => {
            writeln!(w, "store: embedded, in the default state directory")
        }
    };
    for c in &config.credentials {
        credential(w, c);
        share_notes(w, config, c);
    }
    for job in &config.jobs {
        self::job(w, job, config.credential(job));
    }
    let unseen = unseen(config).count();
    let _ = writeln!(
        w,
        "\nok: {} credential(s), {} job(s){}",
        config.credentials.len(),
        config.jobs.len(),
        if unseen > 0 {
            format!("; {unseen} secret(s) not seen outside the unit, not checked")
        } else {
            String::new()
        }
    );
    out
}

/// A credential: where its secret comes from (never the secret), its
/// upstream's daily reset, and each window of its pools.
fn credential(w: &mut String, c: &Credential) {
    let _ = writeln!(
        w,
        "\ncredential {}: secret from {} ({})",
        c.name,
        c.secret_source,
        if c.secret_source.outside_its_unit() {
            "NOT SEEN: $CREDENTIALS_DIRECTORY is not set outside the unit"
        } else {
            "present, not shown"
        }
    );
    if let Some(r) = &c.upstream_reset {
        let _ = writeln!(
            w,
            "  upstream resets daily at {} {}",
            r.time.format("%H:%M"),
            r.tz
        );
    }
    for p in &c.pools {
        for (i, win) in p.windows.iter().enumerate() {
            if let Some(l) = (c.learned.iter()).find(|l| l.pool == p.name && l.index == i) {
                let _ = writeln!(
                    w,
                    "  pool {:<10} per {:<8} limit from the upstream (the last it announced, kept in the store){}",
                    p.name,
                    fmt_duration(win.per),
                    l.cap
                        .map(|c| format!(", capped at {c}"))
                        .unwrap_or_default()
                );
                continue;
            }
            let _ = writeln!(
                w,
                "  pool {:<10} per {:<8} limit {:>7}  headroom {:>6}  budget {:>7}{}",
                p.name,
                fmt_duration(win.per),
                win.limit,
                win.headroom,
                win.budget(),
                win.aligned
                    .map(|tz| format!("  calendar: resets at midnight {tz}"))
                    .unwrap_or_default()
            );
        }
    }
}

/// A share that names no job of the file on its credential is allowed
/// (scripts spend as it with `--job`), but may be a typo: said, not refused.
/// So is `lend_after` on a credential of sliding windows only, which never
/// lend: it does nothing there (warned, on stderr too).
fn share_notes(w: &mut String, config: &Config, c: &Credential) {
    let calendar = (c.pools.iter()).any(|p| p.windows.iter().any(|w| w.aligned.is_some()));
    if c.shares.lend_after.is_some() && !calendar {
        let text = format!(
            "lend_after does nothing on credential {}: none of its windows is a calendar one (aligned: ZONE), and sliding windows never lend",
            c.name
        );
        warn!("{text}");
        let _ = writeln!(w, "  warning: {text}");
    }
    for s in &c.shares.list {
        let on_c = |j: &&Job| j.name == s.name && config.credential(j).name == c.name;
        if !config.jobs.iter().any(|j| on_c(&j)) {
            let _ = writeln!(
                w,
                "  note: share {} names no job of this file on credential {}: only `portion charge`/`exec --job {}` spend as it",
                s.name, c.name, s.name
            );
        }
    }
}

/// A job: its regions, each step, and what a run spends at most.
fn job(w: &mut String, job: &Job, cred: &Credential) {
    // The planner's worst case, saturating: past u64 (fan-outs of
    // fan-outs at their largest) is shown as u64::MAX, never a panic.
    let calls = job.calls_per_run();
    let units: Vec<String> = job
        .units_per_run()
        .iter()
        .map(|(p, u)| format!("{p} {u}"))
        .collect();
    let _ = writeln!(w, "\njob {} (credential {})", job.name, cred.name);
    if let Some(inputs) = &job.inputs {
        let _ = writeln!(
            w,
            "  inputs: {inputs}{}",
            if job.once {
                ", each done once"
            } else {
                ", every input every run"
            }
        );
    } else if job.regions.is_empty() {
        let _ = writeln!(w, "  no regions: the steps run once per run");
    } else {
        let _ = writeln!(
            w,
            "  regions ({}): {}",
            job.regions.len(),
            job.regions.join(", ")
        );
    }
    for (i, s) in job.steps.iter().enumerate() {
        step(w, i, s);
    }
    // (a job with inputs: per input, the file's length is the run's)
    let _ = writeln!(
        w,
        "  per {}, at most: {calls} calls, spending {}",
        if job.inputs.is_some() { "input" } else { "run" },
        units.join(", ")
    );
    if let Some(folder) = &job.output {
        let _ = writeln!(w, "  output: {}", folder.display());
    }
    if let Some(s) = &job.sqlite {
        let _ = writeln!(w, "  rows: {}", rows_at(s));
    }
    if let Some(p) = &job.postgres {
        let _ = writeln!(w, "  rows: {}", super::common::rows::postgres_at(p));
    }
    if let Some(s) = job.schedule {
        let _ = writeln!(w, "  schedule: every {}", fmt_duration(s));
    }
}

/// Step `i`: its request as it is sent (secrets as placeholders), then
/// its cost, its pages and its store policy.
fn step(w: &mut String, i: usize, s: &Step) {
    let cost: Vec<String> = s
        .cost
        .iter()
        .map(|c| format!("{} {}", c.pool.name, c.units))
        .collect();
    let pages = match (&s.paginate, &s.for_each) {
        (_, Some(f)) => format!(
            "up to {} calls per region, one per batch of {} value(s) at {} in step {}'s pages, joined with {:?} (at most {} values: {} per page)",
            s.max_requests(),
            f.batch,
            f.from,
            i.saturating_sub(1),
            f.join,
            f.max_values,
            f.per_page
        ),
        (Some(p), None) => format!("up to {} pages ({})", p.max_pages, p.kind),
        (None, None) => "1 page".into(),
    };
    // The query as it is sent: none at all, not an empty `?`, and
    // after the URL's own query with `&`, not a second `?`.
    let first = if s.url.to_string().contains('?') {
        '&'
    } else {
        '?'
    };
    let query: String = s
        .query
        .iter()
        .enumerate()
        .map(|(n, (k, v))| format!("{}{k}={v}", if n == 0 { first } else { '&' }))
        .collect();
    let _ = writeln!(
        w,
        "  step {i}: {} {} {}{query}",
        s.endpoint, s.method, s.url
    );
    // (a 304's cost: the endpoint's not_modified, at most the call's)
    let not_modified = match (s.not_modified, &s.conditional) {
        (Some(n), _) => format!(" (answered 304: {n} in each pool)"),
        (None, Some(_)) => " (answered 304: the full cost; not_modified sets less)".into(),
        (None, None) => String::new(),
    };
    let _ = writeln!(
        w,
        "          cost {} per call{not_modified}, {pages}, {}",
        cost.join(" + "),
        match s.on_store_error {
            StorePolicy::FailClosed => "fail_closed",
            StorePolicy::FailOpen => "fail_open",
        }
    );
    spending_less(w, s);
}

/// What a step does to spend less (issue 36, item 23): its validators and
/// what a 304 does (`on_not_modified`), its incremental value.
fn spending_less(w: &mut String, s: &Step) {
    if let Some(c) = &s.conditional {
        let _ = writeln!(
            w,
            "          conditional: each page's ETag/Last-Modified sent back; on_not_modified: {}",
            if c.walk_on {
                "continue (a 304 walks on with the page's last token: every changed page is fetched)"
            } else {
                "end (a 304 ends the key's walk: right only for an API sorted newest first)"
            }
        );
    }
    if let Some(i) = &s.incremental {
        let _ = writeln!(
            w,
            "          incremental: {}=the largest {} of the key's last complete walk{}",
            i.param,
            i.from,
            i.initial
                .as_ref()
                .map(|v| format!(", {v:?} before any"))
                .unwrap_or_else(|| ", nothing before any".into())
        );
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::Secrets;

    #[test]
    fn a_job_s_worst_case_is_the_planner_s() {
        let text = crate::config::per_run::tests::CONFIG;
        let c = Config::parse(Path::new("portion.yaml"), text, Secrets::Skip).expect("valid");
        let out = describe(&c, &StoreLocation::Embedded(None));
        assert!(
            out.contains("  per run, at most: 22 calls, spending units 28, search 16\n"),
            "{out}"
        );
    }
}
