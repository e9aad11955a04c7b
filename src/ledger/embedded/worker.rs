//! The embedded store's one thread: it owns the SQLite connection and runs
//! the store's transactions one after another, as they are queued.
//!
//! Transactions queued while one runs are committed together, each inside
//! a savepoint of one `BEGIN IMMEDIATE` (its error or panic undoes its own
//! writes only): one commit, one round of file locks and WAL writes, for
//! all of them. With 64 requests in flight a run queues a charge or a
//! cursor every millisecond or so; a thread (of tokio's blocking pool)
//! per transaction, waiting in turn on a mutex, made each one a thread
//! hand-off on a busy machine, and the store the run's bottleneck
//! (issue 25, BENCHMARKS.md "Requests in flight at once").

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use rusqlite::{Connection, Transaction, TransactionBehavior};

use crate::ledger::StoreError;
use crate::ledger::error::busy_after;

/// The most transactions committed together: a bound on how long the
/// first of them waits for its answer.
const MOST_IN_ONE_COMMIT: usize = 64;

/// One queued transaction: run on the batch's transaction (`Ok`), or
/// answered with why the batch failed (`Err`).
type Work = Box<dyn FnOnce(Result<&Transaction<'_>, &StoreError>) -> Sent + Send>;

/// A queued transaction's answer, given the batch's failure if any.
type TransactionAnswer = Box<dyn FnOnce(Option<&StoreError>) + Send>;

/// What a queued transaction left for the batch: whether its own part
/// failed (its savepoint then rolled back), and its answer, sent once the
/// batch is committed (or failed).
struct Sent {
    failed: bool,
    answer: TransactionAnswer,
}

/// A handle on the thread; the thread ends (the connection closed) when
/// the last handle is dropped.
pub(super) struct Worker {
    queue: Mutex<Option<mpsc::Sender<(TransactionBehavior, Work)>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Commits made, transactions run, and those queued not yet taken:
    /// what a run's store work came to (logged at its end, and tested).
    pub(super) commits: Arc<AtomicU64>,
    transactions: Arc<AtomicU64>,
    queued: Arc<AtomicUsize>,
}

impl Worker {
    pub(super) fn start(conn: Connection) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let counts = Counts::default();
        let thread_counts = counts.clone();
        let thread = std::thread::Builder::new()
            .name("portion-store".into())
            .spawn(move || serve(conn, &rx, &thread_counts))?;
        Ok(Self {
            queue: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            commits: counts.commits,
            transactions: counts.transactions,
            queued: counts.queued,
        })
    }

    #[cfg(test)]
    pub(super) fn queue_len(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// Run `f` inside a transaction of `behavior` (or, queued behind
    /// others, inside a savepoint of theirs) and give back its answer.
    pub(super) async fn run<T, F>(
        &self,
        behavior: TransactionBehavior,
        f: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let work: Work = Box::new(move |tx| {
            let out = match tx {
                Ok(tx) => catch_unwind(AssertUnwindSafe(|| f(tx)))
                    .unwrap_or_else(|_| Err(StoreError::Worker("a transaction panicked".into()))),
                Err(e) => Err(copy(e)),
            };
            Sent {
                failed: out.is_err(),
                answer: Box::new(move |batch: Option<&StoreError>| {
                    let out = match batch {
                        Some(e) if out.is_ok() => Err(copy(e)),
                        _ => out,
                    };
                    let _ = reply.send(out);
                }),
            }
        });
        let sent = match &*self.queue.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(queue) => {
                self.queued.fetch_add(1, Ordering::SeqCst);
                queue.send((behavior, work)).is_ok()
            }
            None => false,
        };
        if !sent {
            return Err(StoreError::Worker("the store's thread has ended".into()));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(StoreError::Worker("the store's thread has ended".into())))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // The queue closed, the thread finishes what it has and closes the
        // connection (SQLite checkpoints its WAL then) before the process
        // can exit.
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
        tracing::debug!(
            "the embedded store ran {} transaction(s) in {} commit(s)",
            self.transactions.load(Ordering::Relaxed),
            self.commits.load(Ordering::Relaxed)
        );
    }
}

/// The same error again, for each transaction of a batch that failed as
/// a whole (a `rusqlite::Error` is not `Clone`).
fn copy(e: &StoreError) -> StoreError {
    match e {
        StoreError::Unavailable(m) => StoreError::Unavailable(m.clone()),
        other => StoreError::Worker(other.to_string()),
    }
}

#[derive(Clone, Default)]
struct Counts {
    commits: Arc<AtomicU64>,
    transactions: Arc<AtomicU64>,
    queued: Arc<AtomicUsize>,
}

/// The thread's loop: take what is queued, run it as one commit.
fn serve(
    mut conn: Connection,
    queue: &mpsc::Receiver<(TransactionBehavior, Work)>,
    counts: &Counts,
) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        while batch.len() < MOST_IN_ONE_COMMIT {
            match queue.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        counts.queued.fetch_sub(batch.len(), Ordering::SeqCst);
        let n = batch.len() as u64;
        counts.transactions.fetch_add(n, Ordering::Relaxed);
        // (a batch of reads alone stays deferred: it never takes the write
        // lock another process's charge would wait for)
        let behavior = if batch.len() == 1 {
            batch[0].0
        } else {
            TransactionBehavior::Immediate
        };
        let works = batch.into_iter().map(|(_, w)| w);
        commit(&mut conn, behavior, works, &counts.commits);
    }
}

/// Run `works` in one transaction, each in a savepoint of its own, then
/// commit (counted in `commits` before any answer) and answer each.
fn commit(
    conn: &mut Connection,
    behavior: TransactionBehavior,
    mut works: impl ExactSizeIterator<Item = Work>,
    commits: &AtomicU64,
) {
    let alone = works.len() == 1;
    // (a lock is said to have outlasted the busy timeout only if it did)
    let began = std::time::Instant::now();
    let tx = match conn.transaction_with_behavior(behavior) {
        Ok(tx) => tx,
        Err(e) => {
            let e = busy_after(e, began.elapsed());
            for w in works {
                (w(Err(&e)).answer)(None);
            }
            return;
        }
    };
    let mut sent = Vec::with_capacity(works.len());
    while let Some(w) = works.next() {
        if alone {
            sent.push(w(Ok(&tx)));
            continue;
        }
        if let Err(e) = tx.execute_batch("SAVEPOINT one") {
            let e = StoreError::from(e);
            sent.push(w(Err(&e)));
            continue;
        }
        let s = w(Ok(&tx));
        let undo = if s.failed {
            "ROLLBACK TO one; RELEASE one"
        } else {
            "RELEASE one"
        };
        if let Err(e) = tx.execute_batch(undo) {
            // (the transaction is in a state no later work should build on)
            let e = StoreError::from(e);
            let _ = tx.rollback();
            (s.answer)(Some(&e));
            for s in sent {
                (s.answer)(Some(&e));
            }
            for w in works {
                (w(Err(&e)).answer)(None);
            }
            return;
        }
        sent.push(s);
    }
    // A transaction alone that failed is rolled back, as before batches.
    let result = if alone && sent[0].failed {
        tx.rollback()
    } else {
        tx.commit().map(|()| {
            commits.fetch_add(1, Ordering::Relaxed);
        })
    };
    let e = result.err().map(|e| busy_after(e, began.elapsed()));
    for s in sent {
        (s.answer)(e.as_ref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::JobStore;
    use crate::ledger::embedded::EmbeddedLedger;

    /// Transactions queued while one runs are committed together, and one
    /// that fails among them undoes its own writes only.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn transactions_queued_behind_one_commit_together() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = EmbeddedLedger::open(&dir.path().join("s.db")).unwrap();
        let before = ledger.worker.commits.load(Ordering::Relaxed);
        // The thread held inside a transaction until the others are queued.
        let (started_tx, started) = std::sync::mpsc::channel();
        let (go, gate) = std::sync::mpsc::channel::<()>();
        let held = tokio::spawn({
            let ledger = ledger.clone();
            async move {
                ledger
                    .transaction(move |_| {
                        started_tx.send(()).unwrap();
                        gate.recv().unwrap();
                        Ok(())
                    })
                    .await
            }
        });
        tokio::task::spawn_blocking(move || started.recv().unwrap())
            .await
            .unwrap();
        let mut queued = Vec::new();
        for i in 0..10 {
            let ledger = ledger.clone();
            queued.push(tokio::spawn(async move {
                ledger.map_put("m", &[(format!("f{i}"), "v".into())]).await
            }));
        }
        let failing = {
            let ledger = ledger.clone();
            tokio::spawn(async move {
                ledger
                    .transaction(|tx| {
                        tx.execute(
                            "INSERT INTO job_map (map, field, value) VALUES ('m', 'bad', 'v')",
                            [],
                        )?;
                        Err::<(), _>(StoreError::Worker("refused".into()))
                    })
                    .await
            })
        };
        // (queued: each task is at its await once the queue holds it)
        while ledger.worker.queue_len() < 11 {
            tokio::task::yield_now().await;
        }
        go.send(()).unwrap();
        held.await.unwrap().unwrap();
        for q in queued {
            q.await.unwrap().unwrap();
        }
        assert!(failing.await.unwrap().is_err());
        assert_eq!(
            ledger.map_len("m").await.unwrap(),
            10,
            "the failed one's row undone"
        );
        // the one held, the eleven queued behind it, the count: three commits
        let commits = ledger.worker.commits.load(Ordering::Relaxed) - before;
        assert_eq!(commits, 3, "the eleven queued are committed as one");
    }
}
