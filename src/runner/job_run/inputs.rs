//! A job of inputs: its file read into the round's window as the run
//! needs more ([`Feed`]), each record checked against the keys this walk
//! of the file has seen (the first of a repeated key wins), and, for a
//! once-job, the part already done checked before the run goes on.
//!
//! Its parts: the file as read ([`feed`]), the done part and its check
//! (`done`), inputs refused for themselves (`failed`), the keys a walk has
//! seen (`seen`), and a once-job's results already on disk (`on_disk`).
//!
//! The file is local and read through a buffer, a record at a time, on the
//! run's task: a read is a copy from the page cache, shorter than a store
//! round trip. Only the check of a done part, which reads it all, runs on
//! a blocking thread.

use tracing::{info, warn};

use self::done::stamp_of;
pub(crate) use self::done::{check_file, kept_chunks, needs_check, unrecorded};
pub(super) use self::feed::{Feed, window_cap};
use super::JobRun;
use super::round::{Round, Slot};

mod done;
mod failed;
mod feed;
mod on_disk;
mod seen;
use crate::config::Inputs;
use crate::inputs::warnings::Kind;
use crate::inputs::{Item, Reader, RecordStart, SkipReason};
use crate::logging::printable;
use crate::runner::Key;
use crate::runner::cursor::{Cursor, InputAt};
use crate::runner::job_state::Map;
use crate::{Error, Result};

impl JobRun<'_> {
    /// This run's round over the job's inputs, from the cursor's place in
    /// the file. A once-job whose file is not the one the last run read has
    /// its done part checked first: changed, the run stops (78).
    pub(super) async fn inputs_round(
        &self,
        inputs: &Inputs,
        cursor: &Cursor,
        run: u64,
        highest_run: u64,
    ) -> Result<Round> {
        let job = self.job;
        let mut at = cursor.input.clone().unwrap_or_default();
        at.line = at.line.max(1);
        let stamp = stamp_of(inputs)?;
        // (a once-job's part done that changed stops the run; a walk's
        // starts again from the file's first line)
        let changed = match needs_check(&at, &stamp) {
            false => None,
            true if job.once => {
                let changed = self.check_done_part(inputs, &at).await?;
                if let Some(changed) = changed {
                    return Err(done::done_part_changed(&self.job.name, inputs, changed));
                }
                None
            }
            true if unrecorded(&at) => Some(0),
            true => self.check_done_part(inputs, &at).await?.map(|c| c.line),
        };
        // (a file whose stamp changed is checked once: the new stamp is
        // saved at once, even by a run with nothing to do)
        let restamped = at.stamp.as_ref() != Some(&stamp);
        let fresh = self.walk_afresh(inputs, &mut at, changed, cursor).await;
        let cursor = fresh.as_ref().unwrap_or(cursor);
        at.stamp = Some(stamp);
        if !job.once && at.offset == 0 && at.done == 0 && cursor.key.is_empty() {
            // A new walk of the file, nothing in it done or started yet,
            // does every input again: the last walk's failures are not
            // this one's.
            failed::forget_failed(self.state(), &self.job.name).await;
        }
        let at_place = RecordStart {
            offset: at.offset,
            line: at.line,
        };
        let reader = Reader::open(inputs, at_place)
            .map_err(|source| Error::Io {
                what: "read the inputs of",
                path: inputs.file.clone(),
                source,
            })?
            .refusing(&self.cred.secret);
        info!(
            job = job.name,
            "run {run} starts at {} line {} ({} input(s) done{})",
            inputs.file.display(),
            at.line,
            at.done,
            if job.once {
                ""
            } else {
                " in this walk of the file"
            }
        );
        let mut feed = Feed::new(reader, cursor, job.steps.len(), at_place, run);
        feed.seen = Map::seen(job.once, at.walk);
        if job.once {
            feed.on_disk = on_disk::results_on_disk(self.job, &self.outputs, cursor);
        }
        feed.recent = on_disk::recent_runs(self.job, cursor, highest_run);
        feed.retry = failed::retries(self.state(), &self.job.name).await;
        *self.feed.borrow_mut() = Some(feed);
        let mut round = Round::of_inputs(run, at);
        if restamped {
            round.bump();
        }
        Ok(round)
    }

    /// Read inputs into the window while it has room. Whether it took any
    /// (none: the file ended, or the window is full).
    pub(super) async fn read_inputs(&self) -> Result<bool> {
        let batch = self.job.inputs.as_ref().and_then(|i| i.batch);
        let room = window_cap(self.job.concurrency, batch)
            .saturating_sub(self.round.borrow().window_len());
        if room > 0 && self.read_retries(room) {
            return Ok(true);
        }
        let items = {
            let mut feed = self.feed.borrow_mut();
            let Some(feed) = feed.as_mut() else {
                return Ok(false);
            };
            feed.take(room).map_err(|source| Error::Io {
                what: "read the inputs of",
                path: feed.reader.file().to_path_buf(),
                source,
            })?
        };
        let held = self.first_lines(&items).await?;
        let mut round = self.round.borrow_mut();
        let mut feed = self.feed.borrow_mut();
        let feed = feed.as_mut().expect("a job of inputs has its feed");
        let mut held = held.into_iter();
        let took = !items.is_empty();
        for item in items {
            match item {
                Item::Skip(skip) => {
                    if skip.reason != SkipReason::Blank
                        && feed
                            .warned
                            .note(Kind::of(&skip.reason), || skip.to_string())
                    {
                        warn!(job = self.job.name, "{skip}: skipped, not charged");
                    }
                    round.push(Key::new(), skip.span, Default::default(), Slot::Skipped);
                }
                Item::Record(r) => {
                    let first = held.next().unwrap_or(r.span.line);
                    if first != r.span.line {
                        let said = || {
                            format!(
                                "{} line {}: key {} again (first on line {first})",
                                feed.reader.file().display(),
                                r.span.line,
                                printable(&r.key)
                            )
                        };
                        if feed.warned.note(Kind::KeyAgain, said) {
                            warn!(job = self.job.name, "{}: skipped, not charged", said());
                        }
                        round.push(r.key, r.span, r.fields, Slot::Skipped);
                        continue;
                    }
                    let last = self.job.steps.len().saturating_sub(1);
                    let outputs = &self.outputs;
                    let state =
                        feed.read_state_of(&r.key, |runs| outputs.has_key(&r.key, last, runs));
                    let mut report = self.report.borrow_mut();
                    report.regions_total += 1;
                    if state == Slot::Done {
                        report.regions_done += 1;
                    }
                    round.push(r.key, r.span, r.fields, state);
                }
            }
        }
        if feed.ended {
            round.read_to(feed.next);
        }
        Ok(took)
    }

    /// Every input of the file read and served: a job that is not `once`
    /// walks it again from its start next time (the keys it saw forgotten);
    /// a once-job stays at the end, where lines appended later are read.
    pub(super) async fn inputs_walked(&self) {
        let ended = self.feed.borrow().as_ref().is_some_and(|f| f.ended);
        if !ended || self.round.borrow().window_len() > 0 {
            return;
        }
        if self.job.once {
            // Lines read after the last input served (blank or skipped
            // ones, or a file of nothing else) moved the place and the
            // count of skipped without a save: saved now, so that the
            // next run starts after them and the count says them.
            let version = self.round.borrow().version();
            self.write_cursor(version).await;
            return;
        }
        let walk = {
            let mut round = self.round.borrow_mut();
            let Some(w) = round.window_mut() else { return };
            let walk = w.at.walk;
            self.report.borrow_mut().walk_ended = Some((w.at.done, w.at.skipped));
            w.at = InputAt {
                walk: walk + 1,
                line: 1,
                stamp: w.at.stamp.take(),
                ..InputAt::default()
            };
            walk
        };
        self.save_round().await;
        seen::forget_seen(self.state(), self.job, walk).await;
    }
}
