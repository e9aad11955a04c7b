//! The run's one connection to PostgreSQL, on a thread of its own: the
//! blocking client runs a runtime of its own inside, which cannot be
//! entered from a thread of the run's runtime (the run asks some things,
//! such as whether an input has rows, from its async tasks), so every
//! statement is sent to this thread and its answer waited for. The calls
//! are taken one at a time, in the order they came: a page's transaction
//! is never interleaved with another's. Pages' rows that came while a
//! commit ran are written together, in one transaction ([`PgTable`]): one
//! commit (and its sync on the server) for all, as SQLite's group does.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, Sender, channel};

use postgres::Client;

use super::PgError;
use super::connect::connect;
use super::names::Names;
use crate::config::postgres_url::PgUrl;
use crate::sink::PageRows;
use crate::sink::sqlite::PreparedRows;

/// A call to run on the connection's thread.
type Call = Box<dyn FnOnce(&mut Client) + Send>;

/// What a page's write answers: what the page gave, and whether its
/// transaction was the first of its group's (a commit to count).
pub(super) type PgWritten = Result<(PageRows, bool), PgError>;

/// What the connection's thread is sent.
enum Msg {
    Call(Call),
    Page(PreparedRows, Sender<PgWritten>),
}

/// The table pages' rows go to: the one of the thread's connection.
#[derive(Clone)]
pub(super) struct PgTable {
    pub names: Names,
    pub job: String,
    /// Its typed columns.
    pub columns: Vec<crate::config::Column>,
    /// A once-job's: each input's run kept.
    pub runs: bool,
}

/// The connection's thread: it ends when this drops.
pub(super) struct PgThread {
    calls: Mutex<Sender<Msg>>,
}

impl PgThread {
    /// Connect (on the new thread), or say why not.
    pub(super) fn start(url: &PgUrl, table: Option<PgTable>) -> Result<Self, PgError> {
        let (calls, inbox) = channel::<Msg>();
        let (opened, open) = channel();
        let url = url.clone();
        std::thread::Builder::new()
            .name("postgres".into())
            .spawn(move || {
                let mut client = match connect(&url) {
                    Ok(c) => {
                        let _ = opened.send(Ok(()));
                        c
                    }
                    Err(e) => {
                        let _ = opened.send(Err(e));
                        return;
                    }
                };
                serve(&mut client, &inbox, table.as_ref());
            })
            .map_err(|e| PgError::Unreachable(format!("cannot start its thread: {e}")))?;
        open.recv()
            .unwrap_or_else(|_| Err(PgError::Unreachable("its thread ended".into())))?;
        Ok(Self {
            calls: Mutex::new(calls),
        })
    }

    /// Write a page's rows (with those of the pages that come meanwhile)
    /// and wait for their commit.
    pub(super) fn write(&self, rows: PreparedRows) -> PgWritten {
        let (answer, answered) = channel();
        self.send(Msg::Page(rows, answer))?;
        answered
            .recv()
            .unwrap_or_else(|_| Err(PgError::Lost("the connection's thread ended".into())))
    }

    fn send(&self, msg: Msg) -> Result<(), PgError> {
        let sent = match self.calls.lock() {
            Ok(calls) => calls.send(msg).is_ok(),
            Err(_) => false,
        };
        if sent {
            Ok(())
        } else {
            Err(PgError::Lost("the connection's thread ended".into()))
        }
    }

    /// Run `f` on the connection and wait for its answer.
    pub(super) fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<R, PgError> + Send + 'static,
    ) -> Result<R, PgError> {
        let (answer, answered) = channel();
        let call: Call = Box::new(move |client| {
            let _ = answer.send(f(client));
        });
        self.send(Msg::Call(call))?;
        answered
            .recv()
            .unwrap_or_else(|_| Err(PgError::Lost("the connection's thread ended".into())))
    }
}

/// The thread's work until the sender drops: each call in turn, the
/// pages waiting at once in one transaction.
fn serve(client: &mut Client, inbox: &Receiver<Msg>, table: Option<&PgTable>) {
    let mut next: Option<Msg> = None;
    loop {
        let msg = match next.take() {
            Some(m) => m,
            None => match inbox.recv() {
                Ok(m) => m,
                Err(_) => return,
            },
        };
        let (first, answer) = match msg {
            Msg::Call(call) => {
                call(client);
                continue;
            }
            Msg::Page(rows, answer) => (rows, answer),
        };
        let mut group = vec![(first, answer)];
        while let Ok(m) = inbox.try_recv() {
            match m {
                Msg::Page(rows, answer) => group.push((rows, answer)),
                call => {
                    next = Some(call);
                    break;
                }
            }
        }
        let pages: Vec<&PreparedRows> = group.iter().map(|(p, _)| p).collect();
        let written = match table {
            Some(t) => {
                super::rows::write_group(client, &t.names, (&t.job, &t.columns), &pages, t.runs)
            }
            None => Err(PgError::Rows("no table to write to".into())),
        };
        match written {
            Ok(found) => {
                for (i, ((_, answer), f)) in group.iter().zip(found).enumerate() {
                    let _ = answer.send(Ok((f, i == 0)));
                }
            }
            Err(e) => {
                for (_, answer) in &group {
                    let _ = answer.send(Err(e.again()));
                }
            }
        }
    }
}
