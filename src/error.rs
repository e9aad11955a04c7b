//! The one error type of `portion`, and the one place where exit codes live.
//!
//! Every way a command can end early is a variant that carries what a
//! message (and a caller) needs; [`Error::exit_code`] maps each to the
//! sysexits code the README promises, and [`ExitStatus`] names the codes
//! and their order.

use std::path::PathBuf;

use crate::ledger::StoreError;

/// How a command ends: a process exit code (sysexits), named once, with
/// the order in which a run's jobs' ends combine ([`ExitStatus::then`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ExitStatus(u8);

impl ExitStatus {
    /// Every requested job finished its work.
    pub const OK: Self = Self(0);
    /// Anything else: upstream errors that outlasted retries, I/O, a store error.
    pub const FAILURE: Self = Self(1);
    /// A command-line usage error.
    pub const USAGE: Self = Self(2);
    /// The store is unreachable and the policy says stop.
    pub const UNAVAILABLE: Self = Self(69);
    /// Stopped early but cleanly: the next tick resumes.
    pub const STOPPED: Self = Self(75);
    /// A configuration error: nothing was charged.
    pub const CONFIG: Self = Self(78);
    /// `portion exec`: the command was found but could not be executed.
    pub const CANNOT_EXECUTE: Self = Self(126);
    /// `portion exec`: the command was not found.
    pub const NOT_FOUND: Self = Self(127);
    /// `portion exec`: a command killed by signal N exits 128 + N, as in a shell.
    pub const SIGNALLED: Self = Self(128);

    /// Any code, as `portion exec` passes on its command's.
    pub const fn from_code(code: u8) -> Self {
        Self(code)
    }

    /// The number the process exits with.
    pub const fn code(self) -> u8 {
        self.0
    }

    /// An error: anything but success (0) and a clean stop (75).
    pub fn is_error(self) -> bool {
        self != Self::OK && self != Self::STOPPED
    }

    /// Two ends combined, `self` the earlier: an error outranks a clean
    /// stop, which outranks success; of two errors the first stays.
    #[must_use]
    pub fn then(self, later: Self) -> Self {
        match (self.is_error(), later.is_error()) {
            (true, _) => self,
            (false, true) => later,
            (false, false) => Self(self.0.max(later.0)),
        }
    }
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl From<ExitStatus> for std::process::ExitCode {
    fn from(status: ExitStatus) -> Self {
        Self::from(status.0)
    }
}

/// Everything that can end a command early.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is wrong: names the file, the field and what is wrong.
    #[error("{}", config_message(file, field, message))]
    Config {
        file: PathBuf,
        field: String,
        message: String,
    },

    /// A command-line usage error that clap could not catch.
    #[error("{0}")]
    Usage(String),

    /// The store cannot be reached when a job's policy needs it: `fail_closed`
    /// names the job and endpoint whose request was not sent.
    #[error("{}the store {store} is unreachable ({reason}){}",
        fail_closed.as_ref().map(|f| format!("job {}: ", f.job)).unwrap_or_default(),
        fail_closed.as_ref().map(FailClosed::consequence).unwrap_or_default())]
    StoreUnavailable {
        store: String,
        reason: String,
        fail_closed: Option<FailClosed>,
    },

    /// The store answered, but not with a decision (unreachable included,
    /// when no policy applies: see [`StoreError`]).
    #[error("{}{source}", store.as_ref().map(|s| format!("{s}: ")).unwrap_or_default())]
    Store {
        store: Option<String>,
        source: StoreError,
    },

    /// A file or folder that could not be read or written.
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },

    /// A page file already has the name a page was to be written under:
    /// pages are never replaced, so the job stops.
    #[error("job {job}: will not replace {}: a file of that name is already there (pages are never overwritten; another writer in the folder, or a run numbered wrongly?)", path.display())]
    PageExists { job: String, path: PathBuf },

    /// Something of the process itself failed: the async runtime, signal
    /// handlers, stdout, the man page.
    #[error("cannot {what}: {source}")]
    Process {
        what: &'static str,
        source: std::io::Error,
    },

    /// The HTTP client could not be built, or a request URL is not a URL.
    #[error("{what}: {message}")]
    Http { what: &'static str, message: String },

    /// The upstream failed a request for good: it refused it, or it kept
    /// failing after every retry. `url` is shown with secrets redacted.
    #[error("job {job}: {url}: {problem}")]
    Upstream {
        job: String,
        url: String,
        problem: String,
    },

    /// A measurement (`portion bench`) could not talk to the Redis it measures.
    #[error("{what}: {source}")]
    Redis {
        what: String,
        source: redis::RedisError,
    },

    /// A measurement (`portion bench`) could not be made as designed.
    #[error("benchmark: {0}")]
    Benchmark(String),

    /// Something a run needs is another process's for now (a results
    /// database another writer holds at the run's start): nothing was
    /// charged, the next tick tries again (75).
    #[error("{0}")]
    Busy(String),

    /// A job's results database cannot be reached, or its connection was
    /// lost (PostgreSQL): the pages committed stay, the cursor before the
    /// rest; the next tick tries again (69). Names the server, never its
    /// password.
    #[error("{0}")]
    ResultsUnavailable(String),

    /// `portion exec` could not start its command (after the charge was made).
    #[error("cannot run {program}: {source} (its charge was made and stays recorded)")]
    CommandNotStarted {
        program: String,
        source: std::io::Error,
    },
}

/// The job and endpoint a store outage stopped (policy `fail_closed`).
#[derive(Debug)]
pub struct FailClosed {
    pub job: String,
    pub endpoint: String,
    /// The store was unreachable when the run started (else: at a charge).
    pub at_start: bool,
}

impl FailClosed {
    fn consequence(&self) -> String {
        let what = if self.at_start {
            "no request was sent"
        } else {
            "the request was not sent"
        };
        format!("; endpoint {} is fail_closed, so {what}", self.endpoint)
    }
}

impl Error {
    /// The process exit code for this error: the only map from errors to codes.
    pub fn exit_code(&self) -> ExitStatus {
        match self {
            Self::Config { .. } => ExitStatus::CONFIG,
            Self::Usage(_) => ExitStatus::USAGE,
            Self::Busy(_) => ExitStatus::STOPPED,
            Self::StoreUnavailable { .. } | Self::ResultsUnavailable(_) => ExitStatus::UNAVAILABLE,
            Self::Store { source, .. } => match source {
                StoreError::Unavailable(_) => ExitStatus::UNAVAILABLE,
                _ => ExitStatus::FAILURE,
            },
            Self::Io { .. }
            | Self::PageExists { .. }
            | Self::Process { .. }
            | Self::Http { .. }
            | Self::Upstream { .. }
            | Self::Redis { .. }
            | Self::Benchmark(_) => ExitStatus::FAILURE,
            Self::CommandNotStarted { source, .. } => match source.kind() {
                std::io::ErrorKind::NotFound => ExitStatus::NOT_FOUND,
                _ => ExitStatus::CANNOT_EXECUTE,
            },
        }
    }

    /// A store error, said with the store's name (passwords masked).
    pub fn store(store: impl Into<String>, source: StoreError) -> Self {
        Self::Store {
            store: Some(store.into()),
            source,
        }
    }

    /// A Redis command of a measurement that failed.
    pub fn redis(what: impl Into<String>) -> impl FnOnce(redis::RedisError) -> Self {
        let what = what.into();
        move |source| Self::Redis { what, source }
    }
}

impl From<StoreError> for Error {
    fn from(source: StoreError) -> Self {
        Self::Store {
            store: None,
            source,
        }
    }
}

fn config_message(file: &std::path::Path, field: &str, message: &str) -> String {
    if field.is_empty() {
        format!("{}: {message}", file.display())
    } else {
        format!("{}: {field}: {message}", file.display())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::ExitStatus;

    fn run(codes: &[u8]) -> u8 {
        codes
            .iter()
            .map(|&c| ExitStatus::from_code(c))
            .fold(ExitStatus::OK, ExitStatus::then)
            .code()
    }

    #[test]
    fn the_first_error_outranks_a_clean_stop_which_outranks_success() {
        assert_eq!(run(&[]), 0);
        assert_eq!(run(&[0, 75, 0]), 75);
        assert_eq!(run(&[0, 69, 1]), 69);
        assert_eq!(run(&[75, 1, 69]), 1);
        // A stop signal keeping the next job from starting (75) after a
        // job failed keeps the failure.
        assert_eq!(run(&[1, 75]), 1);
        assert_eq!(run(&[69, 75]), 69);
        assert_eq!(run(&[78, 0, 75]), 78);
    }
}
