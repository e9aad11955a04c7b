//! Spending less (issue 27): a `conditional` step's validators (`ETag`,
//! `Last-Modified`) kept per key, step and page and sent back, so an
//! unchanged page answers 304 and costs the endpoint's `not_modified`; an
//! `incremental` step's largest value at its pointer, per key, sent as its
//! parameter. Both live in one map of the job's in the store, so every
//! host shares them; read once when a run starts (the run lock makes it
//! the only writer), written as pages are.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};
use tracing::warn;

use super::{JobRun, Position};
use crate::config::{Fill, Incremental, Job, Step, redact};
use crate::ledger::{Ledger, StoreError};
use crate::upstream::paginate::Next;

/// The store's name of a job's map of validators and incremental values.
pub(crate) fn conditional_map(job: &Job) -> String {
    format!("{}:conditional", job.name)
}

/// The store's name of a job's counts of calls answered 304, over its runs.
pub(crate) fn not_modified_map(job: &Job) -> String {
    format!("{}:not_modified", job.name)
}

/// One page's validators, as its last answer gave them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Validators {
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
    pub held: Option<Held>,
}

/// Where a page's results are, which its validators stand for: its file
/// in the job's folder, and the key of its first row in the table.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Held {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row: Option<String>,
}

/// An incremental step's value for a key, as the store keeps it (JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Since {
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
    fn parse(text: String) -> Self {
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
    seen: HashMap<String, String>,
    /// By [`since_field`]: walks whose last page answered 304 (the pages
    /// after it keep their validators).
    unchanged: HashSet<String>,
    /// By [`page_field`]: the validators of walks in progress, written to
    /// the store when the walk ends ("": forget), not before: a walk cut
    /// by a kill or a stop keeps none of its own, so the next run asks
    /// its pages in full (a page written whose cursor was not would
    /// otherwise answer 304 and end the walk, its later pages skipped).
    pending: HashMap<String, String>,
}

fn page_field(key: &str, step: usize, page: u32) -> String {
    format!("page {step} {page} {key}")
}

/// A place that writes the job's output: this host and the configuration
/// file (which says where the outputs are).
pub(super) fn place_field(host: &str, config: &std::path::Path) -> String {
    format!("output {host} {}", config.display())
}

fn since_field(key: &str, step: usize) -> String {
    format!("since {step} {key}")
}

/// The URL's identity, the secret masked first: a hash, so that neither
/// the URL nor the secret is kept.
pub(super) fn url_id(url: &reqwest::Url, secret: &crate::config::Secret) -> String {
    let shown = redact(url.as_str(), &[secret]);
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(shown.as_bytes()))
}

impl JobRun<'_> {
    /// Whether the job has a step that keeps anything in the map.
    pub(super) fn keeps(&self) -> bool {
        self.job
            .steps
            .iter()
            .any(|s| s.conditional.is_some() || s.incremental.is_some())
    }

    /// Read what the store keeps for the job's conditional and incremental
    /// steps (unreachable: nothing, said; the run asks unconditionally).
    pub(super) async fn load_kept(&self) {
        let Some(store) = self.meter.store().filter(|_| self.keeps()) else {
            return;
        };
        let entries = match store.map_read(&conditional_map(self.job)).await {
            Ok(e) => e,
            Err(e) => {
                warn!(
                    job = self.job.name,
                    "cannot read the validators and incremental values ({e}): every request of this run asks in full"
                );
                return;
            }
        };
        let mut kept = self.kept.borrow_mut();
        kept.read = true;
        for (field, value) in entries {
            if field.starts_with("output ") && !value.is_empty() {
                kept.places.insert(field, value);
            } else if field.starts_with("page ") {
                if let Ok(v) = serde_json::from_str(&value) {
                    kept.pages.insert(field, v);
                }
            } else if field.starts_with("since ") && !value.is_empty() {
                // (a value kept before values were bounded would make every
                // request of its key too long to send: dropped, said)
                let since = Since::parse(value);
                if since.value.len() > MAX_SINCE {
                    warn!(
                        job = self.job.name,
                        "the incremental value kept for {field} is longer than {MAX_SINCE} bytes: dropped, its walk asks from its initial value"
                    );
                    continue;
                }
                kept.since.insert(field, since);
            }
        }
    }

    /// The validators to send with `url`, the page at `fill`: those its
    /// last answer gave, when it was asked at this same URL.
    pub(super) fn validators(
        &self,
        step: &Step,
        fill: &Fill<'_>,
        url: &reqwest::Url,
    ) -> Option<Validators> {
        step.conditional.as_ref()?;
        let v = {
            let kept = self.kept.borrow();
            let v = kept
                .pages
                .get(&page_field(fill.region, fill.step, fill.page))?;
            (v.url == url_id(url, fill.secret)).then(|| v.clone())?
        };
        if !self.still_held(&v) {
            let mut report = self.report.borrow_mut();
            if report.validators_lost == 0 {
                warn!(
                    job = self.job.name,
                    "what a page's kept validators stand for is gone (its page file deleted, its rows dropped or \
                     deleted, or another table named): such pages are asked in full, not conditionally"
                );
            }
            report.validators_lost += 1;
            return None;
        }
        Some(v)
    }

    /// Whether what `v` stands for is still there: the page's file in the
    /// job's folder, its rows in the table the job writes now. A validator
    /// sent for a page whose file was deleted, or whose rows were dropped,
    /// deleted or are in a table the job no longer writes, would be
    /// answered 304 and leave the output without them for good.
    fn still_held(&self, v: &Validators) -> bool {
        // (a page another host wrote, to its own output, cannot be looked
        // for here: its validators are that output's, shared as before)
        let here = self.kept.borrow().output.clone();
        if v.out.is_some() && here.is_some() && v.out != here {
            return true;
        }
        let Some(held) = &v.held else { return false };
        let file = match (&self.job.output, &held.file) {
            (Some(dir), Some(file)) => dir.join(file).is_file(),
            (Some(_), None) => false,
            (None, _) => true,
        };
        file && held.row.as_ref().is_none_or(|k| self.has_row(k))
    }

    /// Keep a page's validators once it is written, for the store when
    /// the walk ends ([`Kept::pending`]). A value that holds the secret is
    /// not kept.
    pub(super) fn keep_validators(
        &self,
        step: &Step,
        fill: &Fill<'_>,
        url: &reqwest::Url,
        (etag, modified): (Option<String>, Option<String>),
        next: Option<&str>,
        held: Held,
    ) {
        if step.conditional.is_none() {
            return;
        }
        // (in any encoding the masker knows: percent-encoded in a next
        // link, JSON-escaped, base64)
        let masker = crate::config::Masker::new(&[fill.secret]);
        let clean = |v: Option<String>| v.filter(|v| masker.find(v.as_bytes(), 0).is_none());
        let (etag, modified) = (clean(etag), clean(modified));
        let field = page_field(fill.region, fill.step, fill.page);
        self.kept
            .borrow_mut()
            .unchanged
            .remove(&since_field(fill.region, fill.step));
        if etag.is_none() && modified.is_none() {
            // (nothing to send back: an older entry would only be stale)
            let mut kept = self.kept.borrow_mut();
            if kept.pages.remove(&field).is_some() {
                kept.pending.insert(field, String::new());
            }
            return;
        }
        let mut kept = self.kept.borrow_mut();
        let v = Validators {
            url: url_id(url, fill.secret),
            etag,
            modified,
            next: clean(next.map(str::to_string)),
            out: kept.output.clone(),
            held: Some(held),
        };
        let text = serde_json::to_string(&v).expect("validators always serialize");
        kept.pages.insert(field.clone(), v);
        kept.pending.insert(field, text);
    }

    /// A page answered 304: what the walk does next. By default the step
    /// ends (its first page unchanged, nothing is new); with
    /// `on_not_modified: continue` it follows the token the page's last
    /// answer gave.
    pub(super) fn unchanged(&self, step: &Step, fill: &Fill<'_>) -> Next {
        let mut kept = self.kept.borrow_mut();
        kept.unchanged.insert(since_field(fill.region, fill.step));
        let walk_on = step.conditional.as_ref().is_some_and(|c| c.walk_on);
        let next = kept
            .pages
            .get(&page_field(fill.region, fill.step, fill.page))
            .and_then(|v| v.next.clone())
            .filter(|_| walk_on);
        match next {
            Some(t) => Next::Follow(t),
            None => Next::End(None),
        }
    }

    /// The validators of the walk of `at`'s key and step that ended, to
    /// the store.
    async fn keep_pending(&self, at: &Position<'_>) {
        let prefix = format!("page {} ", at.step);
        let mine = |f: &String| {
            f.strip_prefix(&prefix)
                .and_then(|rest| rest.split_once(' '))
                .is_some_and(|(_, k)| k == at.key)
        };
        let fields: Vec<(String, String)> = {
            let mut kept = self.kept.borrow_mut();
            let fields: Vec<String> = kept.pending.keys().filter(|f| mine(f)).cloned().collect();
            fields
                .into_iter()
                .filter_map(|f| kept.pending.remove_entry(&f))
                .collect()
        };
        let fields: Vec<(String, String)> = fields.into_iter().collect();
        self.put_kept(&fields).await;
    }

    /// The validators of pages past `last`, where a walk of a step ended
    /// on a page written, are of an older walk: forgotten (the map holds
    /// the last walk's only).
    async fn forget_past(&self, at: &Position<'_>, last: u32) {
        let stale: Vec<String> = {
            let mut kept = self.kept.borrow_mut();
            let prefix = format!("page {} ", at.step);
            let stale: Vec<String> = kept
                .pages
                .keys()
                .filter(|f| {
                    f.strip_prefix(&prefix)
                        .and_then(|rest| rest.split_once(' '))
                        .is_some_and(|(p, k)| {
                            k == at.key && p.parse::<u32>().is_ok_and(|p| p > last)
                        })
                })
                .cloned()
                .collect();
            for f in &stale {
                kept.pages.remove(f);
            }
            stale
        };
        let stale: Vec<(String, String)> = stale.into_iter().map(|f| (f, String::new())).collect();
        self.put_kept(&stale).await;
    }

    /// Keep `entries` (each a field and its value, `""` forgotten) in
    /// the store in one round trip; whether it took them.
    pub(super) async fn put_kept(&self, entries: &[(String, String)]) -> bool {
        let Some(store) = self.meter.store() else {
            return false;
        };
        if let Err(e) = store.map_put(&conditional_map(self.job), entries).await {
            warn!(
                job = self.job.name,
                "cannot keep the validators and incremental values (the next run may ask in full): {e}"
            );
            return false;
        }
        true
    }

    /// The value an incremental step's requests of `key` carry: the
    /// largest its last complete walk saw, or the step's `initial`.
    pub(super) fn since(&self, step: &Step, key: &str, at_step: usize) -> Option<(String, String)> {
        let inc = step.incremental.as_ref()?;
        let kept = self.kept.borrow();
        let value = kept
            .since
            .get(&since_field(key, at_step))
            .map(|s| s.value.clone())
            .or_else(|| inc.initial.clone())?;
        Some((inc.param.clone(), value))
    }

    /// A page of an incremental step written: the largest value at its
    /// pointer, kept for the end of the walk. A value is kept only if it
    /// can be sent back: at most [`MAX_SINCE`] bytes, of the key's one kind
    /// (a time, a number or text: the kind of the value kept first, else
    /// of `initial`, else of the first value seen); others are ignored
    /// with a warning, so one odd value never pins the parameter for good.
    pub(super) fn saw(&self, step: &Step, at: &Position<'_>, page: u32, body: &[u8]) {
        let Some(inc) = &step.incremental else { return };
        let Ok((values, _)) = crate::page_scan::values(body, &inc.from) else {
            return;
        };
        let masker = crate::config::Masker::new(&[&self.cred.secret]);
        let field = since_field(at.key, at.step);
        let mut kind = {
            let kept = self.kept.borrow();
            kept.since
                .get(&field)
                .map(|s| s.value.as_str())
                .or(kept.seen.get(&field).map(String::as_str))
                .or(inc.initial.as_deref())
                .map(Kind::of)
        };
        // (no kind kept yet: the page's best, a time over a number over
        // text, so that one "N/A" first among times does not set it)
        if kind.is_none() {
            kind = values
                .iter()
                .filter(|v| !v.is_empty() && v.len() <= MAX_SINCE)
                .map(|v| Kind::of(v))
                .min_by_key(|k| *k as u8);
        }
        let (mut long, mut other) = (0u64, Vec::new());
        let mut largest: Option<String> = None;
        for v in values {
            if v.is_empty() || masker.find(v.as_bytes(), 0).is_some() {
                continue;
            }
            if v.len() > MAX_SINCE {
                long += 1;
                continue;
            }
            let of = Kind::of(&v);
            if of != *kind.get_or_insert(of) {
                other.push(v);
                continue;
            }
            if largest
                .as_ref()
                .is_none_or(|l| compare(&v, l) == Ordering::Greater)
            {
                largest = Some(v);
            }
        }
        let here = at.describe(page);
        if long > 0 {
            warn!(
                job = self.job.name,
                "{here}: {long} value(s) at the incremental pointer {} are longer than {MAX_SINCE} bytes: ignored, never kept (a request cannot carry them)",
                inc.from
            );
        }
        if let (Some(first), Some(k)) = (other.first(), kind) {
            warn!(
                job = self.job.name,
                "{here}: {} value(s) at the incremental pointer {} are not {}, the kind of the key's values (\"{}\", say): ignored",
                other.len(),
                inc.from,
                k.name(),
                crate::logging::cut(&crate::logging::printable(first), 40)
            );
        }
        let Some(largest) = largest else { return };
        let mut kept = self.kept.borrow_mut();
        let seen = kept.seen.entry(field).or_default();
        if seen.is_empty() || compare(&largest, seen) == Ordering::Greater {
            *seen = largest;
        }
    }

    /// The largest value the walk of `at`'s key and step has seen so far,
    /// kept with its cursor: a walk resumed by a later run starts from it,
    /// so the value the walk completes with is the walk's largest, not
    /// only its last run's.
    pub(super) fn walk_largest(&self, at: &Position<'_>) -> Option<String> {
        self.kept
            .borrow()
            .seen
            .get(&since_field(at.key, at.step))
            .cloned()
    }

    /// A walk of `at`'s key and step starts: at its first page, nothing
    /// seen (`None`); resumed, what its cursor kept.
    pub(super) fn walk_starts(&self, at: &Position<'_>, largest: Option<String>) {
        let field = since_field(at.key, at.step);
        let mut kept = self.kept.borrow_mut();
        match largest.filter(|v| v.len() <= MAX_SINCE) {
            Some(v) => kept.seen.insert(field, v),
            None => kept.seen.remove(&field),
        };
    }

    /// The walk of `key`'s incremental step is complete: the largest value
    /// it saw becomes the next walk's (never a smaller one). Only here: a
    /// stop mid-walk keeps the value the walk started with, so the next
    /// run asks again for all it had not written.
    /// Also its pages' validators go to the store and, unless its last
    /// page answered 304, those of pages past `last` are forgotten.
    /// `complete`: the walk reached the upstream's last page (or a 304
    /// that ends it).
    pub(super) async fn walk_complete(
        &self,
        step: &Step,
        at: &Position<'_>,
        last: u32,
        complete: bool,
    ) {
        let field = since_field(at.key, at.step);
        let unchanged = self.kept.borrow_mut().unchanged.remove(&field);
        if step.conditional.is_some() {
            self.keep_pending(at).await;
            if !unchanged {
                self.forget_past(at, last).await;
            }
        }
        let Some(Incremental { .. }) = &step.incremental else {
            return;
        };
        let advanced = {
            let mut kept = self.kept.borrow_mut();
            let Some(seen) = kept.seen.remove(&field) else {
                return;
            };
            // (a walk cut short, by `max_pages`, a token going in circles
            // or a next link that cannot be read, has not seen all that
            // changed: its value would skip the rest for good)
            if !complete {
                return;
            }
            match kept.since.get(&field) {
                Some(old) if compare(&seen, &old.value) != Ordering::Greater => None,
                _ => {
                    let since = Since {
                        value: seen,
                        out: kept.output.clone(),
                    };
                    kept.since.insert(field.clone(), since.clone());
                    Some(since.text())
                }
            }
        };
        if let Some(value) = advanced {
            self.put_kept(&[(field, value)]).await;
        }
    }

    /// Add this run's calls answered 304 and the units they gave back to
    /// the job's counts in the store (what `status` shows).
    pub(super) async fn count_not_modified(&self) -> Result<(), StoreError> {
        let (calls, saved) = {
            let r = self.report.borrow();
            (r.not_modified, r.units_saved.clone())
        };
        let Some(store) = self.meter.store().filter(|_| calls > 0) else {
            return Ok(());
        };
        let map = not_modified_map(self.job);
        let mut counts: BTreeMap<String, u64> = store
            .map_read(&map)
            .await?
            .into_iter()
            .filter_map(|(f, v)| Some((f, v.parse().ok()?)))
            .collect();
        *counts.entry("calls".into()).or_default() += calls;
        for (pool, n) in saved {
            *counts.entry(format!("units {pool}")).or_default() += n;
        }
        let counts: Vec<(String, String)> = counts
            .into_iter()
            .map(|(f, n)| (f, n.to_string()))
            .collect();
        store.map_put(&map, &counts).await
    }
}

/// The longest incremental value kept, in bytes: a longer one (a page
/// with a 70,000-character `updated_at`) would make every later request
/// too long to send.
pub(super) const MAX_SINCE: usize = 256;

/// The kind of an incremental value: one kind per key, as [`compare`]
/// orders values of one kind only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Time,
    Number,
    Text,
}

impl Kind {
    fn of(v: &str) -> Self {
        if chrono::DateTime::parse_from_rfc3339(v).is_ok() {
            Kind::Time
        } else if v.parse::<i128>().is_ok() || v.parse::<f64>().is_ok_and(f64::is_finite) {
            Kind::Number
        } else {
            Kind::Text
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Time => "a time",
            Kind::Number => "a number",
            Kind::Text => "text",
        }
    }
}

/// Two values at an incremental pointer: as times when both are RFC 3339,
/// as numbers when both are numbers, else as text.
pub(super) fn compare(a: &str, b: &str) -> Ordering {
    use chrono::DateTime;
    if let (Ok(x), Ok(y)) = (
        DateTime::parse_from_rfc3339(a),
        DateTime::parse_from_rfc3339(b),
    ) {
        return x.cmp(&y);
    }
    if let (Ok(x), Ok(y)) = (a.parse::<i128>(), b.parse::<i128>()) {
        return x.cmp(&y);
    }
    if let (Ok(x), Ok(y)) = (a.parse::<f64>(), b.parse::<f64>())
        && x.is_finite()
        && y.is_finite()
    {
        return x.partial_cmp(&y).unwrap_or(Ordering::Equal);
    }
    a.cmp(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_compare_as_times_numbers_or_text() {
        // (as text "2024-05-01T10:00:00+02:00" > "2024-05-01T09:30:00Z"; as times it is earlier)
        assert_eq!(
            compare("2024-05-01T10:00:00+02:00", "2024-05-01T09:30:00Z"),
            Ordering::Less
        );
        assert_eq!(compare("9", "10"), Ordering::Less);
        assert_eq!(compare("2.5", "10"), Ordering::Less);
        assert_eq!(compare("b", "a"), Ordering::Greater);
    }

    #[test]
    fn values_have_one_kind_each() {
        assert_eq!(Kind::of("2024-03-02T12:00:00-05:00"), Kind::Time);
        assert_eq!(Kind::of("12"), Kind::Number);
        assert_eq!(Kind::of("1.5e3"), Kind::Number);
        assert_eq!(Kind::of("N/A"), Kind::Text);
        assert_eq!(Kind::of("inf"), Kind::Text);
    }
}
