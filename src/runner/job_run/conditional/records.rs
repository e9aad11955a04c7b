//! What the store keeps for a job's conditional and incremental steps,
//! as records: one page's validators ([`Validators`], what they stand for
//! in [`ResultsHeld`]), an incremental value ([`Since`]), and the fields of the
//! job's one map they are kept under.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::config::redact;
pub(in crate::runner::job_run) use crate::sink::ResultsHeld;

/// One page's validators, as its last answer gave them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(in crate::runner::job_run) struct Validators {
    /// A hash of the request's URL (the secret masked): another URL, the
    /// same query in another order say, is another resource.
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified: Option<String>,
    /// The next page's token the page gave (`on_not_modified: continue`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// The id of the output the page was written to (none: kept before
    /// outputs had ids), so a run whose output was replaced since forgets
    /// what described the old one (`replaced.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out: Option<String>,
    /// What the page was written as (none: kept before validators said
    /// it, never sent): a validator is sent only while that is there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<ResultsHeld>,
}

/// An incremental step's value for a key, as the store keeps it (JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::runner::job_run) struct Since {
    pub value: String,
    /// The id of the output the walk that saw it wrote to (none: kept
    /// before outputs had ids, as the bare value): a run whose output was
    /// replaced since forgets it and asks from the start (`replaced.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out: Option<String>,
}

impl Since {
    /// A stored value: this JSON, or a bare value kept before outputs had
    /// ids.
    pub(super) fn parse(text: String) -> Self {
        serde_json::from_str(&text).unwrap_or(Since {
            value: text,
            out: None,
        })
    }

    pub(super) fn text(&self) -> String {
        serde_json::to_string(self).expect("values always serialize")
    }
}

/// What the store holds for a job's conditional and incremental steps.
#[derive(Default)]
pub(super) struct Kept {
    /// By [`page_field`].
    pub(super) pages: HashMap<String, Validators>,
    /// By [`place_field`]: the id each place's output had at its last run.
    pub(super) places: HashMap<String, String>,
    /// The id of this run's output, which the validators it keeps name.
    pub(super) output: Option<String>,
    /// Whether the store's map was read (else nothing is compared).
    pub(super) read: bool,
    /// By [`since_field`]: the value the next walk sends.
    pub(super) since: HashMap<String, Since>,
    /// By [`since_field`]: the largest value this run's walk has seen.
    pub(super) seen: HashMap<String, String>,
    /// By [`since_field`]: walks whose last page answered 304 (the pages
    /// after it keep their validators).
    pub(super) unchanged: HashSet<String>,
    /// By [`page_field`]: the validators of walks in progress, written to
    /// the store when the walk ends ("": forget), not before: a walk cut
    /// by a kill or a stop keeps none of its own, so the next run asks
    /// its pages in full (a page written whose cursor was not would
    /// otherwise answer 304 and end the walk, its later pages skipped).
    pub(super) pending: HashMap<String, String>,
}

pub(super) fn page_field(key: &str, step: usize, page: u32) -> String {
    format!("page {step} {page} {key}")
}

/// A place that writes the job's output: this host and the configuration
/// file (which says where the outputs are).
pub(super) fn place_field(host: &str, config: &std::path::Path) -> String {
    format!("output {host} {}", config.display())
}

pub(super) fn since_field(key: &str, step: usize) -> String {
    format!("since {step} {key}")
}

/// The URL's identity, the secret masked first: a hash, so that neither
/// the URL nor the secret is kept.
pub(super) fn url_id(url: &reqwest::Url, secret: &crate::config::Secret) -> String {
    let shown = redact(url.as_str(), &[secret]);
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(shown.as_bytes()))
}
