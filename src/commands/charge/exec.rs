//! `quota exec CREDENTIAL --cost … -- COMMAND [ARG]…`: charge, then run the
//! command as a child and exit with its exit code, so that any program (a
//! curl, a vendor SDK's CLI) spends under the ledger without learning
//! about it. Refused, the command is not run (75); the stop signals that
//! reach `quota` (SIGINT, SIGTERM, SIGHUP) are passed on to the command.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use rustix::process::{Pid, Signal as Sig, kill_process};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tracing::debug;

use super::{DEFAULT_ENDPOINT_EXEC, Request, decide, open, report};
use crate::cli::ExecArgs;
use crate::config::Config;
use crate::error::exit;
use crate::ledger::StoreLocation;
use crate::{Error, Result};

/// Charge; when admitted, run the command and return its exit code.
pub async fn execute(config: &Config, location: &StoreLocation, args: &ExecArgs) -> Result<u8> {
    let request = Request::read(config, &args.spec, DEFAULT_ENDPOINT_EXEC)?;
    let (store, store_name) = open(location).await?;
    let outcome = decide(&store, &store_name, &request).await?;
    if !outcome.decision.is_allowed() {
        report::refused(&request, &outcome);
        return Ok(exit::STOPPED);
    }
    // The command may run for long: hold no connection or file meanwhile.
    drop(store);
    run(&args.command).await
}

/// Run `command` (program and arguments) with this process's standard
/// streams and environment, passing stop signals on; its exit code, or
/// 128 + N when signal N killed it.
async fn run(command: &[OsString]) -> Result<u8> {
    let (program, args) = command
        .split_first()
        .expect("clap requires a command after --");
    // Listening before the child exists: a signal that arrives as it
    // starts is passed on, not taken by this process's default action.
    let mut signals = StopSignals::listen()?;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .spawn()
        .map_err(|source| Error::CommandNotStarted {
            program: program.to_string_lossy().into_owned(),
            source,
        })?;
    let pid = child
        .id()
        .and_then(|id| Pid::from_raw(id as i32))
        .expect("a child just spawned has a pid");
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.map_err(|source| Error::Process {
                what: "wait for the command",
                source,
            })?,
            sig = signals.recv() => {
                debug!("passing signal {} on to the command (pid {})", sig.as_raw(), pid.as_raw_nonzero());
                // It may have exited already: nothing to pass on to.
                let _ = kill_process(pid, sig);
            }
        }
    };
    Ok(exit_code(status))
}

/// A shell's exit code for a finished command.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => exit::SIGNALLED.wrapping_add(sig as u8),
        (None, None) => exit::FAILURE,
    }
}

/// The stop signals `quota exec` passes on to its command.
struct StopSignals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl StopSignals {
    fn listen() -> Result<Self> {
        let on = |kind| {
            signal(kind).map_err(|source| Error::Process {
                what: "listen for signals",
                source,
            })
        };
        Ok(Self {
            int: on(SignalKind::interrupt())?,
            term: on(SignalKind::terminate())?,
            hup: on(SignalKind::hangup())?,
        })
    }

    /// The next stop signal to arrive.
    async fn recv(&mut self) -> Sig {
        tokio::select! {
            Some(()) = self.int.recv() => Sig::INT,
            Some(()) = self.term.recv() => Sig::TERM,
            Some(()) = self.hup.recv() => Sig::HUP,
            else => std::future::pending().await,
        }
    }
}
