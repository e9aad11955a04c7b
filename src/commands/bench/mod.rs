//! `portion bench`: measure the ledger against a real Redis, so operators can
//! size a deployment. This module is the command: it checks the store and
//! the flags, runs one of the two benchmarks and prints its report.
//! [`charge`] measures what one charge costs beside its floor;
//! [`capacity`] (`--capacity`) measures many clients over many credentials.
//! Both use the same instruments, from [`measure`].

mod capacity;
mod charge;
mod measure;

use serde::Serialize;

use super::table::emit;
use crate::cli::BenchArgs;
use crate::ledger::StoreLocation;
use crate::{Error, ExitStatus, Result};

/// The `portion bench` command.
pub async fn execute(store: Option<&str>, args: &BenchArgs) -> Result<ExitStatus> {
    let url = match store.map(StoreLocation::parse) {
        Some(Ok(StoreLocation::Redis(url))) => url,
        Some(Err(e)) => return Err(Error::Usage(e)),
        _ => {
            return Err(Error::Usage(
                "portion bench measures a Redis: name it with --store redis://HOST:PORT/DB or $PORTION_STORE".into(),
            ));
        }
    };
    if args.capacity {
        let c = capacity::measure(&url, args).await?;
        return if args.json {
            json(&c)
        } else {
            emit(&capacity::render(&c))
        };
    }
    if args.clients == 0 || args.requests == 0 || args.memory_calls == 0 || args.rounds == 0 {
        return Err(Error::Usage(
            "--clients, --requests, --rounds and --memory-calls must be positive".into(),
        ));
    }
    let r = charge::measure(&url, args).await?;
    if args.json {
        json(&r)
    } else {
        emit(&charge::render(&r, args))
    }
}

/// A report as pretty JSON, on a line of its own.
fn json(report: &impl Serialize) -> Result<ExitStatus> {
    let text = serde_json::to_string_pretty(report).expect("a report serializes");
    emit(&(text + "\n"))
}
