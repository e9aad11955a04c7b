//! A fan-out's values, when the cursor points into the list the store
//! keeps of them (`batch_at`): read back at the start of a run, and what
//! a list gone or unreadable means (see [`JobRun::load_lists`]).

use tracing::error;

use super::{JobRun, describe_position};
use crate::Result;
use crate::ledger::{JobStore, StoreError};
use crate::runner::cursor::{BatchAt, Cursor, ValueList, values_key};

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
            match self.load_list(key, step, page, &at, unsent).await {
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
        let mut put = |batch: &mut Option<Vec<String>>, at: &mut Option<BatchAt>| match loaded
            .next()
            .flatten()
        {
            Some(Some(values)) => *batch = Some(values),
            // (none left to send: the step ends at once, its loss said)
            Some(None) => (*batch, *at) = (Some(Vec::new()), None),
            None => {}
        };
        put(&mut cursor.place.batch, &mut cursor.place.batch_at);
        for a in &mut cursor.ahead {
            put(&mut a.place.batch, &mut a.place.batch_at);
        }
        Ok(())
    }

    /// The values not yet sent of `region`'s fan-out step `step` (at batch
    /// `page`), from the list `at` points into; `None` when that list is gone or another
    /// walk's: its `unsent` values are counted LOST, and said.
    async fn load_list(
        &self,
        key: &str,
        step: usize,
        page: u32,
        at: &BatchAt,
        unsent: usize,
    ) -> std::result::Result<Option<Vec<String>>, StoreError> {
        let Some(store) = self.meter.store() else {
            return Ok(None);
        };
        let stored_as = values_key(&self.job.name, key, step);
        let list = store.load_cursor(&stored_as).await?;
        match list.and_then(|t| serde_json::from_str::<ValueList>(&t).ok()) {
            Some(mut l)
                if l.id == at.list && at.from.checked_add(at.left) == Some(l.values.len()) =>
            {
                l.values.drain(..at.from);
                Ok(Some(l.values))
            }
            _ => {
                self.report.borrow_mut().values_lost += unsent as u64;
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
        };
        // From batch 2, in batches of 4: 3 and 5 (the last, 2 values) written.
        assert_eq!(unsent(&at(14), 2, &[3, 5], Some(4)), 14 - 4 - 2);
        assert_eq!(unsent(&at(14), 2, &[], None), 14);
        // Numbers that do not fit count nothing.
        assert_eq!(unsent(&at(5), 2, &[1, 2, 9], Some(4)), 5);
    }
}
