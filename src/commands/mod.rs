//! The commands: each takes checked inputs and does one job. This module
//! loads the configuration, resolves the store, starts the async runtime
//! and dispatches.

pub mod bench;
pub mod charge;
pub mod check;
pub mod common;
pub mod context;
pub mod man;
pub mod plan;
pub mod reset;
pub mod run;
pub mod status;
pub mod table;
pub mod unblock;

use clap::CommandFactory;

use crate::cli::{Cli, Command};
use crate::config::{Config, Secrets};
use crate::ledger::StoreLocation;
use crate::{Error, ExitStatus, Result};

/// Run the command `cli` names; returns the exit code of a normal finish.
pub fn dispatch(cli: Cli) -> Result<ExitStatus> {
    // `charge` and `exec` make one charge, often from a shell loop: one
    // thread starts faster than a pool of them, and is all they need.
    let mut builder = match cli.command {
        Command::Charge(_) | Command::Exec(_) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = builder
        .enable_all()
        .build()
        .map_err(|source| Error::Process {
            what: "start the runtime",
            source,
        })?;
    runtime.block_on(async move {
        match cli.command {
            Command::Charge(ref args) => {
                file_mode_checked()?;
                let (config, store) = configured(&cli, Secrets::Skip)?;
                charge::execute(&config, &store, args).await
            }
            Command::Exec(ref args) => {
                file_mode_checked()?;
                let (config, store) = configured(&cli, Secrets::Skip)?;
                charge::exec::execute(&config, &store, args).await
            }
            Command::Bench(ref args) => bench::execute(cli.store.as_deref(), args).await,
            Command::Status(ref args) => {
                let (config, store) = configured(&cli, Secrets::Skip)?;
                status::execute(&config, &store, args).await
            }
            Command::Completions { shell } => {
                let mut out = Vec::new();
                clap_complete::generate(shell, &mut Cli::command(), "portion", &mut out);
                table::emit(&String::from_utf8_lossy(&out))
            }
            Command::Man => man::execute(),
            Command::Unblock { ref credential } => {
                file_mode_checked()?;
                let (config, store) = configured(&cli, Secrets::Skip)?;
                unblock::execute(&config, &store, credential).await
            }
            Command::Reset {
                ref job,
                yes,
                failed,
            } => {
                file_mode_checked()?;
                let (config, store) = configured(&cli, Secrets::Skip)?;
                reset::execute(&config, &store, job, yes, failed).await
            }
            Command::Check => {
                let (config, store) = configured(&cli, Secrets::ReadVisible)?;
                check::execute(&config, &store)
            }
            Command::Run(ref args) if args.dry_run => {
                let (config, store) = configured(&cli, Secrets::Skip)?;
                // (a plan of rows going into the store's own file is no plan)
                let jobs = config.select_jobs(&args.jobs)?;
                common::rows::rows_apart(&config, jobs.iter().copied(), &store)?;
                plan::execute(&config, &store, args).await
            }
            Command::Run(ref args) => {
                // Recorded from the start, so that a configuration error
                // (78) still writes its outcome to --metrics-file.
                let mut outcome = run::outcome::RunOutcome::start();
                let result = match file_mode_checked()
                    .and_then(|()| configured(&cli, Secrets::Read))
                {
                    Ok((config, store)) => run::execute(&config, &store, args, &mut outcome).await,
                    Err(e) => Err(e),
                };
                outcome.finish(args.metrics_file.as_deref(), result)
            }
        }
    })
}

/// A wrong `PORTION_FILE_MODE` (exit 2), found before a command that may
/// create a file (the store, its folder, a page, the history) creates any.
fn file_mode_checked() -> Result<()> {
    crate::atomic_file::file_mode()
        .map(|_| ())
        .map_err(Error::Usage)
}

/// The configuration file `-c` names (else `$PORTION_CONFIG`, else
/// `./portion.yaml`), loaded, and the store to use with it.
fn configured(cli: &Cli, secrets: Secrets) -> Result<(Config, StoreLocation)> {
    let file = Config::path(cli.config.as_deref());
    let config = match secrets {
        Secrets::Read => Config::load(&file)?,
        Secrets::ReadVisible => Config::load_visible(&file)?,
        Secrets::Skip => Config::load_without_secrets(&file)?,
    };
    let store = store_location(cli.store.as_deref(), &config)?;
    Ok((config, store))
}

/// The store: `--store` (or `$PORTION_STORE`), else the file's `store:`, else
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
