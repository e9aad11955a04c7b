//! The commands: each takes checked inputs and does one job. This module
//! starts the async runtime and dispatches.

pub mod bench;

use crate::Result;
use crate::cli::{Cli, Command};

/// Run the command `cli` names; returns the exit code of a normal finish.
pub fn run(cli: Cli) -> Result<u8> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| crate::Error::Other(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async move {
        match cli.command {
            Command::Bench(args) => bench::run(cli.store.as_deref(), &args).await,
        }
    })
}
