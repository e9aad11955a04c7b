//! `portion status`: what is left, per credential, pool and window, read from
//! the store without spending; who spent it, when it frees up, a chart of
//! usage over each window, and where each job resumes. `--json` gives the
//! same in a stable shape (documented in the README), `--format
//! openmetrics` as metrics ([`openmetrics`]).
//!
//! Rooms: [`gather`] (reading the reports), [`text`], [`json`] and
//! [`openmetrics`] (rendering them).

mod gather;
mod json;
mod openmetrics;
mod text;

pub use self::gather::read;
use self::gather::{nothing_charged, select};
pub use self::json::{
    CredentialJson, JobJson, LogLostJson, PoolJson, RateLimitJson, ShareJson, StatusJson,
    TableJson, WindowJson, to_json,
};
pub use self::text::render;
use super::common::inputs::{self, InputsProgress};
use super::common::shares;

use super::context;
use super::table::{Paint, emit};
use crate::cli::{StatusArgs, StatusFormat};
use crate::config::Config;
use crate::history::LostLog;
use crate::ledger::{At, CredentialUsage, StoreLocation, WindowUsage};
use crate::runner::cursor::Cursor;
use crate::{ExitStatus, Result};
use tracing::warn;

/// One credential's report: its usage and its jobs' cursors.
pub struct CredentialReport {
    pub usage: CredentialUsage,
    /// The store forgot this credential's log (noticed from this host's history).
    pub lost: Option<LostLog>,
    /// What the operator can do about it, for this kind of store.
    pub lost_advice: &'static str,
    /// (job, its saved cursor, if any)
    pub jobs: Vec<(String, Option<Cursor>)>,
    /// Each job of inputs' progress, by job.
    pub inputs: std::collections::BTreeMap<String, inputs::InputsProgress>,
    /// Each job with a conditional step: its calls answered 304 and the
    /// units they gave back, over its runs.
    pub not_modified: std::collections::BTreeMap<String, crate::runner::job_state::NotModified>,
    /// Each job whose run waits for units inside itself now (`max_wait`):
    /// what for and until when.
    pub waiting: std::collections::BTreeMap<String, crate::runner::job_state::RunWaiting>,
    /// Each share's reserve, used and what it can take, per pool and
    /// window (empty without shares).
    pub shares: Vec<shares::ShareUsage>,
    /// What the upstream last announced of each pool's limits, by pool
    /// (`upstream_headers`), and when.
    pub upstream: std::collections::BTreeMap<String, crate::runner::upstream_limits::Announced>,
    /// Each window whose limit is the upstream's (`from: upstream`), with
    /// the limit learned and when it was seen (`None`: not yet).
    pub learned: Vec<(
        crate::config::LearnedWindow,
        Option<(u64, crate::ledger::Micros)>,
    )>,
    /// Each job with `output.postgres`: its table and row count.
    pub tables: std::collections::BTreeMap<String, TableJson>,
}

pub async fn execute(
    config: &Config,
    location: &StoreLocation,
    args: &StatusArgs,
) -> Result<ExitStatus> {
    let credentials = select(config, args.credential.as_deref())?;
    let at = At::StoreClock;
    // The file an embedded store is in, so that the report names it.
    let resolved = location
        .resolved()
        .map_err(|e| context::store_error(&context::store_name(location), e))?;
    let store_desc = context::store_name(&resolved);
    // Read only: an embedded store that does not exist yet is not created.
    let store = context::open_existing(&resolved).await?;
    let reports = match &store {
        Some(store) => {
            read(
                config,
                store,
                &store.identity(&context::store_name(location)),
                &credentials,
                at,
            )
            .await?
        }
        None => nothing_charged(config, &credentials),
    };
    let mut reports = reports;
    count_tables(config, &mut reports).await;
    warn_many_tags(&reports);
    let header = StoreHeader {
        store: store_desc,
        exists: store.is_some(),
    };
    match args.format() {
        StatusFormat::Json => {
            let json = serde_json::to_string_pretty(&to_json(&header, &reports))
                .expect("a report serializes");
            emit(&(json + "\n"))
        }
        StatusFormat::Openmetrics => emit(&openmetrics::render(&reports)),
        StatusFormat::Text => {
            let paint = Paint {
                on: context::colour_on_stdout(),
            };
            emit(&render(&header, &reports, paint))
        }
    }
}

/// Each job's PostgreSQL table and its rows of the job, one bounded
/// `count(*)` each (see [`crate::sink::postgres::rows_of_job`]).
async fn count_tables(config: &Config, reports: &mut [CredentialReport]) {
    for r in reports {
        for (name, _) in &r.jobs {
            let Some(job) = config.jobs.iter().find(|j| &j.name == name) else {
                continue;
            };
            let Some(spec) = job.postgres.clone() else {
                continue;
            };
            let server = super::common::rows::postgres_server(&spec);
            let table = spec.table_name();
            let job_name = name.clone();
            let counted = tokio::task::spawn_blocking(move || {
                crate::sink::postgres::rows_of_job(&spec, &job_name)
            })
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
            let (rows, unknown) = match counted {
                Ok(n) => (Some(n), None),
                Err(why) => (None, Some(why)),
            };
            r.tables.insert(
                name.clone(),
                TableJson {
                    table,
                    server,
                    rows,
                    unknown,
                },
            );
        }
    }
}

/// More distinct tags of one kind than this in a credential's windows is
/// warned about: each is a row of `status` per window and a series of its
/// OpenMetrics (300 `--job` tags made 1,279 lines).
pub const MANY_TAGS: usize = 100;

/// Warn (on stderr, whatever the format) about each credential whose
/// windows hold more than [`MANY_TAGS`] distinct job or endpoint tags.
fn warn_many_tags(reports: &[CredentialReport]) {
    type Tags = fn(&WindowUsage) -> &std::collections::BTreeMap<String, u64>;
    let kinds: [(&str, Tags); 2] = [("job", |w| &w.by_job), ("endpoint", |w| &w.by_endpoint)];
    for r in reports {
        for (kind, tags) in kinds {
            let distinct: std::collections::BTreeSet<&String> = r
                .usage
                .pools
                .iter()
                .flat_map(|p| &p.windows)
                .flat_map(|w| tags(w).keys())
                .collect();
            if distinct.len() > MANY_TAGS {
                warn!(
                    "{} distinct {kind} tags in the windows of credential {} (more than {MANY_TAGS}): each is a row of status and a series of its OpenMetrics; give --{kind} the kind of work, not a run or an item",
                    distinct.len(),
                    r.usage.credential
                );
            }
        }
    }
}

/// The store a report was read from.
pub struct StoreHeader {
    /// As messages name it: a Redis URL (password masked) or `embedded PATH`.
    pub store: String,
    /// False for an embedded store whose file does not exist yet.
    pub exists: bool,
}
