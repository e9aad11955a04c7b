//! The embedded store as a [`JobStore`]: each job's run lock, cursor and
//! maps, in tables of the same file as the ledger.

use std::time::Duration;

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::{EmbeddedLedger, local_now, maps};
use crate::ledger::{JobStore, LockOutcome, Micros, StoreError};

impl JobStore for EmbeddedLedger {
    async fn take_lock(
        &self,
        job: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<LockOutcome, StoreError> {
        let (job, holder) = (job.to_string(), holder.to_string());
        self.transaction(move |tx| {
            let now = local_now();
            let current: Option<(String, Micros)> = tx
                .query_row(
                    "SELECT holder, expires_at FROM job_lock WHERE job = ?1",
                    [&job],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            match current {
                Some((other, expires_at)) if other != holder && expires_at > now => {
                    Ok(LockOutcome::Busy {
                        holder: other,
                        expires_in: Duration::from_micros((expires_at - now) as u64),
                    })
                }
                _ => {
                    tx.execute(
                        "INSERT OR REPLACE INTO job_lock (job, holder, expires_at) VALUES (?1, ?2, ?3)",
                        params![job, holder, now + ttl.as_micros() as Micros],
                    )?;
                    Ok(LockOutcome::Held)
                }
            }
        })
        .await
    }

    async fn renew_lock(&self, job: &str, holder: &str, ttl: Duration) -> Result<bool, StoreError> {
        let (job, holder) = (job.to_string(), holder.to_string());
        self.transaction(move |tx| {
            let now = local_now();
            let n = tx
                .execute(
                    "UPDATE job_lock SET expires_at = ?3 WHERE job = ?1 AND holder = ?2 AND expires_at > ?4",
                    params![job, holder, now + ttl.as_micros() as Micros, now],
                )?;
            Ok(n == 1)
        })
        .await
    }

    async fn release_lock(&self, job: &str, holder: &str) -> Result<bool, StoreError> {
        let (job, holder) = (job.to_string(), holder.to_string());
        self.transaction(move |tx| {
            let n = tx.execute(
                "DELETE FROM job_lock WHERE job = ?1 AND holder = ?2 AND expires_at > ?3",
                params![job, holder, local_now()],
            )?;
            Ok(n == 1)
        })
        .await
    }

    async fn load_cursor(&self, job: &str) -> Result<Option<String>, StoreError> {
        let job = job.to_string();
        self.transaction(move |tx| {
            tx.query_row(
                "SELECT cursor FROM job_cursor WHERE job = ?1",
                [&job],
                |r| r.get(0),
            )
            .optional()
            .map_err(StoreError::from)
        })
        .await
    }

    async fn save_cursor(&self, job: &str, cursor: &str) -> Result<(), StoreError> {
        let (job, cursor) = (job.to_string(), cursor.to_string());
        self.transaction(move |tx| {
            tx.execute(
                "INSERT OR REPLACE INTO job_cursor (job, cursor) VALUES (?1, ?2)",
                params![job, cursor],
            )?;
            Ok(())
        })
        .await
    }

    async fn map_put_new(
        &self,
        map: &str,
        entries: &[(String, String)],
    ) -> Result<Vec<String>, StoreError> {
        let (map, entries) = (map.to_string(), entries.to_vec());
        self.transaction(move |tx| maps::put_new(tx, &map, &entries))
            .await
    }

    async fn map_put(&self, map: &str, entries: &[(String, String)]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let (map, entries) = (map.to_string(), entries.to_vec());
        self.transaction(move |tx| {
            for (field, value) in &entries {
                maps::put(tx, &map, field, value)?;
            }
            Ok(())
        })
        .await
    }

    async fn map_len(&self, map: &str) -> Result<u64, StoreError> {
        let map = map.to_string();
        self.transaction_with(TransactionBehavior::Deferred, move |tx| maps::len(tx, &map))
            .await
    }

    async fn map_read(&self, map: &str) -> Result<Vec<(String, String)>, StoreError> {
        let map = map.to_string();
        self.transaction_with(TransactionBehavior::Deferred, move |tx| {
            maps::read(tx, &map)
        })
        .await
    }

    async fn map_get(
        &self,
        map: &str,
        fields: &[String],
    ) -> Result<Vec<Option<String>>, StoreError> {
        let (map, fields) = (map.to_string(), fields.to_vec());
        self.transaction_with(TransactionBehavior::Deferred, move |tx| {
            maps::get(tx, &map, &fields)
        })
        .await
    }

    async fn map_forget(&self, map: &str) -> Result<(), StoreError> {
        let map = map.to_string();
        self.transaction(move |tx| maps::forget(tx, &map)).await
    }
}
