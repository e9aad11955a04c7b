//! Spending less: a `conditional` step's validators (`ETag`,
//! `Last-Modified`) kept per key, step and page and sent back, so an
//! unchanged page answers 304 and costs the endpoint's `not_modified`; an
//! `incremental` step's largest value at its pointer, per key, sent as its
//! parameter. Both live in one map of the job's in the store, so every
//! host shares them; read once when a run starts (the run lock makes it
//! the only writer), written as pages are.
//!
//! [`Conditional`] owns what the run holds of that map; the run hands it
//! the store where it reads or writes. Its records are in `records`, the
//! incremental values' rules in `incremental`, what an output replaced
//! since the last run forgets in `replaced`.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::BTreeMap;

use tracing::warn;

use super::Position;
use crate::config::{Fill, Incremental, Job, Secret, Step};
use crate::ledger::{Store, StoreError};
use crate::runner::job_state::{JobState, Map};
use crate::upstream::paginate::Next;

mod incremental;
mod records;
mod replaced;

pub(super) use self::incremental::MAX_SINCE;
use self::incremental::compare;
use self::records::{Kept, Since, page_field, since_field, url_id};
pub(super) use self::records::{ResultsHeld, Validators};

/// What a job keeps for its conditional and incremental steps, as this
/// run holds it.
pub(super) struct Conditional<'a> {
    job: &'a Job,
    /// The credential's secret: a value that holds it is never kept.
    secret: &'a Secret,
    kept: RefCell<Kept>,
}

/// The validators a page's request sends.
pub(super) enum Lookup {
    /// None kept for it (or not a conditional step, or another URL).
    None,
    /// Those kept for it, whose page is still there.
    Send(Validators),
    /// Some were kept, but what they stand for is gone: asked in full.
    Lost,
}

impl<'a> Conditional<'a> {
    pub(super) fn new(job: &'a Job, secret: &'a Secret) -> Self {
        Conditional {
            job,
            secret,
            kept: RefCell::default(),
        }
    }

    /// Whether the job has a step that keeps anything in the map.
    pub(super) fn keeps(&self) -> bool {
        self.job
            .steps
            .iter()
            .any(|s| s.conditional.is_some() || s.incremental.is_some())
    }

    /// Read what the store keeps for the job's conditional and incremental
    /// steps (unreachable: nothing, said; the run asks unconditionally).
    pub(super) async fn load(&self, store: Option<&Store>) {
        let Some(store) = store.filter(|_| self.keeps()) else {
            return;
        };
        let entries = match JobState::new(store, &self.job.name)
            .read(Map::Conditional)
            .await
        {
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
    /// last answer gave, when it was asked at this same URL, and only
    /// while what they stand for is there (`has_row`: whether the job's
    /// table holds a row of that key).
    pub(super) fn validators(
        &self,
        step: &Step,
        fill: &Fill<'_>,
        url: &reqwest::Url,
        holds: impl Fn(&ResultsHeld) -> bool,
    ) -> Lookup {
        if step.conditional.is_none() {
            return Lookup::None;
        }
        let v = {
            let kept = self.kept.borrow();
            let Some(v) = kept
                .pages
                .get(&page_field(fill.region, fill.step, fill.page))
            else {
                return Lookup::None;
            };
            if v.url != url_id(url, fill.secret) {
                return Lookup::None;
            }
            v.clone()
        };
        if self.still_held(&v, holds) {
            Lookup::Send(v)
        } else {
            Lookup::Lost
        }
    }

    /// Whether what `v` stands for is still there: the page's file in the
    /// job's folder, its rows in the table the job writes now. A validator
    /// sent for a page whose file was deleted, or whose rows were dropped,
    /// deleted or are in a table the job no longer writes, would be
    /// answered 304 and leave the output without them for good.
    fn still_held(&self, v: &Validators, holds: impl Fn(&ResultsHeld) -> bool) -> bool {
        // (a page another host wrote, to its own output, cannot be looked
        // for here: its validators are that output's, shared as before)
        let here = self.kept.borrow().output.clone();
        if v.out.is_some() && here.is_some() && v.out != here {
            return true;
        }
        v.held.as_ref().is_some_and(holds)
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
        held: ResultsHeld,
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
    async fn keep_pending(&self, store: Option<&Store>, at: &Position<'_>) {
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
        self.put(store, &fields).await;
    }

    /// The validators of pages past `last`, where a walk of a step ended
    /// on a page written, are of an older walk: forgotten (the map holds
    /// the last walk's only).
    async fn forget_past(&self, store: Option<&Store>, at: &Position<'_>, last: u32) {
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
        self.put(store, &stale).await;
    }

    /// Keep `entries` (each a field and its value, `""` forgotten) in
    /// the store in one round trip; whether it took them.
    pub(super) async fn put(&self, store: Option<&Store>, entries: &[(String, String)]) -> bool {
        let Some(store) = store else {
            return false;
        };
        if let Err(e) = (JobState::new(store, &self.job.name))
            .put(Map::Conditional, entries)
            .await
        {
            warn!(
                job = self.job.name,
                "cannot keep the validators and incremental values (the next run may ask in full): {e}"
            );
            return false;
        }
        true
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
        store: Option<&Store>,
        step: &Step,
        at: &Position<'_>,
        last: u32,
        complete: bool,
    ) {
        let field = since_field(at.key, at.step);
        let unchanged = self.kept.borrow_mut().unchanged.remove(&field);
        if step.conditional.is_some() {
            self.keep_pending(store, at).await;
            if !unchanged {
                self.forget_past(store, at, last).await;
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
            self.put(store, &[(field, value)]).await;
        }
    }

    /// Add this run's `calls` answered 304 and the units they gave back
    /// (`saved`, by pool) to the job's counts in the store (what `status`
    /// shows).
    pub(super) async fn count_not_modified(
        &self,
        store: Option<&Store>,
        calls: u64,
        saved: BTreeMap<String, u64>,
    ) -> Result<(), StoreError> {
        let Some(store) = store.filter(|_| calls > 0) else {
            return Ok(());
        };
        (JobState::new(store, &self.job.name))
            .add_not_modified(calls, &saved)
            .await
    }
}
