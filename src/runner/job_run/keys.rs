//! The round's keys ([`Key`](crate::runner::Key): its regions) side by
//! side: up to the job's `concurrency` keys walked at once on this one task, started in round order (so the regions
//! served longest ago still go first), each walking its steps and pages in
//! order. A stop (a rejection, the upstream's own quota, a lost lock, a
//! signal) starts no new region and sends no new request; the requests in
//! flight finish (or, at a signal, are abandoned) and their pages count.
//! With `concurrency: 1` this is the sequential walk it always was.

use std::collections::BTreeMap;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use super::batches::Batches;
use super::batches::Values;
use super::found::FoundValues;
use super::round::Slot;
use super::{JobRun, Position, Walk, Walker};
use crate::Result;
use crate::config::Step;
use crate::runner::Key;
use crate::runner::cursor::Start;

impl JobRun<'_> {
    /// Serve the round's keys, up to `concurrency` at once, until all
    /// are served or the run stops (a job of inputs reads its file as it
    /// goes). The first error ends the run at once (the requests in flight
    /// are abandoned, their charges kept).
    pub(super) async fn serve_round(&self, run: u64) -> Result<()> {
        let inputs = self.feed.borrow().is_some();
        let mut next = 0;
        let mut running = FuturesUnordered::new();
        loop {
            while running.len() < self.job.concurrency
                && !self.report.borrow().stopping()
                && !self.feed.borrow().as_ref().is_some_and(|f| f.stopping())
            {
                let Some((slots, start)) = self.next_to_serve(&mut next, inputs).await? else {
                    break;
                };
                running.push(self.serve_key(slots, start, run));
            }
            let Some(walked) = running.next().await else {
                let stop = self.feed.borrow_mut().as_mut().and_then(|f| f.take_stop());
                if let Some(e) = stop {
                    return Err(e);
                }
                if inputs && !self.report.borrow().stopping() {
                    self.keep_retried(true).await;
                    self.inputs_walked().await;
                }
                return Ok(());
            };
            let (key, walk, n) = walked?;
            if inputs {
                self.keep_retried(false).await;
            }
            {
                let mut report = self.report.borrow_mut();
                match walk {
                    Walk::Done => report.regions_done += n,
                    Walk::Refused => report.fail(&key, key.clone()),
                    Walk::Stopped => {}
                }
            }
            if inputs {
                // (an input over: the count moved, and the budgets' pace
                // is read from it)
                self.progress().await;
            }
        }
    }

    /// The next slot of the round to serve and where it starts (a job of
    /// inputs reads more of its file as it needs); with inputs in batches,
    /// the next batch's slots (fewer at the file's end), each from its
    /// first step. `None`: nothing more to start now.
    async fn next_to_serve(
        &self,
        next: &mut usize,
        inputs: bool,
    ) -> Result<Option<(Vec<usize>, Option<Start>)>> {
        let batch = self.job.inputs.as_ref().and_then(|i| i.batch).unwrap_or(0);
        let mut slots = Vec::new();
        loop {
            let (base, end) = {
                let round = self.round.borrow();
                (round.end() - round.window_len(), round.end())
            };
            // (inputs over when read have left the window at once)
            *next = (*next).max(base);
            if *next == end {
                if inputs && slots.len() < batch.max(1) && self.read_inputs().await? {
                    continue;
                }
                break;
            }
            if batch > 0 && slots.len() == batch {
                break;
            }
            let slot = *next;
            *next += 1;
            let start = match self.round.borrow().slot(slot) {
                Slot::Done => {
                    // Served by an earlier run this round (inputs:
                    // counted when read).
                    if !inputs {
                        self.report.borrow_mut().regions_done += 1;
                    }
                    continue;
                }
                Slot::Skipped => continue,
                Slot::Waiting(start) => start.clone(),
                Slot::At(_) => unreachable!("a region is started once"),
            };
            if batch == 0 {
                return Ok(Some((vec![slot], start)));
            }
            // (a batch starts afresh: an earlier run kept no place in it)
            slots.push(slot);
        }
        if slots.is_empty() {
            return Ok(None);
        }
        self.input_batches
            .borrow_mut()
            .insert(slots[0], slots.clone());
        Ok(Some((slots, None)))
    }

    /// One region's steps, from `start` (where an earlier run left it) or
    /// from its first step; or a batch of inputs' (`slots`), from its
    /// first step. The key walked, how it ended, and how many inputs (or
    /// regions) that was.
    async fn serve_key(
        &self,
        slots: Vec<usize>,
        start: Option<Start>,
        run: u64,
    ) -> Result<(Key, Walk, usize)> {
        let slot = slots[0];
        let walked = self.walk_key(slots, start, run).await;
        // (a batch over, or the run ended: its slots are no longer needed)
        self.input_batches.borrow_mut().remove(&slot);
        walked
    }

    async fn walk_key(
        &self,
        slots: Vec<usize>,
        start: Option<Start>,
        run: u64,
    ) -> Result<(Key, Walk, usize)> {
        let slot = slots[0];
        let n = slots.len();
        let (key, fields, batch) = {
            let round = self.round.borrow();
            let batch = self.input_batches.borrow().contains_key(&slot).then(|| {
                let join = self.job.inputs.as_ref().map_or(",", |i| i.join.as_str());
                let keys: Vec<&str> = slots.iter().map(|s| round.key(*s)).collect();
                keys.join(join)
            });
            (
                round.key(slot).to_string(),
                round.fields(slot).cloned(),
                batch,
            )
        };
        let mut w = Walker {
            found: FoundValues::default(),
            pending: None,
        };
        let first_step = start.as_ref().map_or(0, |s| s.place.step);
        for (s, step) in self.job.steps.iter().enumerate().skip(first_step) {
            let at = Position {
                key: &key,
                input: fields.as_ref(),
                batch: batch.as_deref(),
                slot,
                step: s,
                run,
            };
            let resumed = start.as_ref().filter(|_| s == first_step);
            match self.serve_step(&mut w, step, &at, resumed).await? {
                Walk::Done => {}
                other => return Ok((key.clone(), other, n)),
            }
        }
        Ok((key, Walk::Done, n))
    }

    /// One step of one region, from its first page, or from the cursor's
    /// (`resumed`): a walk of its pages, or a fan-out over the values the
    /// step before it found.
    async fn serve_step(
        &self,
        w: &mut Walker,
        step: &Step,
        at: &Position<'_>,
        resumed: Option<&Start>,
    ) -> Result<Walk> {
        // What the pages written before the cursor found for the next step.
        w.found = (self.lists)
            .found_for(self.meter.store(), at, resumed.map(|s| &s.place))
            .await?;
        let page = resumed.map_or(0, |s| s.place.page);
        if let Some(f) = &step.for_each {
            // The values not yet sent: the cursor's, or those the step
            // before found in this run.
            let plan = match resumed {
                Some(s) => {
                    (self.lists)
                        .resumed_plan(self.meter.store(), at, &s.place, f)
                        .await?
                }
                None => w.pending.take().map(|values: Values| {
                    Batches::resume(values, 0, &[], BTreeMap::new(), None, f.batch, false)
                }),
            };
            self.fan_out(w, step, at, page, plan).await
        } else {
            let token = resumed.and_then(|s| s.place.token.clone());
            self.conditional.walk_starts(
                at,
                resumed.and_then(|s| s.place.largest.as_deref().cloned()),
            );
            self.walk(w, step, at, page, token).await
        }
    }
}
