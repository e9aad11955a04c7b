//! `portion unblock CREDENTIAL`: lift an upstream block before it ends, for an
//! operator who knows the upstream's quota is back (it was raised, or the
//! upstream answered 429 for a reason of its own). Every host sees it at its
//! next charge.

use super::context;
use super::table::emit;
use crate::config::Config;
use crate::ledger::{Ledger, StoreLocation};
use crate::timefmt::local_datetime;
use crate::{ExitStatus, Result};

pub async fn execute(
    config: &Config,
    location: &StoreLocation,
    credential: &str,
) -> Result<ExitStatus> {
    config.credential_named(credential)?;
    let store = context::open(location).await?;
    let store_name = context::store_name(location);
    let lifted = store
        .unblock(credential)
        .await
        .map_err(|e| context::store_error(&store_name, e))?;
    emit(&match lifted {
        Some((until, reason)) => format!(
            "credential {credential}: block lifted in {store_name} (it ran until {}: {reason})\n",
            local_datetime(until)
        ),
        None => format!("credential {credential} was not blocked in {store_name}\n"),
    })
}
