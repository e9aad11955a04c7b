//! `portion status --format openmetrics`: the same reports as the table and
//! the JSON (read once, by `status::read`), as OpenMetrics gauges for a
//! scraper or node_exporter's textfile collector. The names, labels and
//! units are documented in the README ("Metrics"); names of credentials,
//! pools, windows, jobs and endpoints are the only label values, so no
//! secret can appear.

use super::CredentialReport;
use super::json::policy_names;
use crate::ledger::{CredentialUsage, Micros, WindowUsage};
use crate::metrics::{Family, MetricUnit, Value, encode, unix_seconds};

/// The reports as OpenMetrics text, ending with `# EOF`.
pub fn render(reports: &[CredentialReport]) -> String {
    let mut families = credential_families(reports);
    families.extend(pool_families(reports));
    families.extend(window_families(reports));
    families.extend(inputs_families(reports));
    families.extend(not_modified_families(reports));
    families.extend(share_families(reports));
    let mut at = Family::new(
        "portion_status_timestamp",
        "When the store was read (its own clock), as Unix time.",
        Some(MetricUnit::Seconds),
    );
    if let Some(r) = reports.first() {
        at.push(&[], unix_seconds(r.usage.at));
    }
    families.push(at);
    encode(families)
}

fn credential_families(reports: &[CredentialReport]) -> Vec<Family> {
    let mut blocked = Family::new(
        "portion_credential_blocked",
        "1 while the credential is blocked because the upstream reported its quota spent, else 0.",
        None,
    );
    let mut until = Family::new(
        "portion_credential_blocked_until_timestamp",
        "When the credential's block ends, as Unix time (0: not blocked).",
        Some(MetricUnit::Seconds),
    );
    let mut lost = Family::new(
        "portion_credential_log_lost",
        "1 when the store reports fewer charges than this host has seen (it forgot the log), else 0.",
        None,
    );
    let mut charges = Family::new(
        "portion_credential_charges_recorded",
        "Charges the store has recorded for the credential; it only grows.",
        None,
    );
    for r in reports {
        let u = &r.usage;
        let labels = [("credential", u.credential.as_str())];
        blocked.push(&labels, u.blocked_until.is_some());
        until.push(&labels, u.blocked_until.map_or(Value::Int(0), unix_seconds));
        lost.push(&labels, r.lost.is_some());
        charges.push(&labels, u.charges_recorded);
    }
    vec![blocked, until, lost, charges]
}

fn pool_families(reports: &[CredentialReport]) -> Vec<Family> {
    let mut lost = Family::new(
        "portion_pool_log_lost",
        "1 while the pool counts as spent because the store lost its log, else 0.",
        None,
    );
    let mut until = Family::new(
        "portion_pool_log_lost_until_timestamp",
        "Until when the pool counts as spent after its log was lost, as Unix time (0: not lost).",
        Some(MetricUnit::Seconds),
    );
    let mut observed = Family::new(
        "portion_pool_observed_rejections",
        "Observe mode: calls recorded though they did not fit (a running count).",
        None,
    );
    for r in reports {
        for p in &r.usage.pools {
            let labels = [
                ("credential", r.usage.credential.as_str()),
                ("pool", p.pool.as_str()),
            ];
            lost.push(&labels, p.log_lost.is_some());
            until.push(
                &labels,
                p.log_lost.map_or(Value::Int(0), |l| unix_seconds(l.until)),
            );
            observed.push(&labels, p.observed_rejections);
        }
    }
    vec![lost, until, observed]
}

/// Each job of inputs' progress: inputs by state, and when the rest will
/// be done (absent when never).
fn inputs_families(reports: &[CredentialReport]) -> Vec<Family> {
    let mut inputs = Family::new(
        "portion_job_inputs",
        "A job of inputs' inputs by state: done (failed ones among them), failed, skipped, left.",
        None,
    );
    let mut done_by = Family::new(
        "portion_job_inputs_done_by_timestamp",
        "When a job of inputs' inputs left will be done at the pace the budgets allow, as Unix time (an estimate).",
        Some(MetricUnit::Seconds),
    );
    let mut blocked = Family::new(
        "portion_job_inputs_blocked",
        "1 when a once-job's done part changed in its file: its runs exit 78 until `portion reset JOB --yes`.",
        None,
    );
    for r in reports {
        for (job, p) in &r.inputs {
            for (state, n) in [
                ("done", p.done),
                ("failed", p.failed),
                ("skipped", p.skipped),
                ("left", p.left),
            ] {
                inputs.push(&[("job", job.as_str()), ("state", state)], n);
            }
            if let Some(t) = p.done_by_micros {
                done_by.push(&[("job", job.as_str())], unix_seconds(t));
            }
            blocked.push(
                &[("job", job.as_str())],
                u64::from(p.blocked.as_ref().is_some_and(|b| !b.restarts)),
            );
        }
    }
    // (no family at all without a job of inputs: the text stays as it was)
    let families = [inputs, done_by, blocked];
    families
        .into_iter()
        .filter(|f| !f.samples.is_empty())
        .collect()
}

/// Each job with a conditional step: its calls answered 304, and the
/// units they gave back, over its runs.
fn not_modified_families(reports: &[CredentialReport]) -> Vec<Family> {
    let mut calls = Family::new(
        "portion_not_modified_total",
        "A job's calls answered 304 (not modified), over its runs.",
        None,
    );
    let mut saved = Family::new(
        "portion_not_modified_saved",
        "Units a job's calls answered 304 gave back, per pool, over its runs.",
        Some(MetricUnit::Units),
    );
    for r in reports {
        for (job, n) in &r.not_modified {
            calls.push(&[("job", job.as_str())], n.calls);
            for (pool, u) in &n.units_saved {
                saved.push(&[("job", job.as_str()), ("pool", pool.as_str())], *u);
            }
        }
    }
    // (no family at all without a conditional step: the text stays as it was)
    [calls, saved]
        .into_iter()
        .filter(|f| !f.samples.is_empty())
        .collect()
}

/// Each share's reserve, used and what it can take, per window (no family
/// at all without shares: the text stays as it was).
fn share_families(reports: &[CredentialReport]) -> Vec<Family> {
    let mut families = [
        ("portion_share_reserve", "Units of the window kept for the share."),
        ("portion_share_used", "Units the share spent in the window now."),
        (
            "portion_share_available",
            "Units a charge by the share can take of the window now: its limit left, and the window's units left less the other shares' unused reserves.",
        ),
    ]
    .map(|(name, help)| Family::new(name, help, Some(MetricUnit::Units)));
    for r in reports {
        let names = policy_names(&r.usage);
        for s in &r.shares {
            // (the window's label, as the window families name it)
            let Some(name) = names.get(&(s.pool.as_str(), s.index)) else {
                continue;
            };
            let prefix = format!("{}-", s.pool);
            let window = name.strip_prefix(&prefix).unwrap_or(name);
            let labels = [
                ("credential", r.usage.credential.as_str()),
                ("pool", s.pool.as_str()),
                ("window", window),
                ("share", s.share.as_str()),
            ];
            for (family, v) in families.iter_mut().zip([s.reserve, s.used, s.available]) {
                family.push(&labels, v);
            }
        }
    }
    families
        .into_iter()
        .filter(|f| !f.samples.is_empty())
        .collect()
}

/// What each window family shows, and how to read it from a window.
type WindowField = (
    &'static str,
    &'static str,
    MetricUnit,
    fn(&WindowUsage, Micros) -> Value,
);

const WINDOW_FIELDS: [WindowField; 9] = [
    (
        "portion_window_limit",
        "The window's configured limit.",
        MetricUnit::Units,
        |w, _| w.window.limit.into(),
    ),
    (
        "portion_window_headroom",
        "Units the window keeps in reserve below its limit.",
        MetricUnit::Units,
        |w, _| w.window.headroom.into(),
    ),
    (
        "portion_window_budget",
        "Units the ledger hands out in the window: limit less headroom.",
        MetricUnit::Units,
        |w, _| w.budget.into(),
    ),
    (
        "portion_window_used",
        "Units spent in the window now.",
        MetricUnit::Units,
        |w, _| w.used.into(),
    ),
    (
        "portion_window_reserved",
        "Units of used charged as estimates whose settle has not come yet.",
        MetricUnit::Units,
        |w, _| w.reserved.into(),
    ),
    (
        "portion_window_others",
        "Units spent by others in the window, as the upstream's own count says (upstream_headers).",
        MetricUnit::Units,
        |w, _| w.others.into(),
    ),
    (
        "portion_window_remaining",
        "Units that may still be charged in the window now.",
        MetricUnit::Units,
        |w, _| w.remaining.into(),
    ),
    (
        "portion_window_length",
        "The window's length.",
        MetricUnit::Seconds,
        |w, _| Value::Float(w.window.per.as_secs_f64()),
    ),
    (
        "portion_window_next_free",
        "Seconds until units next free up in the window (0: nothing is spent).",
        MetricUnit::Seconds,
        |w, at| Value::Float(w.next_free_at.map_or(0.0, |t| (t - at).max(0) as f64 / 1e6)),
    ),
];

fn window_families(reports: &[CredentialReport]) -> Vec<Family> {
    let mut families: Vec<Family> = WINDOW_FIELDS
        .iter()
        .map(|(name, help, unit, _)| Family::new(name, help, Some(*unit)))
        .collect();
    let mut by_job = Family::new(
        "portion_window_used_by_job",
        "Units spent in the window now, by the job that spent them.",
        Some(MetricUnit::Units),
    );
    let mut by_endpoint = Family::new(
        "portion_window_used_by_endpoint",
        "Units spent in the window now, by endpoint.",
        Some(MetricUnit::Units),
    );
    for r in reports {
        for (pool, window, w) in windows(&r.usage) {
            let labels = [
                ("credential", r.usage.credential.as_str()),
                ("pool", pool),
                ("window", window.as_str()),
            ];
            for (family, (_, _, _, read)) in families.iter_mut().zip(WINDOW_FIELDS.iter()) {
                family.push(&labels, read(w, r.usage.at));
            }
            for (job, units) in &w.by_job {
                by_job.push(&[&labels[..], &[("job", job.as_str())]].concat(), *units);
            }
            for (endpoint, units) in &w.by_endpoint {
                let labels = [&labels[..], &[("endpoint", endpoint.as_str())]].concat();
                by_endpoint.push(&labels, *units);
            }
        }
    }
    families.push(by_job);
    families.push(by_endpoint);
    families
}

/// Each window of a credential with its `window` label: its length
/// (`24h`), made unique within the pool as the RateLimit policy names are
/// (`1h-30`, `1h-50-3`).
fn windows(u: &CredentialUsage) -> Vec<(&str, String, &WindowUsage)> {
    let names = policy_names(u);
    u.pools
        .iter()
        .flat_map(|p| {
            let names = &names;
            p.windows.iter().enumerate().map(move |(i, w)| {
                let name = &names[&(p.pool.as_str(), i)];
                let label = name
                    .strip_prefix(&format!("{}-", p.pool))
                    .unwrap_or(name)
                    .to_string();
                (p.pool.as_str(), label, w)
            })
        })
        .collect()
}
