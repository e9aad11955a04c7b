//! The `quota` binary: parse arguments, set up logging, run the command, map
//! the outcome to an exit code. Everything else lives in the library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = quota::cli::Cli::parse();
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(cli.log_level()));
    // HTTP internals may log request URLs, which carry API keys: they stay
    // at info whatever RUST_LOG asks.
    for quiet in [
        "hyper=info",
        "hyper_util=info",
        "reqwest=info",
        "h2=info",
        "rustls=info",
    ] {
        filter = filter.add_directive(quiet.parse().expect("a valid directive"));
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .init();
    match quota::commands::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("quota: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
