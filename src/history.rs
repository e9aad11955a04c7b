//! What this host has seen of each credential's log, kept beside the
//! embedded store (`history.json` in the state directory), so that a store
//! that forgot a log is noticed.
//!
//! A Redis without persistence that restarts comes back empty: every
//! credential looks unused and its whole budget is handed out again. The
//! charge serial (charges recorded) only grows, so a store that reports
//! fewer charges than this host has already seen has lost its log; `portion
//! run` and `portion status` say so loudly, until the credential's longest
//! window has passed since it was noticed (by then the lost charges would
//! have left every window anyway).
//!
//! Stores are known by their identity (`Store::identity`): a Redis by its
//! URL, an embedded store by its file's canonical path and the id written
//! inside it (`embedded PATH #ID`). An embedded file deleted and made again
//! is a new store that has forgotten nothing (the demo starts afresh this
//! way); the entry of the store it replaced at that path is dropped.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::ledger::{EmbeddedLedger, Micros};

/// One credential in one store, as this host last saw it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct LastSeen {
    serial: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lost: Option<LostLog>,
}

/// A log the store forgot: when it was noticed, and what it held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostLog {
    pub noticed_at: Micros,
    /// Charges recorded before the loss.
    pub had: u64,
    /// Charges the store reported when the loss was noticed.
    pub found: u64,
}

/// The history file; every operation is best effort (an unreadable or
/// unwritable file only loses the check, never a run).
pub struct History {
    path: Option<PathBuf>,
    seen: BTreeMap<String, BTreeMap<String, LastSeen>>,
}

impl History {
    /// The history beside the default embedded store.
    pub fn open() -> Self {
        let path = EmbeddedLedger::default_path()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("history.json")));
        let seen = path
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        Self { path, seen }
    }

    /// A history kept in memory only, never saved (unit tests).
    #[cfg(test)]
    pub(crate) fn in_memory() -> Self {
        Self {
            path: None,
            seen: BTreeMap::new(),
        }
    }

    /// The charge serial this host last saw `store` report for `credential`
    /// (0: never): a store that reports fewer has lost the log.
    pub fn seen(&self, store: &str, credential: &str) -> u64 {
        self.seen
            .get(store)
            .and_then(|c| c.get(credential))
            .map_or(0, |s| s.serial)
    }

    /// Record that `store` reports `serial` charges for `credential` at
    /// `now`; returns the loss to report, if one was noticed within `keep`.
    pub fn check(
        &mut self,
        store: &str,
        credential: &str,
        serial: u64,
        now: Micros,
        keep: Micros,
    ) -> Option<LostLog> {
        self.forget_replaced(store);
        let seen = self
            .seen
            .entry(store.to_string())
            .or_default()
            .entry(credential.to_string())
            .or_default();
        if serial < seen.serial {
            seen.lost = Some(LostLog {
                noticed_at: now,
                had: seen.serial,
                found: serial,
            });
        }
        seen.serial = serial;
        match seen.lost {
            Some(l) if now - l.noticed_at < keep => Some(l),
            Some(_) => {
                seen.lost = None;
                None
            }
            None => None,
        }
    }

    /// Drop what is known of the stores that `store`, an embedded store,
    /// replaced: another id at the same path, and the entries of builds
    /// that knew embedded stores by their path only. Nothing for a Redis.
    fn forget_replaced(&mut self, store: &str) {
        let Some((path, _id)) = store
            .rsplit_once(" #")
            .filter(|_| store.starts_with("embedded "))
        else {
            return;
        };
        self.seen.retain(|k, _| {
            k == store
                || !k.starts_with("embedded")
                || k.rsplit_once(" #").is_some_and(|(p, _)| p != path)
        });
    }

    /// Write the file back (atomically).
    pub fn save(&self) {
        let Some(path) = &self.path else { return };
        let Some(dir) = path.parent() else { return };
        let _ = crate::atomic_file::create_folder(dir);
        let text = serde_json::to_string_pretty(&self.seen).unwrap_or_default();
        // `+history`: no job's temporary files, whatever the jobs are called.
        let mode = crate::atomic_file::file_mode().unwrap_or(crate::atomic_file::DEFAULT_FILE_MODE);
        let _ = crate::atomic_file::write_atomically(
            dir,
            "+history",
            "history.json",
            text.as_bytes(),
            mode,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history() -> History {
        History {
            path: None,
            seen: BTreeMap::new(),
        }
    }

    #[test]
    fn a_serial_that_went_back_is_a_lost_log_until_the_window_passes() {
        let mut h = history();
        assert_eq!(h.check("redis://r", "c", 10, 100, 50), None);
        assert_eq!(h.check("redis://r", "c", 25, 110, 50), None);
        let lost = h.check("redis://r", "c", 2, 120, 50).expect("noticed");
        assert_eq!((lost.had, lost.found, lost.noticed_at), (25, 2, 120));
        // Still reported while the window may hold the forgotten charges…
        assert!(h.check("redis://r", "c", 4, 160, 50).is_some());
        // …and not after.
        assert_eq!(h.check("redis://r", "c", 5, 171, 50), None);
        // Other stores and credentials are separate.
        assert_eq!(h.check("redis://other", "c", 0, 120, 50), None);
    }

    #[test]
    fn an_embedded_store_made_again_is_a_new_store() {
        let mut h = history();
        h.seen
            .insert("embedded out/demo/ledger.sqlite3".into(), BTreeMap::new());
        h.seen.insert("embedded".into(), BTreeMap::new());
        assert_eq!(
            h.check("embedded /d/ledger.sqlite3 #a1", "c", 30, 100, 50),
            None
        );
        assert_eq!(
            h.check("embedded /e/ledger.sqlite3 #b2", "c", 7, 100, 50),
            None
        );
        assert_eq!(h.check("redis://r", "c", 9, 100, 50), None);
        // The same file put back older: the same store, which forgot.
        assert!(
            h.check("embedded /d/ledger.sqlite3 #a1", "c", 20, 110, 50)
                .is_some()
        );
        // Deleted and made again: a new id, nothing forgotten, and the
        // replaced store's entry (and the path-only ones of older builds) dropped.
        assert_eq!(
            h.check("embedded /d/ledger.sqlite3 #c3", "c", 0, 120, 50),
            None
        );
        let keys: Vec<&str> = h.seen.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "embedded /d/ledger.sqlite3 #c3",
                "embedded /e/ledger.sqlite3 #b2",
                "redis://r"
            ]
        );
    }
}
