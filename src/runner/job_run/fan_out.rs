//! Fan-out steps (`for_each`): a step that runs once per batch of the
//! values the previous step's pages hold at a JSON pointer (`*` for every
//! element of an array), for the same region. It lives apart from the
//! page walk of `mod.rs` because its unit of work is a batch, not a page:
//!
//! * While the previous step walks its pages, each page written is read
//!   for the values ([`page_scan::each_value`]); they go to a list in the
//!   store as the page is written, in order, duplicates dropped, in
//!   bounded chunks ([`FoundValues`], `found.rs`): the cursor saved with every
//!   page says the list and how many it holds, never the values, so a
//!   killed run loses none and memory does not grow with their count.
//! * When that step ends, that list is the fan-out's list of values to
//!   send, emptied once the fan-out is done; after each batch the cursor
//!   keeps its position in it (`batch_at`), and each batch's values are
//!   read from it as the batch is sent. A stop (a rejection, a signal) or
//!   a kill resumes at the batch in hand, from the store, on any host: no
//!   page already written is fetched again. Without a store (a run
//!   unmetered) the values stay in memory, as the cursor does.
//!
//! Every batch is one request, charged and written as any page is. With
//! `concurrency` above 1 a region's batches go out side by side, within
//! the run's one limit of requests in flight; the cursor then also keeps
//! the batches written past the earliest one not yet written
//! ([`super::batches`]).
//!
//! A fan-out followed by another goes side by side too. Its batches'
//! pages are written in any order, but the next step must get their
//! values in page order, as one at a time would: each batch's values are
//! read from its page on their own, and join [`FoundValues`] only once every
//! batch before it is written; until then they wait in [`Batches`], and in
//! the cursor saved with every batch (`found_ahead`), so a stop or a kill
//! loses none of them. What waits there is bounded by the batches written
//! while the earliest one not written is in flight (each one page's
//! values): what the other `concurrency - 1` places send within that one
//! request's time (its timeout and retries at most). The cursor, not the page files, because a run on
//! another host resumes from the store alone and the folder's pages may
//! be taken away once written.
//!
//! A page is read for values as [`page_scan`] reads any page: streaming,
//! only what the pointer names, so a page costs about its own size. A
//! value that cannot be read (a lone surrogate escape) is left out and
//! counted as lost ([`super::super::report::JobReport::values_lost`]): the
//! run does not end as "finished" with 0 having lost it.

use std::cell::RefCell;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tracing::{error, warn};

use super::batches::{Batches, Values};
use super::found::{self, FoundValues};
use super::round::Slot;
use super::{JobRun, Position, Walk, Walker};
use crate::Result;
use crate::config::{ForEach, Job, Step};
use crate::runner::cursor::{BatchAt, Place, values_key};
use crate::upstream::paginate::Next;

impl JobRun<'_> {
    /// Step `at.step` of `at.key` is done: the cursor moves on
    /// ([`Self::after_step`]). Once it is saved, the values seen of the
    /// list the step filled for a fan-out after it are forgotten: that
    /// list is only read from then on, and the store need not keep an
    /// index of every value through the fan-out. Whether it was saved.
    pub(super) async fn step_done(&self, w: &mut Walker, at: &Position<'_>) -> bool {
        let after = after_step(self.job, w, at);
        let saved = self.save(at.slot, after).await;
        if saved
            && self.lists.next_for_each(at).is_some()
            && let Some(store) = self.meter.store()
        {
            let list = values_key(&self.job.name, at.key, at.step + 1);
            if let Err(e) = found::forget_seen(store, &list).await {
                // (the fan-out's end forgets them)
                warn!(
                    job = self.job.name,
                    "{}: the values seen for the next step stay in the store for now ({e})",
                    at.describe(0)
                );
            }
        }
        saved
    }

    /// A fan-out step for one region (resumed at batch `page`): one
    /// request per batch of `plan` (`None` when the cursor that resumed it
    /// kept no values), the cursor saved after each. Up to `concurrency`
    /// batches go out side by side ([`Self::fan_out_side_by_side`]),
    /// whether or not a fan-out follows this one.
    pub(super) async fn fan_out(
        &self,
        w: &mut Walker,
        step: &Step,
        at: &Position<'_>,
        page: u32,
        plan: Option<Batches>,
    ) -> Result<Walk> {
        let f: &ForEach = step.for_each.as_ref().expect("a fan-out step");
        let Some(mut plan) = plan else {
            warn!(
                job = self.job.name,
                "{}: the saved cursor holds no values for this fan-out step (the file changed since it was saved?): \
                 it is skipped for this region this round",
                at.describe(page)
            );
            self.step_done(w, at).await;
            return Ok(Walk::Done);
        };
        let early = plan.take_early();
        if !early.is_empty() {
            let early = early.iter().map(String::as_str);
            (self.lists)
                .keep_found(self.meter.store(), &mut w.found, at, page, early, 0)
                .await?;
        }
        self.keep_list(at, &mut plan, &w.found).await;
        let plan = RefCell::new(plan);
        if self.job.concurrency > 1 {
            return self.fan_out_side_by_side(w, step, f, at, plan).await;
        }
        let todo = plan.borrow().todo();
        for k in todo {
            let Some(joined) = (self.lists)
                .batch_text(self.meter.store(), at, &plan, k, &f.join)
                .await?
            else {
                let why = self.lists.list_gone(at, k, plan.borrow().left());
                return Ok(self.give_up(at, &why).await);
            };
            let _permit = self.permit().await;
            let fill = at.fill(self.cred, self.job, k, &joined);
            // One at a time, batch `k` is the earliest not written: its
            // values go straight after those kept.
            match self
                .fetch_page(Some(&mut w.found), step, &fill, None, at, k)
                .await?
            {
                // Stopped: the cursor already points at this batch.
                None => return Ok(Walk::Stopped),
                Some(Next::Refused(why)) => return Ok(self.give_up(at, &why).await),
                Some(_) => {}
            }
            // Batches an earlier run wrote ahead of this one follow it.
            let in_row = plan.borrow_mut().mark_written(k, Vec::new());
            for (b, values) in in_row {
                let values = values.iter().map(String::as_str);
                (self.lists)
                    .keep_found(self.meter.store(), &mut w.found, at, b, values, 0)
                    .await?;
            }
            let resume = {
                let plan = plan.borrow();
                (!plan.is_done()).then(|| plan.cursor(at, &w.found))
            };
            if let Some(resume) = resume {
                self.save(at.slot, Slot::At(Box::new(resume))).await;
            }
        }
        let listed = plan.borrow().is_listed();
        self.fan_out_done(w, at, listed).await
    }

    /// The fan-out at `at` is done: the cursor moves on, and then the list
    /// of its values (`listed`: it has one) is forgotten, so the store keeps
    /// at most one list per region and fan-out step, and that one only
    /// while its walk is under way (or a run that stopped may resume it).
    /// Not while the saved cursor may still point into it.
    async fn fan_out_done(&self, w: &mut Walker, at: &Position<'_>, listed: bool) -> Result<Walk> {
        if self.step_done(w, at).await
            && listed
            && let Some(store) = self.meter.store()
        {
            let stored_as = values_key(&self.job.name, at.key, at.step);
            if let Err(e) = found::forget(store, &stored_as).await {
                // (the next walk of this step takes its place)
                warn!(
                    job = self.job.name,
                    "{}: the fan-out's values stay in the store for now ({e})",
                    at.describe(0)
                );
            }
        }
        Ok(Walk::Done)
    }

    /// Keep the values `plan` holds in memory in the store, once, as the
    /// list its cursors then point into (`batch_at`): after each batch the
    /// cursor saves a position, not every value not yet sent. Only a plan
    /// whose cursor holds its values itself (a run of an older build, or
    /// one without a store before) or whose values were cut afresh gets a
    /// list. In the last case the saved cursor still points into the list
    /// under the same key, so a cursor holding the values is saved first:
    /// a kill between the list's write and the next batch's cursor would
    /// otherwise leave it pointing at a list that is gone, its values
    /// lost. Without a list (a store that did not take it, or that cursor)
    /// the cursor keeps the values, as it did. `found`: what the step's
    /// written pages hold for a fan-out after it.
    async fn keep_list(&self, at: &Position<'_>, plan: &mut Batches, found: &FoundValues) {
        let values = plan.unlisted().filter(|v| !v.is_empty());
        let (Some(store), Some(values)) = (self.meter.store(), values) else {
            return;
        };
        if plan.replaces_list()
            && !self
                .save(at.slot, Slot::At(Box::new(plan.cursor(at, found))))
                .await
        {
            return;
        }
        let id = format!("r{}.{:016x}", at.run, rand::random::<u64>());
        let stored_as = values_key(&self.job.name, at.key, at.step);
        match found::write(store, &stored_as, &id, values).await {
            Ok(()) => plan.listed(id),
            Err(e) => warn!(
                job = self.job.name,
                "{}: the fan-out's values were not kept apart ({e}): the cursor holds them",
                at.describe(0)
            ),
        }
    }

    /// The batches of `plan` up to `concurrency` at once (the run's one
    /// limit, shared with the other regions: [`Self::permit`]), each
    /// charged before it is sent and written under its own number. A stop
    /// sends no new batch; those in flight finish and are written. What
    /// the walk found so far for a fan-out after this one is shared with
    /// the batches in flight while they run, one at a time.
    async fn fan_out_side_by_side(
        &self,
        w: &mut Walker,
        step: &Step,
        f: &ForEach,
        at: &Position<'_>,
        plan: RefCell<Batches>,
    ) -> Result<Walk> {
        let mut todo = plan.borrow().todo();
        let found = tokio::sync::Mutex::new(w.found.take());
        let mut running = FuturesUnordered::new();
        // Why the rest of the fan-out is skipped, once it is: no batch is
        // sent after, those in flight finish.
        let mut given_up = None;
        loop {
            while running.len() < self.job.concurrency
                && !self.report.borrow().stopping()
                && given_up.is_none()
            {
                let Some(k) = todo.next() else { break };
                running.push(self.send_batch(step, at, &plan, &found, k, &f.join));
            }
            // The first error ends the run at once (the batches in flight
            // are abandoned, their charges kept), as for regions.
            let Some(sent) = running.next().await else {
                break;
            };
            if let Some(why) = sent? {
                given_up.get_or_insert(why);
            }
        }
        drop(running);
        w.found = found.into_inner();
        if let Some(why) = given_up {
            return Ok(self.give_up(at, &why).await);
        }
        if !plan.borrow().is_done() {
            // Stopped: the cursor says the earliest batch not written and
            // those written after it (with what they found).
            return Ok(Walk::Stopped);
        }
        let listed = plan.borrow().is_listed();
        self.fan_out_done(w, at, listed).await
    }

    /// One batch of a fan-out side by side: wait for a place among the
    /// run's requests in flight, charge, send, write page `k`, then save
    /// the cursor with it (the place is held until then, so a kill redoes
    /// at most `concurrency` batches). What the page holds for a fan-out
    /// after this one joins `found` once the batches before it are all
    /// written (see [`Batches::mark_written`]): `found` is locked from
    /// then until the cursor is made, so the values join in batch order.
    /// Why the rest of the fan-out is to be skipped, if it is.
    async fn send_batch(
        &self,
        step: &Step,
        at: &Position<'_>,
        plan: &RefCell<Batches>,
        found: &tokio::sync::Mutex<FoundValues>,
        k: u32,
        join: &str,
    ) -> Result<Option<String>> {
        let _permit = self.permit().await;
        let Some(joined) = (self.lists)
            .batch_text(self.meter.store(), at, plan, k, join)
            .await?
        else {
            return Ok(Some(self.lists.list_gone(at, k, plan.borrow().left())));
        };
        let fill = at.fill(self.cred, self.job, k, &joined);
        // This batch's own values, apart until their turn.
        let mut own = FoundValues::default();
        match self
            .fetch_page(Some(&mut own), step, &fill, None, at, k)
            .await?
        {
            None => return Ok(None),
            Some(Next::Refused(why)) => return Ok(Some(why)),
            Some(_) => {}
        }
        let resume = {
            let mut found = found.lock().await;
            let in_row = plan.borrow_mut().mark_written(k, own.into_held());
            for (b, values) in in_row {
                let values = values.iter().map(String::as_str);
                (self.lists)
                    .keep_found(self.meter.store(), &mut found, at, b, values, 0)
                    .await?;
            }
            let plan = plan.borrow();
            (!plan.is_done()).then(|| plan.cursor(at, &found))
        };
        if let Some(resume) = resume {
            self.save(at.slot, Slot::At(Box::new(resume))).await;
        }
        Ok(None)
    }

    /// The rest of a region's fan-out skipped, its batches refused
    /// (`why`): one error naming it, the region ends (the cursor moves
    /// past it), and the next run starts it afresh.
    pub(super) async fn give_up(&self, at: &Position<'_>, why: &str) -> Walk {
        let fan_out = match at.key {
            "" => format!("step {}", at.step),
            key => format!("region {key} step {}", at.step),
        };
        error!(
            job = self.job.name,
            "{why}: the rest of {fan_out}'s fan-out is skipped and the region ends here \
             (the next run starts it afresh), the others go on"
        );
        self.save(at.slot, Slot::Done).await;
        Walk::Refused
    }
}

/// Where the next run starts once step `at.step` of `at.key` is
/// done: the next step (with the values found for it, if it fans out:
/// the list they are in, or the values themselves when held) or,
/// after the last step, the region served. The values also become the
/// walk's [`Walker::pending`].
fn after_step(job: &Job, w: &mut Walker, at: &Position<'_>) -> Slot {
    let found = w.found.take();
    match job.steps.get(at.step + 1) {
        Some(next) => {
            let mut c = at.cursor(Place {
                step: at.step + 1,
                ..Place::default()
            });
            if next.for_each.is_some() {
                let values = match (found.found_in(), found.into_held()) {
                    (Some(list), _) => {
                        let left = list.count as usize;
                        c.place.batch_at = Some(Box::new(BatchAt {
                            list: list.list.clone(),
                            from: 0,
                            left,
                            mapped: true,
                        }));
                        Values::Listed {
                            id: list.list,
                            from: 0,
                            left,
                        }
                    }
                    (None, values) => {
                        c.place.batch = Some(values.clone());
                        Values::Held(values)
                    }
                };
                w.pending = Some(values);
            }
            Slot::At(Box::new(c))
        }
        None => Slot::Done,
    }
}

#[cfg(test)]
mod tests {
    use crate::page_scan::values as values_at;

    #[test]
    fn stars_match_every_element_and_numbers_are_text() {
        let page = br#"{"items":[{"id":{"videoId":"a"}},{"id":{"videoId":7}},{"id":{}},
            {"id":{"videoId":["x"]}},{"id":{"videoId":1.5}}],"a/b":[["p","q"],["r"]]}"#;
        let at = |p: &str| values_at(page, p).unwrap().0;
        assert_eq!(at("/items/*/id/videoId"), ["a", "7", "1.5"]);
        assert_eq!(at("/items/1/id/videoId"), ["7"]);
        assert_eq!(at("/a~1b/*/*"), ["p", "q", "r"]);
        assert!(at("/items/*/nothing").is_empty());
        assert!(at("/items/9/id/videoId").is_empty());
        assert!(values_at(b"{", "/a").is_err());
    }
}
