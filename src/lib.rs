//! `portion`: spend a metered API's quota safely from cron jobs and systemd
//! timers, on one host or many.
//!
//! Data flows one way: config → plan → charge → call → write → cursor.
//! The rooms below stand in layers, each using only rooms of the layers
//! under its own (`src/layers.rs` lists them; its test reads every
//! `crate::` path against them).
//!
//! * [`cli`]: the command-line types; [`commands`]: one module per command,
//!   each taking checked inputs and doing one job.
//! * [`config`]: the YAML file, parsed (`raw`) and validated into typed
//!   values, secrets behind a redacting type.
//! * [`ledger`]: the exact sliding-window log, its vocabulary and trait, and
//!   its two stores (Redis, embedded SQLite). Redis runs the scripts of
//!   `lua/` (`lua/charge/`: the charge's parts), each built at load behind
//!   a prelude of the layout's constants from their Rust values.
//! * [`inputs`]: a job's file of inputs read as a stream of records (key,
//!   fields, where each lies), what a once-job keeps of the part it did, and
//!   when the rest will be done.
//! * [`page_scan`]: a page read as a stream, only what a pointer names:
//!   the one reader of page bodies, for the wire and the sinks alike.
//! * [`upstream`]: the wire: one request made, its answer read (the one
//!   table of what each answer does), pagination, the upstream's counts.
//! * [`sink`]: where results go: page files in a folder, rows in SQLite.
//! * [`runner`]: one run of a job: lock, cursor, charge, call, write; its
//!   metering (charge, settle, block) a type of its own, the `Meter`, and
//!   its work keys (regions, or the inputs of a file) `runner::Key`.
//! * [`history`]: what this host has seen of each credential's log, so a
//!   store that forgot one is noticed.
//! * [`atomic_file`]: files written so no reader sees part of one.
//! * [`page_name`]: what page files are called, for the configuration's
//!   checks and the run's writes alike.
//! * [`metrics`]: OpenMetrics text of the status and of a run's outcome.
//! * [`logging`], [`timefmt`]: log set-up; how times and durations are shown.
//! * [`error`]: the one error type, and the one map to exit codes.
//!
//! The stand-in upstream of the demo and the tests is a package of its own
//! in the workspace (`standin/`, the binary `portion-standin`), not part of
//! this library or of `portion`: `cargo install --path .` installs `portion`
//! alone.

#[cfg(test)]
mod answers_table;
pub mod atomic_file;
pub mod cli;
pub mod commands;
pub mod config;
pub mod error;
#[cfg(test)]
mod files_made;
pub mod folder_sync;
pub mod history;
pub mod inputs;
#[cfg(test)]
mod layers;
pub mod ledger;
pub mod logging;
pub mod metrics;
pub mod page_name;
#[cfg(test)]
mod page_readers;
pub mod page_scan;
pub mod runner;
pub mod sink;
pub mod timefmt;
pub mod upstream;

pub use error::{Error, ExitStatus, Result};
