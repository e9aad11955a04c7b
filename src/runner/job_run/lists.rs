//! [`ValueLists`]: a fan-out's values on their way, apart from the walk.
//! What a page finds for the next step goes to the list the store keeps
//! of them ([`FoundValues`], `found.rs`), checked, in page order; a
//! resumed step's values are read back from the list the cursor points
//! into (`batch_at`), or the list the step before it is filling
//! (`found_in`); a list gone or unreadable means its values are LOST,
//! counted here and said. The run's loop ([`JobRun::load_lists`]) only
//! asks.

use std::cell::{Cell, RefCell};

use tracing::{error, warn};

use super::batches::{Batches, Values};
use super::found::{self, FoundValues};
use super::{JobRun, Position, describe_position};
use crate::Result;
use crate::config::{Credential, ForEach, Job, redact};
use crate::ledger::{JobStore, Store, StoreError};
use crate::page_scan;
use crate::runner::cursor::{BatchAt, Cursor, Place, ValueList, values_key};

/// The longest value a fan-out takes (bytes): an id, a name, a cursor, with
/// room to spare; one of tens of kilobytes is an upstream gone wrong.
const MAX_VALUE: usize = 8192;

/// A run's fan-out values in the store: where each list is, what a
/// page found, and the values lost (a list gone, a value unreadable).
pub(super) struct ValueLists<'a> {
    job: &'a Job,
    cred: &'a Credential,
    /// Values lost so far: the run ends as failed with them said.
    lost: Cell<u64>,
}

impl<'a> ValueLists<'a> {
    pub(super) fn new(job: &'a Job, cred: &'a Credential) -> Self {
        Self {
            job,
            cred,
            lost: Cell::new(0),
        }
    }

    /// Values lost so far.
    pub(super) fn lost(&self) -> u64 {
        self.lost.get()
    }

    fn lose(&self, n: u64) {
        self.lost.set(self.lost.get().saturating_add(n));
    }

    /// The next step's `for_each`, when it fans out over this one's pages.
    pub(super) fn next_for_each(&self, at: &Position<'_>) -> Option<&ForEach> {
        self.job
            .steps
            .get(at.step + 1)
            .and_then(|s| s.for_each.as_ref())
    }

    /// Keep the values of a page just written for the next step, if it
    /// fans out. A value that is empty, holds a control character (it
    /// could not go in a header), is `.` or `..` (in a URL's path it would
    /// move the request to another path) or carries the secret (it would
    /// reach the store) is left out, and so are those past the step's
    /// `max_values`; the run says how many. The page's values are read as
    /// they stream and held as one text, one a line (a usable value has no
    /// control character): about the page's own size, whatever their count.
    pub(super) async fn collect_for_next(
        &self,
        store: Option<&Store>,
        found: &mut FoundValues,
        at: &Position<'_>,
        page: u32,
        body: &[u8],
    ) -> Result<()> {
        let Some(f) = self.next_for_each(at) else {
            return Ok(());
        };
        let secret = &self.cred.secret;
        let (mut usable, mut count, mut kept) = (String::new(), 0u64, 0u64);
        let read = page_scan::each_value(body, &f.from, |v| {
            count += 1;
            // (a value longer than MAX_VALUE could never go out in a
            // request line: its batch would stop the job every run)
            if !v.is_empty()
                && v.len() <= MAX_VALUE
                && !v.chars().any(char::is_control)
                && !matches!(v, "." | "..")
                && redact(v, &[secret]) == v
            {
                usable.push_str(v);
                usable.push('\n');
                kept += 1;
            }
        });
        match read {
            Ok(0) => {}
            Ok(lost) => {
                self.lose(lost);
                warn!(
                    job = self.job.name,
                    "{}: {lost} value(s) at {} cannot be read as text (a lone surrogate escape): \
                     LOST for the next step, the others are kept",
                    at.describe(page),
                    f.from
                );
            }
            Err(e) => {
                // (the page check reads pages as this does: not reached
                // for a page that was written)
                self.lose(1);
                warn!(
                    job = self.job.name,
                    "{}: not JSON ({e}): no values for the next step, LOST",
                    at.describe(page)
                );
                return Ok(());
            }
        }
        let values = usable.split_terminator('\n');
        self.keep_found(store, found, at, page, values, count - kept)
            .await
    }

    /// Keep what page `page` found for the next step, after those kept
    /// already; say how many values were left out (`unusable` of them
    /// before, and those past the step's `max_values`).
    pub(super) async fn keep_found<'v>(
        &self,
        store: Option<&Store>,
        found: &mut FoundValues,
        at: &Position<'_>,
        page: u32,
        values: impl IntoIterator<Item = &'v str>,
        unusable: u64,
    ) -> Result<()> {
        let Some(f) = self.next_for_each(at) else {
            return Ok(());
        };
        let past_max = found.keep(store, values, f.max_values, at.run).await?;
        let left_out = unusable + past_max;
        if left_out > 0 {
            warn!(
                job = self.job.name,
                "{}: {left_out} value(s) at {} left out of the next step's fan-out \
                 (empty, a control character, `.` or `..`, over 8 KiB, the secret, or past its {} values: \
                 the previous step's most pages × for_each.per_page {})",
                at.describe(page),
                f.from,
                f.max_values,
                f.per_page
            );
        }
        Ok(())
    }

    /// The values not yet sent of `region`'s fan-out step `step` (at batch
    /// `page`), from the list `at` points into: read whole from a list of
    /// an older build (`Some(Some)`), checked only in a list read a batch
    /// at a time (`Some(None)`); `None` when that list is gone or another
    /// walk's: its `unsent` values are counted LOST, and said.
    pub(super) async fn load_list(
        &self,
        store: Option<&Store>,
        key: &str,
        step: usize,
        page: u32,
        at: &BatchAt,
        unsent: usize,
    ) -> std::result::Result<Option<Option<Vec<String>>>, StoreError> {
        let Some(store) = store else {
            return Ok(None);
        };
        let stored_as = values_key(&self.job.name, key, step);
        let end = (at.from as u64).saturating_add(at.left as u64);
        if at.mapped && found::holds(store, &stored_as, &at.list, end).await? {
            // (read a batch at a time as the batches go out)
            return Ok(Some(None));
        }
        let list = match at.mapped {
            true => None,
            false => store.load_cursor(&stored_as).await?,
        };
        match list.and_then(|t| serde_json::from_str::<ValueList>(&t).ok()) {
            Some(mut l)
                if l.id == at.list && at.from.checked_add(at.left) == Some(l.values.len()) =>
            {
                l.values.drain(..at.from);
                Ok(Some(Some(l.values)))
            }
            _ => {
                self.lose(unsent as u64);
                error!(
                    job = self.job.name,
                    "{}: the fan-out's {unsent} value(s) not yet sent are gone from the store (their list {stored_as} \
                     was deleted, or is another walk's: a store reset or replaced, a key removed by hand): \
                     LOST, the step is skipped for this region this round. The next run walks the region \
                     again from its first step, and finds and sends them afresh",
                    describe_position(key, step, page)
                );
                Ok(None)
            }
        }
    }
    /// Batch `k`'s values joined with `join`: held, or read from the
    /// fan-out's list (`None`: gone from the store since the run began).
    pub(super) async fn batch_text(
        &self,
        store: Option<&Store>,
        at: &Position<'_>,
        plan: &RefCell<Batches>,
        k: u32,
        join: &str,
    ) -> Result<Option<String>> {
        let in_list = {
            let plan = plan.borrow();
            if let Some(held) = plan.joined(k, join) {
                return Ok(Some(held));
            }
            plan.in_list(k).map(|(_, from, n)| (from, n))
        };
        let (Some(store), Some((from, n))) = (store, in_list) else {
            return Ok(None);
        };
        let name = values_key(&self.job.name, at.key, at.step);
        Ok(found::read(store, &name, from, n)
            .await?
            .map(|v| v.join(join)))
    }

    /// The fan-out's list went from the store while it ran (at batch
    /// `k`): its `left` values not yet sent are counted LOST; why the
    /// rest of the fan-out is skipped (the region ends there).
    pub(super) fn list_gone(&self, at: &Position<'_>, k: u32, left: usize) -> String {
        self.lose(left as u64);
        format!(
            "{}: the fan-out's {left} value(s) not yet sent are gone from the store \
             (its list {} was deleted or replaced while the run went on): LOST",
            at.describe(k),
            values_key(&self.job.name, at.key, at.step)
        )
    }

    /// The batches of a fan-out step resumed at `place` (`None`: it holds
    /// no values): held in the cursor, or in the list it points into (read
    /// whole only when its batches are cut afresh, the file's batch size
    /// changed with batches written ahead; read a batch at a time else).
    pub(super) async fn resumed_plan(
        &self,
        store: Option<&Store>,
        at: &Position<'_>,
        place: &Place,
        f: &ForEach,
    ) -> Result<Option<Batches>> {
        let (first, written) = (place.page, &place.written);
        let plan = |values, replaces| {
            let found = place.found_ahead.clone();
            let saved = place.batch_size;
            Batches::resume(values, first, written, found, saved, f.batch, replaces)
        };
        let list = match (&place.batch, &place.batch_at) {
            (Some(values), _) => return Ok(Some(plan(Values::Held(values.clone()), false))),
            (None, Some(list)) if list.mapped => list,
            _ => return Ok(None),
        };
        if !Batches::cut_afresh(place.batch_size, f.batch, first, written) {
            let (id, from, left) = (list.list.clone(), list.from, list.left);
            return Ok(Some(plan(Values::Listed { id, from, left }, false)));
        }
        let Some(store) = store else {
            return Ok(None);
        };
        let name = values_key(&self.job.name, at.key, at.step);
        let (from, left) = (list.from as u64, list.left as u64);
        Ok(found::read(store, &name, from, left)
            .await?
            .map(|values| plan(Values::Held(values), true)))
    }

    /// Where the values the pages of step `at.step` find for a fan-out
    /// after it go, resumed at `place` (`None`: from its start): the list
    /// in the store the cursor names (when it still holds what the cursor
    /// counts: else they are LOST, said, and the list begins afresh), the
    /// values a cursor of an older build holds (moved to the store now),
    /// or, without a store, memory.
    pub(super) async fn found_for(
        &self,
        store: Option<&Store>,
        at: &Position<'_>,
        place: Option<&Place>,
    ) -> Result<FoundValues> {
        let fans_out = (self.job.steps.get(at.step + 1)).is_some_and(|s| s.for_each.is_some());
        let held = place.map(|p| p.found.clone()).unwrap_or_default();
        let Some(store) = store.filter(|_| fans_out) else {
            return Ok(FoundValues::held(held));
        };
        let name = values_key(&self.job.name, at.key, at.step + 1);
        if let Some(list) = place.and_then(|p| p.found_in.as_ref()) {
            if found::holds(store, &name, &list.list, list.count).await? {
                return Ok(FoundValues::resumed(name, list));
            }
            self.lose(list.count);
            error!(
                job = self.job.name,
                "{}: the {} value(s) the step's pages written so far found for the next step are gone \
                 from the store (their list {name} was deleted, or is another walk's): LOST; the pages \
                 still to walk fill a list afresh",
                at.describe(place.map_or(0, |p| p.page)),
                list.count
            );
        }
        let mut found = FoundValues::listed(name);
        if !held.is_empty() {
            let values = held.iter().map(String::as_str);
            found.keep(Some(store), values, u64::MAX, at.run).await?;
        }
        Ok(found)
    }
}

impl JobRun<'_> {
    /// The values not yet sent of each fan-out the cursor is inside of
    /// (its region's and those ahead), from the lists they point into
    /// (`batch_at`). A store error is one as the cursor's own: the store
    /// unreachable follows the job's store-error policy (fail_closed stops
    /// the run, 69; else it runs unmetered from its first region, the
    /// saved cursor left as it is), any other stops the run. A list gone,
    /// or another walk's, cannot say the values: they are LOST (the run
    /// exits 1) and that fan-out is skipped for its region this round.
    pub(super) async fn load_lists(&mut self, cursor: &mut Cursor) -> Result<()> {
        let here = (
            &cursor.key,
            cursor.place.step,
            cursor.place.page,
            &cursor.place.written,
        );
        let mut spots = vec![(here, cursor.place.batch_size, cursor.place.batch_at.clone())];
        for a in &cursor.ahead {
            let here = (&a.key, a.place.step, a.place.page, &a.place.written);
            spots.push((here, a.place.batch_size, a.place.batch_at.clone()));
        }
        let mut loaded = Vec::new();
        for ((key, step, page, written), size, at) in spots {
            let Some(at) = at else {
                loaded.push(None);
                continue;
            };
            let unsent = unsent(&at, page, written, size);
            match (self.lists)
                .load_list(self.meter.store(), key, step, page, &at, unsent)
                .await
            {
                Ok(values) => loaded.push(Some(values)),
                Err(StoreError::Unavailable(e)) => {
                    self.store_unreachable_at_start(&e)?;
                    *cursor = Cursor::default();
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
        }
        let mut loaded = loaded.into_iter();
        let mut put = |batch: &mut Option<Vec<String>>, at: &mut Option<Box<BatchAt>>| match loaded
            .next()
            .flatten()
        {
            // (an older build's list: held from now on, and listed anew)
            Some(Some(Some(values))) => (*batch, *at) = (Some(values), None),
            // (none left to send: the step ends at once, its loss said)
            Some(None) => (*batch, *at) = (Some(Vec::new()), None),
            Some(Some(None)) | None => {}
        };
        put(&mut cursor.place.batch, &mut cursor.place.batch_at);
        for a in &mut cursor.ahead {
            put(&mut a.place.batch, &mut a.place.batch_at);
        }
        Ok(())
    }
}

/// How many of the values `at` says are left were not sent: those of the
/// batches after `page` written ahead (`written`, in batches of `size`)
/// were.
fn unsent(at: &BatchAt, page: u32, written: &[u32], size: Option<u32>) -> usize {
    let size = size.unwrap_or(1).max(1) as usize;
    let sent: usize = (written.iter())
        .filter(|&&k| k > page)
        .map(|&k| {
            let from = (k - page) as usize * size;
            at.left.saturating_sub(from).min(size)
        })
        .sum();
    at.left.saturating_sub(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_of_batches_written_ahead_are_not_counted_unsent() {
        let at = |left| BatchAt {
            list: "L".into(),
            from: 0,
            left,
            mapped: true,
        };
        // From batch 2, in batches of 4: 3 and 5 (the last, 2 values) written.
        assert_eq!(unsent(&at(14), 2, &[3, 5], Some(4)), 14 - 4 - 2);
        assert_eq!(unsent(&at(14), 2, &[], None), 14);
        // Numbers that do not fit count nothing.
        assert_eq!(unsent(&at(5), 2, &[1, 2, 9], Some(4)), 5);
    }
}
