//! The cursor saved: the one writer of a run's cursor (one write at a
//! time, each of the round as it is when its turn comes), and a once-job's
//! done part kept before the cursor that counts it.

use tracing::warn;

use super::JobRun;
use super::round::Slot;
use crate::ledger::{JobStore, StoreError};
use crate::runner::cursor::cursor_text;
use crate::runner::job_state::Map;

impl JobRun<'_> {
    /// Region `slot` of the round is now at `state`: save the cursor that
    /// says the whole round. The single writer: one write at a time, each
    /// of the round as it is when its turn comes, so the newest is written
    /// last; a state that a later write already carried is not written again.
    /// Whether the store now holds this state (or a later one).
    pub(super) async fn save(&self, slot: usize, state: Slot) -> bool {
        let version = {
            let mut round = self.round.borrow_mut();
            match self.input_batches.borrow().get(&slot) {
                // A batch of inputs is done, or failed, as one; it keeps
                // no place of its own (a stop redoes it from its first
                // step): its inputs stay not done until it is over.
                Some(_) if matches!(state, Slot::At(_)) => return true,
                Some(slots) => {
                    for s in slots {
                        round.set(*s, state.clone());
                    }
                }
                None => round.set(slot, state),
            }
            round.version()
        };
        self.write_cursor(version).await
    }

    /// Save the cursor of the round as it is (its place in a file of
    /// inputs moved).
    pub(super) async fn save_round(&self) -> bool {
        let version = self.round.borrow_mut().bump();
        self.write_cursor(version).await
    }

    /// Write the cursor of the round as it is now, unless a write of
    /// `version` or later was done. A once-job's done part grown by full
    /// chunks is kept first: the cursor never counts a chunk the store
    /// does not hold.
    pub(super) async fn write_cursor(&self, version: u64) -> bool {
        let mut saved = self.saving.lock().await;
        if *saved >= version {
            return true;
        }
        let (cursor, now, chunks) = {
            let mut round = self.round.borrow_mut();
            let chunks = round
                .window_mut()
                .map(|w| std::mem::take(&mut w.chunks))
                .unwrap_or_default();
            (round.cursor(), round.version(), chunks)
        };
        if let Err(e) = keep_chunks(self.state(), &chunks).await {
            warn!(
                job = self.job.name,
                "cannot keep the inputs done in the store (the next run may redo them): {e}"
            );
            if let Some(w) = self.round.borrow_mut().window_mut() {
                w.chunks.splice(0..0, chunks);
            }
            return false;
        }
        let (stored, text) = cursor_text(&cursor, &self.cred.secret);
        if stored.place.page != cursor.place.page {
            warn!(
                job = self.job.name,
                "the next page's token carries the credential's secret in an encoding that cannot be stored masked: \
                 the cursor keeps the start of this step instead (a stop before the step ends redoes its pages)"
            );
        }
        self.report.borrow_mut().resume = Some(stored);
        if let Some(store) = self.meter.store()
            && let Err(e) = store.save_cursor(&self.job.name, &text).await
        {
            warn!(
                job = self.job.name,
                "cannot save the cursor (the next run may redo this page): {e}"
            );
            return false;
        }
        *saved = now;
        true
    }
}

async fn keep_chunks(
    state: Option<crate::runner::job_state::JobState<'_>>,
    chunks: &[(u64, crate::inputs::done_part::Chunk)],
) -> std::result::Result<(), StoreError> {
    let Some(state) = state else {
        return Ok(());
    };
    let entries: Vec<(String, String)> = (chunks.iter())
        .map(|(i, chunk)| {
            let text = serde_json::to_string(chunk).expect("a chunk always serializes");
            (format!("{i:012}"), text)
        })
        .collect();
    state.put(Map::Done, &entries).await
}
