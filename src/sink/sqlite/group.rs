//! Group commit of the rows: a run's writers share one [`Sink`], and the
//! pages whose rows arrive while a commit is in progress go into the next
//! transaction together, one commit and one WAL fsync for all of them (as
//! `folder_sync` shares a folder's fsync). Whichever writer finds no
//! commit running makes the next one, for every page waiting by then; the
//! others wait for it. Each page's writer returns only once a commit that
//! holds its rows succeeded, so each page is still committed before its
//! cursor moves. At `concurrency: 16` each page's commit (and its
//! `synchronous = FULL` fsync) had been its own, one at a time.
//!
//! A group that fails is not the failure of every page in it: its pages
//! are written again one per transaction, each getting its own result (a
//! page whose rows cannot be written loses no other page's). Only a
//! transaction that could not begin (the database locked past the busy
//! timeout) fails the whole group at once: each page alone would wait as
//! long again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use super::{PageRows, PreparedRows, Sink};

/// A [`Sink`] shared by a run's writers.
pub struct Shared {
    sink: Mutex<Sink>,
    /// `Sink::marks_inputs`, read without waiting for the sink.
    marks_inputs: bool,
    spec: crate::config::SqliteOutput,
    queue: Mutex<Queue>,
    turn: Condvar,
    /// Transactions committed for pages, and the pages they held.
    commits: AtomicU64,
    pages: AtomicU64,
}

#[derive(Default)]
struct Queue {
    next: u64,
    /// Pages waiting for the next commit, by number.
    waiting: Vec<(u64, PreparedRows)>,
    /// Results of pages committed (or failed), until their writer takes them.
    done: HashMap<u64, rusqlite::Result<PageRows>>,
    /// A writer is committing a group.
    running: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub fn new(sink: Sink) -> Self {
        Self {
            marks_inputs: sink.marks_inputs(),
            spec: sink.spec().clone(),
            sink: Mutex::new(sink),
            queue: Mutex::default(),
            turn: Condvar::new(),
            commits: AtomicU64::new(0),
            pages: AtomicU64::new(0),
        }
    }

    /// The sink itself, for what is not a page's rows.
    pub fn lock(&self) -> MutexGuard<'_, Sink> {
        lock(&self.sink)
    }

    pub fn marks_inputs(&self) -> bool {
        self.marks_inputs
    }

    pub fn spec(&self) -> &crate::config::SqliteOutput {
        &self.spec
    }

    /// `(commits, pages)`: the transactions that wrote pages' rows, and
    /// the pages in them.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.commits.load(Ordering::Relaxed),
            self.pages.load(Ordering::Relaxed),
        )
    }

    /// Write `page`'s rows, committed (with those of the pages that came
    /// meanwhile) when this returns.
    pub fn write(&self, page: PreparedRows) -> rusqlite::Result<PageRows> {
        let mut q = lock(&self.queue);
        let mine = q.next;
        q.next += 1;
        q.waiting.push((mine, page));
        loop {
            if let Some(result) = q.done.remove(&mine) {
                return result;
            }
            if !q.running {
                q.running = true;
                let group = std::mem::take(&mut q.waiting);
                drop(q);
                let mut turn = Turn {
                    shared: self,
                    ids: group.iter().map(|(id, _)| *id).collect(),
                    results: None,
                };
                let pages: Vec<PreparedRows> = group.into_iter().map(|(_, p)| p).collect();
                turn.results = Some(self.commit(&pages));
                drop(turn);
                q = lock(&self.queue);
                continue;
            }
            q = self.turn.wait(q).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// One transaction for `pages`; else, where it failed once begun,
    /// each page in its own.
    fn commit(&self, pages: &[PreparedRows]) -> Vec<rusqlite::Result<PageRows>> {
        let mut sink = self.lock();
        let e = match sink.write_group(pages) {
            Ok(found) => {
                self.commits.fetch_add(1, Ordering::Relaxed);
                self.pages.fetch_add(pages.len() as u64, Ordering::Relaxed);
                return found.into_iter().map(Ok).collect();
            }
            Err(e) if pages.len() == 1 => return vec![Err(e)],
            Err(e) => e,
        };
        if begin_failed(&e) {
            return pages.iter().map(|_| Err(again(&e))).collect();
        }
        pages
            .iter()
            .map(|p| {
                let r = sink.write_one(p);
                if r.is_ok() {
                    self.commits.fetch_add(1, Ordering::Relaxed);
                    self.pages.fetch_add(1, Ordering::Relaxed);
                }
                r
            })
            .collect()
    }
}

/// A writer's turn at committing: its group's results handed to their
/// writers when it ends, an error for each if it ended in a panic (so no
/// writer waits for ever).
struct Turn<'s> {
    shared: &'s Shared,
    ids: Vec<u64>,
    results: Option<Vec<rusqlite::Result<PageRows>>>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let results = self.results.take().unwrap_or_default();
        let mut results = results.into_iter();
        let mut q = lock(&self.shared.queue);
        for id in self.ids.drain(..) {
            let r = results.next().unwrap_or_else(|| {
                Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
                    Some("the rows' writer failed".into()),
                ))
            });
            q.done.insert(id, r);
        }
        q.running = false;
        self.shared.turn.notify_all();
    }
}

/// Whether the error is one of taking the write lock (the transaction's
/// begin), which each page alone would meet again.
fn begin_failed(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// The same error for another page of the group.
fn again(e: &rusqlite::Error) -> rusqlite::Error {
    match e {
        rusqlite::Error::SqliteFailure(code, message) => {
            rusqlite::Error::SqliteFailure(*code, message.clone())
        }
        other => rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(other.to_string()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    use rusqlite::Connection;

    use crate::config::SqliteOutput;
    use crate::sink::sqlite::prepare;

    fn spec(dir: &std::path::Path) -> SqliteOutput {
        SqliteOutput {
            path: dir.join("rows.db"),
            table: "t".into(),
            items: "/items/*".into(),
            key: "/id".into(),
            search: vec![("title".into(), "/title".into())],
            columns: Vec::new(),
        }
    }

    /// Input `K`'s page: 3 items, ids `K0`..`K2`.
    fn page(shared: &Shared, k: &str) -> PreparedRows {
        let items: Vec<String> = (0..3)
            .map(|i| format!(r#"{{"id":"{k}{i}","title":"item {k} {i}"}}"#))
            .collect();
        let body = format!(r#"{{"items":[{}]}}"#, items.join(","));
        prepare(shared.spec(), k, body.as_bytes(), "t".into(), 1)
    }

    /// Row count per input, and the index's count.
    fn rows(dir: &std::path::Path) -> (HashMap<String, i64>, i64) {
        let c = Connection::open(dir.join("rows.db")).unwrap();
        let mut stmt = c
            .prepare("SELECT input, count(*) FROM t GROUP BY input")
            .unwrap();
        let per = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let n = c
            .query_row("SELECT count(*) FROM t_search", [], |r| r.get(0))
            .unwrap();
        (per, n)
    }

    /// 16 writers, the first's commit held by another connection's write
    /// lock until the 15 others wait: they share the next transaction.
    /// `bad`: inputs whose rows a trigger refuses. Each writer's result.
    fn sixteen(
        dir: &std::path::Path,
        bad: &[&str],
        busy: Option<Duration>,
    ) -> (Arc<Shared>, Vec<(String, rusqlite::Result<PageRows>)>) {
        let sink = Sink::open(&spec(dir), "j", false).unwrap();
        if let Some(t) = busy {
            sink.conn.busy_timeout(t).unwrap();
        }
        let shared = Arc::new(Shared::new(sink));
        let holder = Connection::open(dir.join("rows.db")).unwrap();
        for b in bad {
            holder
                .execute_batch(&format!(
                    "CREATE TRIGGER IF NOT EXISTS no_{b} BEFORE INSERT ON t WHEN NEW.input = '{b}' \
                     BEGIN SELECT RAISE(ABORT, 'refused'); END;"
                ))
                .unwrap();
        }
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        let writers: Vec<_> = (0..16)
            .map(|i| {
                let writer = shared.clone();
                let k = format!("K{i:02}");
                let first = i == 0;
                let t = std::thread::spawn(move || {
                    let r = writer.write(page(&writer, &k));
                    (k, r)
                });
                if first && busy.is_none() {
                    while !lock(&shared.queue).running {
                        std::thread::yield_now();
                    }
                }
                t
            })
            .collect();
        if busy.is_none() {
            while lock(&shared.queue).waiting.len() < 15 {
                std::thread::yield_now();
            }
            holder.execute_batch("ROLLBACK").unwrap();
        }
        let results = writers.into_iter().map(|t| t.join().unwrap()).collect();
        if busy.is_some() {
            holder.execute_batch("ROLLBACK").unwrap();
        }
        (shared, results)
    }

    /// Pages whose rows come while a commit runs share the next one: 2
    /// commits for 16 pages, every row there once, the index in step.
    #[test]
    fn pages_that_come_during_a_commit_share_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let (shared, results) = sixteen(dir.path(), &[], None);
        for (k, r) in &results {
            assert_eq!(r.as_ref().unwrap().rows, 3, "{k}");
        }
        assert_eq!(shared.counts(), (2, 16));
        let (per, indexed) = rows(dir.path());
        assert_eq!(per.len(), 16);
        assert!(per.values().all(|n| *n == 3), "{per:?}");
        assert_eq!(indexed, 48);
    }

    /// Rows are new only where the table had no row of their key, also
    /// for a key twice in one group: the summary's new and replaced.
    #[test]
    fn a_key_twice_in_one_group_is_new_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = Sink::open(&spec(dir.path()), "j", false).unwrap();
        let body =
            |title: &str| format!(r#"{{"items":[{{"id":"a","title":"{title}"}},{{"id":"b"}}]}}"#);
        let page = |title: &str| {
            prepare(
                &spec(dir.path()),
                "K",
                body(title).as_bytes(),
                "t".into(),
                1,
            )
        };
        let found = sink.write_group(&[page("one"), page("two")]).unwrap();
        let news: Vec<(u64, u64)> = found.iter().map(|f| (f.rows, f.new)).collect();
        assert_eq!(news, [(2, 2), (2, 0)]);
        assert_eq!(sink.write_one(&page("three")).unwrap().new, 0);
        let (per, indexed) = rows(dir.path());
        assert_eq!((per["K"], indexed), (2, 2));
    }

    /// A page whose rows fail in a group fails alone: the others' rows
    /// are all there, once; its none.
    #[test]
    fn a_page_that_fails_in_a_group_takes_no_other_down() {
        let dir = tempfile::tempdir().unwrap();
        let (_, results) = sixteen(dir.path(), &["K07"], None);
        for (k, r) in &results {
            assert_eq!(r.is_err(), k == "K07", "{k}: {r:?}");
        }
        let (per, indexed) = rows(dir.path());
        assert_eq!(per.len(), 15, "{per:?}");
        assert!(!per.contains_key("K07"));
        assert!(per.values().all(|n| *n == 3), "{per:?}");
        assert_eq!(indexed, 45);
    }

    /// A database locked past the busy timeout fails every page of the
    /// group, none written in part; written again, each is there once.
    #[test]
    fn a_group_that_cannot_begin_fails_whole_and_is_redone_once() {
        let dir = tempfile::tempdir().unwrap();
        let (shared, results) = sixteen(dir.path(), &[], Some(Duration::from_millis(50)));
        assert!(results.iter().all(|(_, r)| r.is_err()), "{results:?}");
        assert_eq!(rows(dir.path()).0.len(), 0);
        for i in 0..16 {
            shared.write(page(&shared, &format!("K{i:02}"))).unwrap();
        }
        let (per, indexed) = rows(dir.path());
        assert_eq!(per.len(), 16);
        assert!(per.values().all(|n| *n == 3), "{per:?}");
        assert_eq!(indexed, 48);
    }
}
