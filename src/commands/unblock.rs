//! `quota unblock CREDENTIAL`: lift an upstream block before it ends, for an
//! operator who knows the upstream's quota is back (it was raised, or the
//! upstream answered 429 for a reason of its own). Every host sees it at its
//! next charge.

use super::table::emit;
use crate::config::Config;
use crate::ledger::{Ledger, Store, StoreError, StoreLocation};
use crate::timefmt::local_datetime;
use crate::{Error, ExitStatus, Result};

pub async fn execute(
    config: &Config,
    location: &StoreLocation,
    credential: &str,
) -> Result<ExitStatus> {
    if !config.credentials.iter().any(|c| c.name == credential) {
        let known: Vec<&str> = config.credentials.iter().map(|c| c.name.as_str()).collect();
        return Err(Error::Usage(format!(
            "no credential named '{credential}' in {} (credentials: {})",
            config.file.display(),
            known.join(", ")
        )));
    }
    let store_name = super::store_name(location);
    let store = Store::open(location).await.map_err(|e| match e {
        StoreError::Unavailable(reason) => Error::StoreUnavailable {
            store: store_name.clone(),
            reason,
            fail_closed: None,
        },
        other => Error::store(store_name.clone(), other),
    })?;
    let lifted = store
        .unblock(credential)
        .await
        .map_err(|e| Error::store(store_name.clone(), e))?;
    emit(&match lifted {
        Some((until, reason)) => format!(
            "credential {credential}: block lifted in {store_name} (it ran until {}: {reason})\n",
            local_datetime(until)
        ),
        None => format!("credential {credential} was not blocked in {store_name}\n"),
    })
}
