//! A job's steps: one request template each, with what the configuration
//! says about it (its endpoint's cost, pagination, a fan-out, settled costs,
//! conditional and incremental requests), validated into typed values.

use super::{JsonTemplate, Placeholder, StorePolicy, Template};
use crate::ledger::PoolCost;

/// One request template of a job, with its endpoint's cost resolved against
/// the job's credential.
#[derive(Debug)]
pub struct Step {
    pub endpoint: String,
    pub cost: Vec<PoolCost>,
    pub on_store_error: StorePolicy,
    pub method: reqwest::Method,
    pub url: Template,
    pub query: Vec<(String, Template)>,
    pub headers: Vec<(String, Template)>,
    /// The JSON body of a POST or PUT, its strings templates.
    pub body: Option<JsonTemplate>,
    pub paginate: Option<Paginate>,
    /// A fan-out step: one request per batch of the previous step's values.
    pub for_each: Option<ForEach>,
    /// The pools whose cost is an estimate, settled from the response.
    pub settle: Vec<SettledCost>,
    /// `conditional: true`: each page's validators kept and sent back.
    pub conditional: Option<ConditionalRequests>,
    /// `incremental`: only what changed since the last complete walk.
    pub incremental: Option<Incremental>,
    /// The endpoint's `not_modified`: what a call answered 304 costs in
    /// each of its pools (none: the full cost).
    pub not_modified: Option<u64>,
}

/// `conditional: true` on a step (README, "Conditional requests").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionalRequests {
    /// `on_not_modified: continue`: a 304 page walks on with the token
    /// its last answer gave, instead of ending the step.
    pub walk_on: bool,
}

/// `incremental: { from, param, initial }` on a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incremental {
    /// A JSON pointer, `*` matching every element of an array.
    pub from: String,
    /// The query parameter that carries the largest value seen.
    pub param: String,
    /// Sent before any value was seen (none: nothing sent then).
    pub initial: Option<String>,
}

/// A pool's cost reserved as an estimate before the call and settled to
/// the actual that the response reports (`{estimate, actual}`).
#[derive(Clone, Debug)]
pub struct SettledCost {
    pub pool: String,
    pub estimate: u64,
    pub actual: ActualFrom,
}

/// Where a response says what a call actually cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActualFrom {
    /// A number at a JSON pointer into the body.
    Pointer(String),
    /// A number in a header (its name in lower case).
    Header(String),
}

impl Step {
    /// Whether its request uses placeholder `p` (URL, query, headers or
    /// body).
    pub fn uses(&self, p: Placeholder) -> bool {
        self.url.uses(p)
            || self.query.iter().any(|(_, t)| t.uses(p))
            || self.headers.iter().any(|(_, t)| t.uses(p))
            || self.body.as_ref().is_some_and(|b| b.uses(p))
    }

    /// Whether its request depends on the work key (`{region}`, `{key}` or
    /// an `{input.NAME}` in its URL, query, headers or body): a refusal of
    /// its first page may then be that key's alone.
    pub fn uses_key(&self) -> bool {
        self.url.uses_key()
            || self.query.iter().any(|(_, t)| t.uses_key())
            || self.headers.iter().any(|(_, t)| t.uses_key())
            || self.body.as_ref().is_some_and(JsonTemplate::uses_key)
    }

    /// The `{input.NAME}` names its request uses (repeats kept).
    pub fn input_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.url.input_names().collect();
        for (_, t) in self.query.iter().chain(&self.headers) {
            names.extend(t.input_names());
        }
        if let Some(b) = &self.body {
            names.extend(b.input_names());
        }
        names
    }

    /// Pages one walk of this step fetches at most (a fan-out step does not
    /// paginate: see [`Step::max_requests`]).
    pub fn max_pages(&self) -> u32 {
        self.paginate.as_ref().map_or(1, |p| p.max_pages)
    }

    /// Requests this step sends at most per region (retries aside): its
    /// `max_pages`, or for a fan-out step one per batch of the most values
    /// it takes ([`ForEach::max_values`]). What dry-run plans with.
    pub fn max_requests(&self) -> u64 {
        match &self.for_each {
            Some(f) => f.max_values.div_ceil(u64::from(f.batch)),
            None => u64::from(self.max_pages()),
        }
    }
}

/// `for_each`: the step runs once per batch of the values found at `from`
/// in the previous step's pages (of the same region), in order, duplicates
/// dropped, numbers written as text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForEach {
    /// A JSON pointer whose `*` segments match every element of an array.
    pub from: String,
    /// Values per request (default 1).
    pub batch: u32,
    /// Between the values of a batch in `{batch}` (default ",").
    pub join: String,
    /// The most values one page of the previous step is taken to hold
    /// (default: `batch`): what "a full page" means to the planner.
    pub per_page: u32,
    /// The most values the step takes per region: the previous step's
    /// most requests times `per_page`. Values past it are left out, with
    /// a warning, so a run never sends more requests than dry-run planned.
    pub max_values: u64,
}

/// Pagination: how the next page is found, and how many pages at most.
#[derive(Clone, Debug)]
pub struct Paginate {
    pub kind: PageKind,
    pub max_pages: u32,
}

/// The ways APIs say where the next page is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PageKind {
    /// A token at a JSON pointer of the body, sent back in query `param`.
    Token { pointer: String, param: String },
    /// The RFC 8288 `Link` header's `rel="next"` URL.
    Link,
    /// A URL at a JSON pointer of the body.
    NextUrl { pointer: String },
    /// Query `param` counts pages from `start`; the walk ends on a page
    /// whose array at `until_empty` is empty.
    Page {
        param: String,
        start: u64,
        until_empty: String,
    },
    /// Query `param` is an offset from 0, `size` more on each page; the
    /// walk ends as for [`PageKind::Page`].
    Offset {
        param: String,
        size: u64,
        until_empty: String,
    },
}

impl PageKind {
    /// The JSON pointer whose value the runner reads from each page.
    pub fn pointer(&self) -> Option<&str> {
        match self {
            Self::Token { pointer, .. } | Self::NextUrl { pointer } => Some(pointer),
            Self::Page { until_empty, .. } | Self::Offset { until_empty, .. } => Some(until_empty),
            Self::Link => None,
        }
    }
}

impl std::fmt::Display for PageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Token { pointer, param } => write!(f, "token {pointer} → {param}"),
            Self::Link => write!(f, "Link rel=next"),
            Self::NextUrl { pointer } => write!(f, "next URL at {pointer}"),
            Self::Page {
                param,
                start,
                until_empty,
            } => write!(f, "{param}={start}, +1 until {until_empty} is empty"),
            Self::Offset {
                param,
                size,
                until_empty,
            } => write!(f, "{param}=0, +{size} until {until_empty} is empty"),
        }
    }
}
