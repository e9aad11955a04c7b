//! What the commands share about where they run, written once: the store's
//! name as messages show it, whether stdout gets colour, and opening the
//! store with its errors told the one way (unreachable 69, anything else 1).

use std::io::IsTerminal;

use crate::Error;
use crate::ledger::{Store, StoreError, StoreLocation};

/// The store as messages name it (passwords masked): a Redis URL, or
/// `embedded PATH`.
pub fn store_name(location: &StoreLocation) -> String {
    match location {
        StoreLocation::Redis(url) => crate::ledger::redact_url(url),
        StoreLocation::Embedded(Some(p)) => format!("embedded {}", p.display()),
        StoreLocation::Embedded(None) => "embedded".into(),
    }
}

/// Colour only on a terminal, and never with `NO_COLOR` set.
pub fn colour_on_stdout() -> bool {
    std::io::stdout().is_terminal() && crate::logging::no_color_unset()
}

/// Open the store (an embedded one is created if it does not exist yet).
pub async fn open(location: &StoreLocation) -> crate::Result<Store> {
    Store::open(location)
        .await
        .map_err(|e| store_error(&store_name(location), e))
}

/// Open the store only if it exists (Redis always does): read-only
/// commands create nothing.
pub async fn open_existing(location: &StoreLocation) -> crate::Result<Option<Store>> {
    Store::open_existing(location)
        .await
        .map_err(|e| store_error(&store_name(location), e))
}

/// What the store named `name` said, as the command's error: unreachable
/// is 69 (no policy applies outside a run), anything else 1.
pub fn store_error(name: &str, e: StoreError) -> Error {
    match e {
        StoreError::Unavailable(reason) => Error::StoreUnavailable {
            store: name.to_string(),
            reason,
            fail_closed: None,
        },
        other => Error::store(name, other),
    }
}
