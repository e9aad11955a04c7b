//! The embedded single-host store: the ledger in a SQLite file (bundled
//! SQLite, no server). Every decision is one `BEGIN IMMEDIATE` transaction, so
//! several processes on one host can charge at once; the clock is the local one.
//!
//! It implements the semantics of `lua/charge.lua` line for line, over tables
//! instead of lists; the conformance suite checks that both give the same
//! answers to the same sequence of charges and clock readings.
//!
//! Rooms: [`file`] (opening the store), [`charge`] (a charge's decision),
//! [`log`] (the log's running totals), [`read`] (usage reports), [`worker`]
//! (the thread that runs the transactions).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod charge;
mod file;
mod job_store;
mod log;
mod maps;
mod read;
mod worker;

use self::charge::{OwnedCharge, clock, decide};
pub(in crate::ledger) use self::file::BUSY_TIMEOUT;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{
    At, BlockEnd, Charge, ChargeDecision, CredentialLog, IDEMPOTENCY_HORIZON, Ledger, Micros,
    Others, Pool, Receipt, Settled, StoreError, backoff_len, check_fits, shares,
};

/// The ledger in a local SQLite file.
#[derive(Clone)]
pub struct EmbeddedLedger {
    worker: Arc<worker::Worker>,
    path: PathBuf,
    /// What this host's history knows the store by: see [`Self::identity`].
    identity: String,
}

fn local_now() -> Micros {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as Micros)
        .unwrap_or(0)
}

/// One credential's row, as a decision reads it.
struct CredentialRow {
    last: Micros,
    serial: u64,
    retain: Micros,
    blocked_until: Micros,
    blocked_reason: String,
    lost_at: Micros,
}

fn credential_row(conn: &Connection, name: &str) -> rusqlite::Result<CredentialRow> {
    conn.query_row(
        "SELECT last, serial, retain, blocked_until, blocked_reason, lost_at FROM credential WHERE name = ?1",
        [name],
        |r| {
            Ok(CredentialRow {
                last: r.get(0)?,
                serial: r.get::<_, i64>(1)? as u64,
                retain: r.get(2)?,
                blocked_until: r.get(3)?,
                blocked_reason: r.get(4)?,
                lost_at: r.get(5)?,
            })
        },
    )
    .optional()
    .map(|row| {
        row.unwrap_or(CredentialRow {
            last: 0,
            serial: 0,
            retain: 0,
            blocked_until: 0,
            blocked_reason: String::new(),
            lost_at: 0,
        })
    })
}

/// How long a backoff block lasts (`backoff_len`), from the credential's
/// previous one, which it replaces.
fn backoff(
    tx: &rusqlite::Transaction<'_>,
    credential: &str,
    (shortest, longest): (Duration, Duration),
    now: Micros,
) -> Result<Duration, StoreError> {
    let us = |d: Duration| d.as_micros().min(i64::MAX as u128) as Micros;
    let prev: (Micros, Micros) = tx
        .query_row(
            "SELECT backoff_until, backoff_len FROM credential WHERE name = ?1",
            [credential],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?
        .unwrap_or((0, 0));
    let len = backoff_len((us(shortest), us(longest)), prev, now);
    tx.execute(
        "INSERT INTO credential (name, backoff_until, backoff_len) VALUES (?1, ?2, ?3)
         ON CONFLICT (name) DO UPDATE SET backoff_until = ?2, backoff_len = ?3",
        params![credential, now.saturating_add(len), len],
    )?;
    Ok(Duration::from_micros(len as u64))
}

impl EmbeddedLedger {
    /// Run `f` on the connection in a blocking thread, inside one immediate
    /// (write-locked) transaction.
    async fn transaction<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Transaction<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        self.transaction_with(TransactionBehavior::Immediate, f)
            .await
    }

    /// Run `f` on the store's thread inside one transaction of `behavior`:
    /// a read that writes nothing takes a deferred one, a snapshot that
    /// never holds the write lock (a status of a long log takes a few
    /// hundred ms, which no charge from another process should wait for).
    /// Queued behind others, it runs inside a savepoint of their
    /// immediate transaction instead ([`worker`]).
    async fn transaction_with<T, F>(
        &self,
        behavior: TransactionBehavior,
        f: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Transaction<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        self.worker.run(behavior, f).await
    }
}

/// The configured duration of a window the transaction named by its µs.
fn configured_per(charge: &Charge<'_>, per: Duration) -> Duration {
    charge
        .cost
        .iter()
        .flat_map(|c| c.pool.windows.iter())
        .map(|w| w.per)
        .find(|p| p.as_micros() == per.as_micros())
        .unwrap_or(per)
}

impl Ledger for EmbeddedLedger {
    async fn charge(&self, charge: &Charge<'_>, at: At) -> Result<ChargeDecision, StoreError> {
        check_fits(charge.cost)?;
        // (shares: the charge as planned, its share's pools added)
        let plan = shares::plan(charge);
        let planned = plan.as_ref().map(|p| shares::planned(charge, p));
        let charge = planned.as_ref().unwrap_or(charge);
        check_fits(charge.cost)?;
        let owned = OwnedCharge::new(charge, plan.as_ref());
        let decision = self.transaction(move |tx| decide(tx, &owned, at)).await?;
        // The transaction reports windows by microseconds; give back the
        // configured durations so both stores answer identically.
        let decision = match decision {
            ChargeDecision::Rejected {
                at,
                serial,
                pool,
                per,
                retry_after,
                held,
            } => {
                let per = configured_per(charge, per);
                ChargeDecision::Rejected {
                    at,
                    serial,
                    pool,
                    per,
                    retry_after,
                    held,
                }
            }
            ChargeDecision::Allowed {
                at,
                serial,
                duplicate,
                remaining,
                receipt,
                observed,
            } => ChargeDecision::Allowed {
                at,
                serial,
                duplicate,
                remaining,
                receipt,
                observed: observed.map(|mut w| {
                    w.per = w.per.map(|per| configured_per(charge, per));
                    w
                }),
            },
            other => other,
        };
        Ok(match &plan {
            Some(plan) => shares::answer(plan, decision),
            None => decision,
        })
    }

    async fn block(
        &self,
        credential: &str,
        end: impl Into<BlockEnd> + Send,
        reason: &str,
        at: At,
    ) -> Result<Micros, StoreError> {
        let (credential, reason, end) = (credential.to_string(), reason.to_string(), end.into());
        self.transaction(move |tx| {
            let now = clock(at, credential_row(tx, &credential)?.last);
            let end = match end {
                BlockEnd::Backoff { shortest, longest } => {
                    BlockEnd::After(backoff(tx, &credential, (shortest, longest), now)?)
                }
                other => other,
            };
            let until = end.end_at(now);
            tx.execute(
                "INSERT INTO credential (name, blocked_until, blocked_reason) VALUES (?1, ?2, ?3)
                 ON CONFLICT (name) DO UPDATE SET blocked_until = ?2, blocked_reason = ?3
                 WHERE blocked_until < ?2",
                params![credential, until, reason],
            )?;
            Ok(credential_row(tx, &credential)?.blocked_until)
        })
        .await
    }

    async fn upstream_remaining(
        &self,
        credential: &str,
        pool: &Pool,
        remaining: u64,
        reset: Option<BlockEnd>,
        at: At,
    ) -> Result<Others, StoreError> {
        let (credential, name) = (credential.to_string(), pool.name.clone());
        let longest = pool.longest().as_micros() as Micros;
        let window = pool.longest_window().cloned();
        let limit = window.as_ref().map_or(0, |w| w.limit);
        self.transaction(move |tx| {
            let row = credential_row(tx, &credential)?;
            let now = clock(at, row.last);
            // The longest window as a charge slides it (charge.rs): a
            // calendar window counts its period's calls only, as Redis's
            // slid sum does.
            let start = window.map_or(now - longest, |w| w.span_at(now).0);
            let visible = row.retain.max(IDEMPOTENCY_HORIZON.as_micros() as Micros);
            let cutoff = (start)
                .max(now - visible)
                .max(log::dead_mark(tx, &credential, &name)?);
            let until = reset.map_or(now + longest, |r| r.end_at(now));
            let others = log::record_others(
                tx,
                (&credential, &name),
                (cutoff, limit),
                remaining,
                (until, reset.is_some()),
                now,
            )?;
            // (the decision's time, which later ones never go below, as in Redis)
            tx.execute(
                "INSERT INTO credential (name, last) VALUES (?1, ?2)
                 ON CONFLICT (name) DO UPDATE SET last = max(last, excluded.last)",
                params![credential, now],
            )?;
            Ok(others)
        })
        .await
    }

    async fn settle(
        &self,
        credential: &str,
        receipt: &Receipt,
        cost: (&str, u64, u64),
        at: At,
    ) -> Result<Settled, StoreError> {
        self.settle_one(credential, receipt, cost, at).await
    }

    async fn unblock(&self, credential: &str) -> Result<Option<(Micros, String)>, StoreError> {
        let credential = credential.to_string();
        self.transaction(move |tx| {
            let row = credential_row(tx, &credential)?;
            tx.execute(
                "UPDATE credential SET blocked_until = 0, blocked_reason = '', backoff_until = 0,
                 backoff_len = 0 WHERE name = ?1",
                [&credential],
            )?;
            // (and the units the upstream said others spent, as unblock.lua)
            tx.execute(
                "UPDATE log_pool SET others = 0, others_until = 0 WHERE credential = ?1",
                [&credential],
            )?;
            Ok((row.blocked_until > 0).then_some((row.blocked_until, row.blocked_reason)))
        })
        .await
    }

    async fn read(
        &self,
        credential: &str,
        pools: &[Pool],
        at: At,
    ) -> Result<CredentialLog, StoreError> {
        let credential = credential.to_string();
        let names: Vec<String> = pools.iter().map(|p| p.name.clone()).collect();
        self.transaction_with(TransactionBehavior::Deferred, move |tx| {
            read::read(tx, &credential, &names, at)
        })
        .await
    }
}

impl EmbeddedLedger {
    /// Settle one pool's entry of a charge (see [`Ledger::settle`]).
    async fn settle_one(
        &self,
        credential: &str,
        receipt: &Receipt,
        (pool, estimate, actual): (&str, u64, u64),
        at: At,
    ) -> Result<Settled, StoreError> {
        let Some(row) = receipt.entry(pool) else {
            return Ok(Settled::Gone);
        };
        // (a share's pool holds the same call: settled in the same step,
        // to an actual capped at its own budgets)
        let subs: Vec<(String, i64, u64)> = (shares::settled_with(receipt, pool))
            .filter_map(|sub| {
                let row = receipt.entry(sub)?;
                Some((sub.to_string(), row, receipt.recordable(sub, actual)))
            })
            .collect();
        let actual = receipt.recordable(pool, actual);
        let (credential, pool) = (credential.to_string(), pool.to_string());
        let charged = receipt.id as Micros;
        self.transaction(move |tx| {
            let now = clock(at, credential_row(tx, &credential)?.last);
            for (sub, row, actual) in &subs {
                let cost = (estimate, *actual);
                log::settle(tx, &credential, sub, (*row, charged), cost, now)?;
            }
            log::settle(
                tx,
                &credential,
                &pool,
                (row, charged),
                (estimate, actual),
                now,
            )
        })
        .await
    }
}
