//! `quota`: spend a metered API's quota safely from cron jobs and systemd
//! timers, on one host or many.
//!
//! Data flows one way: config → plan → charge → call → write → cursor.
//!
//! * [`config`]: the YAML file, parsed and validated into typed values.
//! * [`ledger`]: the exact sliding-window log (Redis and embedded stores).
//! * [`runner`]: one run of a job: lock, cursor, charge, call, write.
//! * [`cli`]: the command-line types; [`commands`]: what each command does.
//! * [`error`]: the one error type and its exit codes.

pub mod cli;
pub mod commands;
pub mod config;
pub mod error;
pub mod history;
pub mod ledger;
pub mod logging;
pub mod runner;
pub mod timefmt;

pub use error::{Error, Result};
