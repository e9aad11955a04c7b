//! What more than one command shows or checks, written once so that no
//! command uses another's room: a job of inputs' progress ([`inputs`]),
//! each share's figures ([`shares`]), both shown by `status` and
//! `run --dry-run`, and a job's rows ([`rows`]), named by `check` and
//! `run --dry-run` and checked apart from the store by `check` and `run`.

pub mod inputs;
pub mod rows;
pub mod shares;
