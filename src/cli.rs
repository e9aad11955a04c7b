//! The command-line interface: every flag and subcommand, in one place.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Spend a metered API's quota safely from cron jobs and systemd timers.
#[derive(Debug, Parser)]
#[command(name = "quota", version, about)]
pub struct Cli {
    /// The configuration file [default: ./quota.yaml]
    #[arg(short, long, global = true, value_name = "FILE", env = "QUOTA_CONFIG")]
    pub config: Option<PathBuf>,

    /// Where the ledger lives: redis://…, rediss://…, embedded or embedded:PATH
    /// [default: the file's `store:`, else embedded]
    #[arg(long, global = true, value_name = "URL", env = "QUOTA_STORE")]
    pub store: Option<String>,

    /// More log output (-v: debug, -vv: trace)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Less log output (-q: warnings and errors only, -qq: errors only)
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "verbose")]
    pub quiet: u8,

    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The log filter that -v/-q ask for, used when RUST_LOG is not set.
    pub fn log_level(&self) -> &'static str {
        match (self.verbose, self.quiet) {
            (0, 0) => "info",
            (1, _) => "debug",
            (v, _) if v >= 2 => "trace",
            (_, 1) => "warn",
            _ => "error",
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Measure the ledger against a Redis: round trips, charge latency and
    /// throughput, memory per logged call
    Bench(BenchArgs),
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Requests per measurement
    #[arg(long, default_value_t = 20_000)]
    pub requests: usize,

    /// Concurrent clients for the throughput measurements
    #[arg(long, default_value_t = 50)]
    pub clients: usize,

    /// Logged calls for the memory measurement
    #[arg(long, default_value_t = 10_000)]
    pub memory_calls: usize,

    /// Print the figures as JSON
    #[arg(long)]
    pub json: bool,
}
