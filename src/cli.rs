//! The command-line interface: every flag and subcommand, in one place.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::logging::LogFormat;

/// Spend a metered API's quota safely from cron jobs and systemd timers.
#[derive(Debug, Parser)]
#[command(name = "portion", version, about)]
pub struct Cli {
    /// The configuration file [default: ./portion.yaml]
    #[arg(
        short,
        long,
        global = true,
        value_name = "FILE",
        env = "PORTION_CONFIG"
    )]
    pub config: Option<PathBuf>,

    /// Where the ledger lives: embedded, embedded:PATH, redis://…,
    /// rediss://…, redis+cluster://…, redis+sentinel://… [default: the file's
    /// `store:`, else embedded]
    // The value may hold a password: help never shows it.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "PORTION_STORE",
        hide_env_values = true
    )]
    pub store: Option<String>,

    /// More log output (-v: debug, -vv: trace)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Less log output (-q: warnings and errors only, -qq: errors only)
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "verbose")]
    pub quiet: u8,

    /// Log format on stderr: human (plain, without timestamps under the
    /// journal) or json (one object per line, for log shippers)
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,

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
    /// Run the named jobs (all, if none named): charge before every call,
    /// stop cleanly (exit 75) when the quota says no, resume next time
    Run(RunArgs),

    /// Per credential, pool and window: budget, used, remaining, when units
    /// free up, who spent them, and a chart of usage over the window
    Status(StatusArgs),

    /// Validate the configuration (secrets included: present, never printed)
    /// and print what it resolved, without touching the store or the network
    Check,

    /// Print shell completions for SHELL to stdout
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },

    /// Lift CREDENTIAL's upstream block now (when you know the upstream's
    /// quota is back before the block ends)
    Unblock {
        /// The credential, as the configuration names it
        credential: String,
    },

    /// Forget JOB's cursor and, for a once-job, which inputs are done and
    /// which keys were seen: its next run starts afresh (pages stay)
    Reset {
        /// The job, as the configuration names it
        job: String,
        /// Do it (without it, say what would be forgotten and exit 2)
        #[arg(long)]
        yes: bool,
        /// Only have the next run do the job's failed inputs again (its
        /// cursor and the inputs done are kept)
        #[arg(long)]
        failed: bool,
    },

    /// Print the man page (roff) to stdout
    Man,

    /// Charge one call's cost to CREDENTIAL's ledger, for a script that is
    /// not a YAML job: exit 0 admitted, 75 refused (why and when on
    /// stderr), 69 store unreachable, 78 configuration
    Charge(ChargeArgs),

    /// Charge, then run COMMAND and exit with its exit code; exit 75
    /// without running it when the charge is refused
    Exec(ExecArgs),

    /// Measure the ledger against a Redis: round trips, charge latency and
    /// throughput, memory per logged call
    Bench(BenchArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Jobs to run, in the file's order [default: all]
    #[arg(value_name = "JOB")]
    pub jobs: Vec<String>,

    /// Plan instead: no request, no charge, no cursor or lock change
    #[arg(long)]
    pub dry_run: bool,

    /// With --dry-run: print the plan as JSON
    #[arg(long, requires = "dry_run")]
    pub json: bool,

    /// After the run, write its outcome (exit code, calls, units per pool,
    /// duration, stop reason, pages written) to PATH as OpenMetrics text,
    /// atomically: for node_exporter's textfile collector
    #[arg(long, value_name = "PATH", conflicts_with = "dry_run")]
    pub metrics_file: Option<PathBuf>,

    /// When the ledger refuses a charge and says the units free up within
    /// DURATION (at most 1d), wait for them inside the run rather than
    /// stopping with 75 [default: each job's max_wait, 0 unless set]
    #[arg(long, value_name = "DURATION", value_parser = wait_bound)]
    pub wait: Option<Duration>,
}

/// `run --wait`: a duration, at most a day.
fn wait_bound(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d > Duration::from_secs(24 * 3600) {
        return Err(format!("{s} is out of range: at most 1d"));
    }
    Ok(d)
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Only this credential [default: all]
    pub credential: Option<String>,

    /// Print JSON (the shape is documented in the README); the same as
    /// `--format json`
    #[arg(long, conflicts_with = "format")]
    pub json: bool,

    /// Output format: text (a table), json, or openmetrics (for a scraper
    /// or node_exporter's textfile collector) [default: text]
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<StatusFormat>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusFormat {
    Text,
    Json,
    Openmetrics,
}

impl StatusArgs {
    /// The format asked for: `--format`, else `--json`, else text.
    pub fn format(&self) -> StatusFormat {
        match (self.format, self.json) {
            (Some(f), _) => f,
            (None, true) => StatusFormat::Json,
            (None, false) => StatusFormat::Text,
        }
    }
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Requests per measurement
    #[arg(long, default_value_t = 20_000)]
    pub requests: usize,

    /// Concurrent clients for the throughput measurements
    #[arg(long, default_value_t = 50)]
    pub clients: usize,

    /// Rounds of the throughput measurements (the median round is reported)
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,

    /// Logged calls for the memory measurement
    #[arg(long, default_value_t = 10_000)]
    pub memory_calls: usize,

    /// Print the figures as JSON
    #[arg(long)]
    pub json: bool,

    /// Measure capacity instead: charges per second and p99 latency with
    /// 1, 50 and 200 clients over 1, 100 and 10,000 credentials (and, on a
    /// Cluster, how the charges spread over its masters)
    #[arg(long)]
    pub capacity: bool,

    /// With --capacity: also measure this store at 1 client, and compare
    /// (e.g. a single node beside the Cluster of --store)
    #[arg(long, value_name = "URL", requires = "capacity")]
    pub baseline: Option<String>,
}

/// What `portion charge` and `portion exec` charge, and how long they wait.
#[derive(Debug, Args)]
pub struct ChargeSpec {
    /// The credential, as the configuration names it
    pub credential: String,

    /// What one call costs: POOL=N[,POOL=N]… (repeatable), or N alone when
    /// the credential has a single pool
    #[arg(long, value_name = "POOL=N[,POOL=N]", required = true)]
    pub cost: Vec<String>,

    /// Wait up to DURATION for the units (sleeping until the time the
    /// ledger says they free up, then charging again) instead of exiting 75
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub wait: Option<Duration>,

    /// The endpoint name the charge is tagged with in `status`
    /// [default: charge for `portion charge`, exec for `portion exec`]
    #[arg(long, value_name = "NAME")]
    pub endpoint: Option<String>,

    /// The job name the charge is tagged with in `status`
    #[arg(long, value_name = "NAME", default_value = "cli")]
    pub job: String,
}

#[derive(Debug, Args)]
pub struct ChargeArgs {
    #[command(flatten)]
    pub spec: ChargeSpec,

    /// Print the decision and what remains per pool and window as JSON
    /// (the shape is documented in the README)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    #[command(flatten)]
    pub spec: ChargeSpec,

    /// The command to run once the charge is admitted, after `--`
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}
