//! `portion status` as text: per credential, its notices, a table of its
//! windows, a usage chart per window, who spent it and where its jobs
//! resume. Text the store holds (tags, a block's reason, a cursor's
//! region) goes through [`printable`]: an older build or another host may
//! have stored what this one would refuse, and it must not reach the
//! terminal raw.

use std::collections::BTreeMap;

use super::{CredentialReport, InputsProgress, StoreHeader};
use crate::commands::table::{Paint, Table, sparkline};
use crate::ledger::{CredentialUsage, Micros, USAGE_BUCKETS};
use crate::logging::printable;
use crate::runner::upstream_limits::{differs, pool_says, upstream_says};
use crate::timefmt::{fmt_window, local_datetime, when};

/// The report as text.
pub fn render(header: &StoreHeader, reports: &[CredentialReport], p: Paint) -> String {
    let mut out = if header.exists {
        format!("store: {}\n\n", header.store)
    } else {
        format!(
            "store: {} {}\n\n",
            header.store,
            p.yellow(
                "does not exist yet: no run has charged anything through it (the first `portion run` creates it; status created nothing)"
            )
        )
    };
    for (i, r) in reports.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        notices(&mut out, r, p);
        out.push('\n');
        windows_table(&mut out, &r.usage, p);
        shares_table(&mut out, r);
        usage_charts(&mut out, &r.usage);
        spent_and_jobs(&mut out, r);
    }
    out
}

/// A credential's heading line, then what the operator should know first:
/// a lost log, pools counted as spent or observed, an upstream block.
fn notices(out: &mut String, r: &CredentialReport, p: Paint) {
    let u = &r.usage;
    let now = u.at;
    out.push_str(&format!(
        "{}  ·  {}  ·  {} charges recorded\n",
        p.bold(&u.credential),
        local_datetime(now),
        u.charges_recorded
    ));
    if let Some(l) = r.lost {
        out.push_str(&format!(
            "  {}: the store had recorded {} charges and reported {} on {}: the next run tells the store, which then counts its pools as spent until at most {}\n    {}.\n",
            p.red("LOG LOST"),
            l.had,
            l.found,
            local_datetime(l.noticed_at),
            local_datetime(l.noticed_at + u.pools.iter().flat_map(|p| &p.windows).map(|w| w.window.per.as_micros() as Micros).max().unwrap_or(0)),
            r.lost_advice
        ));
    }
    for pool in &u.pools {
        if let Some(l) = pool.log_lost {
            out.push_str(&format!(
                "  {}: the store lost the log of pool {} at {}: the pool counts as spent until {} ({})\n",
                p.red("LOG LOST"),
                pool.pool,
                local_datetime(l.since),
                local_datetime(l.until),
                when(l.until, now)
            ));
        }
        for (l, learned) in r.learned.iter().filter(|(l, _)| l.pool == pool.pool) {
            let cap = l
                .cap
                .map(|c| format!(", capped at {c}"))
                .unwrap_or_default();
            let said = match learned {
                Some((limit, seen)) => format!(
                    "the upstream's: {limit}{cap} (announced {})",
                    local_datetime(*seen)
                ),
                None => format!(
                    "the upstream's, not announced yet{cap}: the next run sends one request to learn it"
                ),
            };
            out.push_str(&format!(
                "  pool {}, {} window: its limit is {said}\n",
                pool.pool,
                fmt_window(l.per)
            ));
        }
        if let Some(a) = r.upstream.get(&pool.pool) {
            let windows = || pool.windows.iter().map(|w| &w.window);
            let seen = format!("seen {}", local_datetime(a.seen));
            let said = if differs(windows(), &a.limits) {
                format!(
                    "{}: the upstream says {}; pool {} says {} ({seen})",
                    p.yellow("ANOTHER LIMIT"),
                    upstream_says(&a.limits),
                    pool.pool,
                    pool_says(windows())
                )
            } else {
                format!(
                    "the upstream says {} for pool {}, as the pool does ({seen})",
                    upstream_says(&a.limits),
                    pool.pool
                )
            };
            out.push_str(&format!("  {said}\n"));
        }
        if let Some(at) = pool.observed_at {
            out.push_str(&format!(
                "  {}: {} calls of pool {} did not fit and were recorded all the same, the latest at {}\n",
                p.yellow("OBSERVED"),
                pool.observed_rejections,
                pool.pool,
                local_datetime(at)
            ));
        }
    }
    if let Some(until) = u.blocked_until {
        let reason = printable(u.blocked_reason.as_deref().unwrap_or(""));
        out.push_str(&format!(
            "  {} until {} ({}): {reason}\n",
            p.red("BLOCKED by the upstream"),
            local_datetime(until),
            when(until, now)
        ));
    }
}

/// The table of a credential's windows, the remaining column coloured by
/// how much is left.
fn windows_table(out: &mut String, u: &CredentialUsage, p: Paint) {
    let now = u.at;
    let mut t = Table::default();
    t.row(
        [
            "pool",
            "window",
            "limit",
            "headroom",
            "budget",
            "used",
            "remaining",
            "next units free",
            "fully free",
        ]
        .map(String::from)
        .to_vec(),
    );
    for pool in &u.pools {
        for w in &pool.windows {
            t.row(vec![
                pool.pool.clone(),
                fmt_window(w.window.per),
                w.window.limit.to_string(),
                w.window.headroom.to_string(),
                w.budget.to_string(),
                // (units the upstream counted that others spent; units
                // at their estimate until settled)
                match w.others_until {
                    Some(t) if w.others > 0 => {
                        format!("{} + {} by others until {}", w.used, w.others, when(t, now))
                    }
                    _ => w.used.to_string(),
                } + &match w.reserved {
                    0 => String::new(),
                    r => format!(" ({r} reserved)"),
                },
                w.remaining.to_string(),
                w.next_free_at.map_or("-".into(), |t| when(t, now)),
                w.fully_free_at.map_or("-".into(), |t| when(t, now)),
            ]);
        }
    }
    // Colour the remaining column by how much is left, after alignment.
    let windows: Vec<&crate::ledger::WindowUsage> =
        u.pools.iter().flat_map(|p| &p.windows).collect();
    for (k, line) in t.render("  ").lines().enumerate() {
        match k.checked_sub(1).and_then(|i| windows.get(i)) {
            Some(w) if p.on => {
                let r = w.remaining.to_string();
                let painted = if w.remaining == 0 {
                    p.red(&r)
                } else if w.remaining * 10 < w.budget {
                    p.yellow(&r)
                } else {
                    p.green(&r)
                };
                out.push_str(&replace_column(line, &r, &painted, 6));
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
}

/// Each share's reserve, used and what it can take, per window (nothing
/// without shares).
fn shares_table(out: &mut String, r: &CredentialReport) {
    if r.shares.is_empty() {
        return;
    }
    let mut t = Table::default();
    t.row(
        [
            "share", "pool", "window", "reserve", "limit", "used", "can take",
        ]
        .map(String::from)
        .to_vec(),
    );
    for s in &r.shares {
        t.row(vec![
            s.share.clone(),
            s.pool.clone(),
            fmt_window(s.per),
            s.reserve.to_string(),
            s.limit.map_or("-".into(), |l| l.to_string()),
            s.used.to_string(),
            s.available.to_string(),
        ]);
    }
    out.push_str("\n  shares:\n");
    out.push_str(&t.render("  "));
}

/// A chart of usage over each of a credential's windows.
fn usage_charts(out: &mut String, u: &CredentialUsage) {
    out.push_str(&format!(
        "\n  usage over each window, oldest → now ({USAGE_BUCKETS} buckets):\n"
    ));
    let mut t = Table::default();
    for pool in &u.pools {
        for w in &pool.windows {
            let bucket = w.window.per / USAGE_BUCKETS as u32;
            let peak = w.buckets.iter().copied().max().unwrap_or(0);
            t.row(vec![
                pool.pool.clone(),
                fmt_window(w.window.per),
                format!("│{}│", sparkline(&w.buckets)),
                format!("peak {peak} per {}", fmt_window(bucket)),
            ]);
        }
    }
    out.push_str(&t.render("  "));
}

/// Who spent a credential's units (by endpoint, by job, over each pool's
/// longest window), and where each of its jobs resumes.
fn spent_and_jobs(out: &mut String, r: &CredentialReport) {
    let u = &r.usage;
    let spent = |pick: fn(&crate::ledger::WindowUsage) -> &BTreeMap<String, u64>| -> String {
        let parts: Vec<String> = u
            .pools
            .iter()
            .filter_map(|pool| {
                let w = pool.windows.iter().max_by_key(|w| w.window.per)?;
                let who: Vec<String> = pick(w)
                    .iter()
                    .map(|(k, v)| format!("{} {v}", printable(k)))
                    .collect();
                (!who.is_empty()).then(|| {
                    format!(
                        "{} {}: {}",
                        pool.pool,
                        fmt_window(w.window.per),
                        who.join(", ")
                    )
                })
            })
            .collect();
        if parts.is_empty() {
            "nothing".into()
        } else {
            parts.join(" · ")
        }
    };
    out.push_str(&format!(
        "\n  spent by endpoint:  {}\n",
        spent(|w| &w.by_endpoint)
    ));
    out.push_str(&format!("  spent by job:       {}\n", spent(|w| &w.by_job)));
    for (job, cursor) in &r.jobs {
        let at = match cursor {
            None => "has not run yet".to_string(),
            Some(c) if c.key.is_empty() => {
                format!(
                    "resumes at step {} page {} (after run {})",
                    c.place.step, c.place.page, c.run
                )
            }
            Some(c) => format!(
                "resumes at {} step {} page {} (after run {})",
                printable(&c.key),
                c.place.step,
                c.place.page,
                c.run
            ),
        };
        out.push_str(&format!("  job {job} {at}\n"));
        if let Some(w) = r.waiting.get(job) {
            let until = chrono::DateTime::from_timestamp_micros(w.until)
                .map(|t| crate::timefmt::clock_time(&t.with_timezone(&chrono::Local), true))
                .unwrap_or_default();
            out.push_str(&match w.pool.as_str() {
                "" => format!("    waiting until {until}: {}\n", w.why),
                pool => format!(
                    "    waiting for {} units of pool {pool} until {until}: {}\n",
                    w.units, w.why
                ),
            });
        }
        if let Some(t) = r.tables.get(job) {
            let rows = match (t.rows, &t.unknown) {
                (Some(n), _) => format!("{n} rows"),
                (None, Some(why)) => format!("rows unknown ({why})"),
                (None, None) => "rows unknown".into(),
            };
            out.push_str(&format!(
                "    table {} (PostgreSQL at {}): {rows}\n",
                t.table, t.server
            ));
        }
        if let Some(n) = r.not_modified.get(job) {
            let saved: Vec<String> = n
                .units_saved
                .iter()
                .map(|(p, u)| format!("{p} {u}"))
                .collect();
            out.push_str(&format!(
                "    answered 304 (not modified): {} calls, units saved: {}\n",
                n.calls,
                if saved.is_empty() {
                    "none".into()
                } else {
                    saved.join(", ")
                }
            ));
        }
        if let Some(p) = r.inputs.get(job) {
            inputs_lines(out, p, u.at);
        }
    }
}

/// A job of inputs' progress: its counts, when the rest will be done, and
/// its first failures.
fn inputs_lines(out: &mut String, p: &InputsProgress, now: Micros) {
    out.push_str(&format!(
        "    inputs: {} done, {} skipped, {} failed, {} left\n",
        p.done, p.skipped, p.failed, p.left
    ));
    let pace = match (p.left, p.done_by_micros) {
        _ if p.blocked.is_some() => p
            .blocked
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        (0, _) => "nothing left to do".to_string(),
        (_, None) => "never: one input costs more than a window's budget".to_string(),
        (_, Some(t)) => format!(
            "the rest done {} at the pace the budgets allow{}",
            when(t, now),
            if p.cost_estimated {
                ", settled costs counted at their estimate"
            } else {
                ""
            }
        ),
    };
    out.push_str(&format!("    {pace}\n"));
    for f in &p.failures {
        // (status 0: its request could not be made, so it was not sent)
        let status = match f.status {
            0 => String::new(),
            s => format!("{s} "),
        };
        out.push_str(&format!(
            "    failed: {} (line {}): {status}{}\n",
            printable(&f.key),
            f.line,
            printable(&f.excerpt)
        ));
    }
    if p.failed > p.failures.len() as u64 {
        out.push_str(&format!(
            "    … and {} more failed\n",
            p.failed - p.failures.len() as u64
        ));
    }
}

/// Replace the `col`-th whitespace-separated field equal to `plain` in an
/// aligned line with its painted form, keeping the alignment.
fn replace_column(line: &str, plain: &str, painted: &str, col: usize) -> String {
    let mut seen = 0;
    let mut start = None;
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b' ' && (i == 0 || bytes[i - 1] == b' ') {
            if seen == col {
                start = Some(i);
                break;
            }
            seen += 1;
        }
        i += 1;
    }
    match start {
        Some(s) if line[s..].starts_with(plain) => {
            format!("{}{}{}", &line[..s], painted, &line[s + plain.len()..])
        }
        _ => line.to_string(),
    }
}
