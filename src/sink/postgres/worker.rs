//! The run's one connection to PostgreSQL, on a thread of its own: the
//! blocking client runs a runtime of its own inside, which cannot be
//! entered from a thread of the run's runtime (the run asks some things,
//! such as whether an input has rows, from its async tasks), so every
//! statement is sent to this thread and its answer waited for. The calls
//! are taken one at a time, in the order they came: a page's transaction
//! is never interleaved with another's.

use std::sync::Mutex;
use std::sync::mpsc::{Sender, channel};

use postgres::Client;

use super::PgError;
use super::connect::connect;
use crate::config::postgres_url::PgUrl;

/// A call to run on the connection's thread.
type Call = Box<dyn FnOnce(&mut Client) + Send>;

/// The connection's thread: it ends when this drops.
pub(super) struct PgThread {
    calls: Mutex<Sender<Call>>,
}

impl PgThread {
    /// Connect (on the new thread), or say why not.
    pub(super) fn start(url: &PgUrl) -> Result<Self, PgError> {
        let (calls, inbox) = channel::<Call>();
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
                for call in inbox {
                    call(&mut client);
                }
            })
            .map_err(|e| PgError::Unreachable(format!("cannot start its thread: {e}")))?;
        open.recv()
            .unwrap_or_else(|_| Err(PgError::Unreachable("its thread ended".into())))?;
        Ok(Self {
            calls: Mutex::new(calls),
        })
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
        let sent = match self.calls.lock() {
            Ok(calls) => calls.send(call).is_ok(),
            Err(_) => false,
        };
        if !sent {
            return Err(PgError::Lost("the connection's thread ended".into()));
        }
        answered
            .recv()
            .unwrap_or_else(|_| Err(PgError::Lost("the connection's thread ended".into())))
    }
}
