//! The `portion` binary: parse arguments, set up logging, run the command, map
//! the outcome to an exit code. Everything else lives in the library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = portion::cli::Cli::parse();
    portion::logging::init(cli.log_format, cli.log_level());
    match portion::commands::dispatch(cli) {
        Ok(code) => code.into(),
        Err(e) => {
            eprintln!("portion: {e}");
            e.exit_code().into()
        }
    }
}
