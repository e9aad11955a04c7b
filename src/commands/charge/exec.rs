//! `portion exec CREDENTIAL --cost … -- COMMAND [ARG]…`: charge, then run the
//! command as a child and exit with its exit code, so that any program (a
//! curl, a vendor SDK's CLI) spends under the ledger without learning
//! about it. Refused, the command is not run (75); the signals that reach
//! `portion` and would end it (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1…) are
//! passed on to the command, whose exit is `portion`'s.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;

use rustix::process::{Pid, Signal as Sig, kill_process};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tracing::debug;

use super::{DEFAULT_ENDPOINT_EXEC, Request, decide, report};
use crate::cli::ExecArgs;
use crate::commands::context;
use crate::config::Config;
use crate::ledger::StoreLocation;
use crate::{Error, ExitStatus, Result};

/// Charge; when admitted, run the command and return its exit code.
pub async fn execute(
    config: &Config,
    location: &StoreLocation,
    args: &ExecArgs,
) -> Result<ExitStatus> {
    let request = Request::read(config, &args.spec, DEFAULT_ENDPOINT_EXEC)?;
    let store = context::open(location).await?;
    let store_name = context::store_name(location);
    let outcome = decide(&store, &store_name, &request).await?;
    if !outcome.decision.is_allowed() {
        report::refused(&request, &outcome);
        return Ok(ExitStatus::STOPPED);
    }
    // The command may run for long: hold no connection or file meanwhile.
    drop(store);
    run(&args.command).await
}

/// Run `command` (program and arguments) with this process's standard
/// streams and environment, passing signals on (see [`FORWARDED`]); its exit code, or
/// 128 + N when signal N killed it.
async fn run(command: &[OsString]) -> Result<ExitStatus> {
    let (program, args) = command
        .split_first()
        .expect("clap requires a command after --");
    // Listening before the child exists: a signal that arrives as it
    // starts is passed on, not taken by this process's default action.
    let mut signals = Passed::listen()?;
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
fn exit_code(status: std::process::ExitStatus) -> ExitStatus {
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitStatus::from_code(code as u8),
        (None, Some(sig)) => {
            ExitStatus::from_code(ExitStatus::SIGNALLED.code().wrapping_add(sig as u8))
        }
        (None, None) => ExitStatus::FAILURE,
    }
}

/// The signals `portion exec` passes on to its command: every one whose
/// default action would end `portion` and that a process may catch, the
/// real-time ones included. Any other would kill `portion` and leave the
/// command running, orphaned (SIGUSR1 did). Not passed on: SIGPIPE (which
/// Rust ignores; a closed stderr of `portion`'s must not kill the command),
/// SIGCHLD (the runtime's own), the job-control signals (SIGTSTP, SIGCONT…),
/// which leave a process alive and reach a terminal's whole process group,
/// and SIGSEGV, SIGILL and SIGFPE, which tokio refuses to catch: they
/// report a fault of `portion`'s own, which must end it.
const FORWARDED: [Sig; 18] = [
    Sig::HUP,
    Sig::INT,
    Sig::QUIT,
    Sig::TRAP,
    Sig::ABORT,
    Sig::BUS,
    Sig::USR1,
    Sig::USR2,
    Sig::ALARM,
    Sig::TERM,
    Sig::STKFLT,
    Sig::XCPU,
    Sig::XFSZ,
    Sig::VTALARM,
    Sig::PROF,
    Sig::IO,
    Sig::POWER,
    Sig::SYS,
];

/// The signals that reach `portion` while its command runs, in order.
struct Passed {
    received: mpsc::UnboundedReceiver<Sig>,
}

impl Passed {
    /// Listen for every signal of [`FORWARDED`] and every real-time one
    /// (`SIGRTMIN` to `SIGRTMAX`, those the C library leaves to programs).
    fn listen() -> Result<Self> {
        let (tx, received) = mpsc::unbounded_channel();
        bus_stays_caught()?;
        // SAFETY: SIGRTMIN() to SIGRTMAX() are the real-time signals the C
        // library leaves free for programs (its own lie below SIGRTMIN()).
        let realtime =
            (libc::SIGRTMIN()..=libc::SIGRTMAX()).map(|n| unsafe { Sig::from_raw_unchecked(n) });
        for sig in FORWARDED.into_iter().chain(realtime) {
            let mut stream =
                signal(SignalKind::from_raw(sig.as_raw())).map_err(|source| Error::Process {
                    what: "listen for signals",
                    source,
                })?;
            let tx = tx.clone();
            tokio::spawn(
                async move { while stream.recv().await.is_some() && tx.send(sig).is_ok() {} },
            );
        }
        Ok(Self { received })
    }

    /// The next signal to arrive.
    async fn recv(&mut self) -> Sig {
        match self.received.recv().await {
            Some(sig) => sig,
            None => std::future::pending().await,
        }
    }
}

/// Make every SIGBUS sent to `portion` reach the command, not just the first,
/// while a real bus error still ends `portion`. Rust's runtime catches SIGBUS
/// (and SIGSEGV) to report a stack overflow; any other, it uncatches and
/// returns, so that the fault recurs and kills. Chained behind tokio's
/// handler, that uncatching left a second `kill -BUS` to end `portion` and
/// orphan the command. Hence: the runtime's handler goes, and a bus error
/// the kernel raised (`si_code` > 0; a `kill` or `sigqueue` gives 0 or
/// less) uncatches SIGBUS itself, so the faulting access, run again on
/// return, ends `portion` as it would without a handler. (On Linux a stack
/// overflow raises SIGSEGV, whose handler stays.)
fn bus_stays_caught() -> Result<()> {
    let failed = |source| Error::Process {
        what: "listen for signals",
        source,
    };
    // SAFETY: setting a signal's default action; done before tokio (through
    // signal-hook-registry) installs its own handler, which then finds no
    // previous one to call.
    let default = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut())
    };
    if default != 0 {
        return Err(failed(std::io::Error::last_os_error()));
    }
    // SAFETY: the action calls only `signal`, which is async-signal-safe.
    unsafe {
        signal_hook_registry::register_sigaction(libc::SIGBUS, |info| {
            if info.si_code > 0 {
                libc::signal(libc::SIGBUS, libc::SIG_DFL);
            }
        })
    }
    .map(drop)
    .map_err(failed)
}
