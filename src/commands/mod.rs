//! The commands: each takes checked inputs and does one job. This module
//! loads the configuration, resolves the store, starts the async runtime
//! and dispatches.

pub mod bench;
pub mod check;
pub mod run;
pub mod standin;

use crate::cli::{Cli, Command};
use crate::config::Config;
use crate::ledger::StoreLocation;
use crate::{Error, Result};

/// Run the command `cli` names; returns the exit code of a normal finish.
pub fn run(cli: Cli) -> Result<u8> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Other(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async move {
        match cli.command {
            Command::Bench(ref args) => bench::run(cli.store.as_deref(), args).await,
            Command::Standin(args) => standin::run(args).await,
            Command::Check => {
                let config = Config::load(&Config::path(cli.config.as_deref()))?;
                let store = store_location(cli.store.as_deref(), &config)?;
                check::run(&config, &store)
            }
            Command::Run(ref args) => {
                let config = Config::load(&Config::path(cli.config.as_deref()))?;
                let store = store_location(cli.store.as_deref(), &config)?;
                run::run(&config, &store, args).await
            }
        }
    })
}

/// The store: `--store` (or `$QUOTA_STORE`), else the file's `store:`, else
/// the embedded default.
fn store_location(flag: Option<&str>, config: &Config) -> Result<StoreLocation> {
    match flag {
        Some(s) => StoreLocation::parse(s).map_err(|m| Error::Usage(format!("--store: {m}"))),
        None => Ok(config
            .store
            .clone()
            .unwrap_or(StoreLocation::Embedded(None))),
    }
}
