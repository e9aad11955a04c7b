//! The one error type of `quota`, and the exit code each kind maps to
//! (sysexits, as PRODUCT.md lists them).

use std::path::PathBuf;

use crate::ledger::StoreError;

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
    /// The store cannot be reached and the policy says stop.
    #[error("{0}")]
    StoreUnavailable(String),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Config { .. } => 78,
            Self::Usage(_) => 2,
            Self::StoreUnavailable(_) => 69,
            Self::Other(_) => 1,
        }
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(_) => Self::StoreUnavailable(e.to_string()),
            other => Self::Other(other.to_string()),
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
