//! What a job keeps in the store besides its cursor, in one place: the
//! name of every map ([`Map`], the one place that builds them), and each
//! map's records as types, read and written here for the run, `status`,
//! `reset` and the plan alike. A map's entries are text in the store
//! (a hash field in Redis, a row in the embedded store); what each holds
//! is said by its reader here, not by each caller.
//!
//! The maps, by job `J`:
//! * `J:conditional`: validators and incremental values (the run's
//!   `Conditional` reads and writes its fields);
//! * `J:not_modified`: calls answered 304 and the units they gave back;
//! * `J:inputs:failed`, `J:inputs:retry`: failed inputs, and those
//!   `reset --failed` asked to do again ([`FailedInput`]);
//! * `J:inputs:done`: a once-job's done part, chunk by chunk;
//! * `J:inputs:keys[:WALK]`: the keys a walk of the inputs file has seen.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ledger::{JobStore, Store, StoreError};

/// A map a job keeps in the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Map {
    /// Validators and incremental values.
    Conditional,
    /// Calls answered 304, over the job's runs.
    NotModified,
    /// Failed inputs (key → [`FailedInput`]).
    Failed,
    /// Failed inputs to do again (key → [`FailedInput`], `""` once done).
    Retry,
    /// A once-job's done part (chunk number → chunk).
    Done,
    /// The keys a walk of the inputs file has seen (key → line:run): a
    /// once-job's one walk (`None`), or walk `Some(N)` of a job that is
    /// not once. Made by [`Map::seen`].
    Seen { walk: Option<u64> },
    /// What a run of the job waits for inside itself, while it waits
    /// (one entry, [`RunWaiting`]).
    Waiting,
}

/// The store's name for the values of `job`'s fan-out `step` in `region`
/// (a list, not a map: kept where cursors are, under a name no job has,
/// `:` being in none). One list a region and step: a walk's list is
/// emptied once it is done, and the next walk's takes its place.
pub fn values_list(job: &str, region: &str, step: usize) -> String {
    format!(
        "{job}:values:{}:s{step}",
        crate::page_name::encode_region(region)
    )
}

/// The map of the values a fan-out's list `list` ([`values_list`]) holds,
/// by value: how a value is found once.
pub fn values_seen(list: &str) -> String {
    format!("{list}:seen")
}

impl Map {
    /// The store's name of this map of `job`'s: the one place map names
    /// are made.
    pub fn name(self, job: &str) -> String {
        match self {
            Map::Conditional => format!("{job}:conditional"),
            Map::NotModified => format!("{job}:not_modified"),
            Map::Failed => format!("{job}:inputs:failed"),
            Map::Retry => format!("{job}:inputs:retry"),
            Map::Done => format!("{job}:inputs:done"),
            Map::Seen { walk: None } => format!("{job}:inputs:keys"),
            Map::Seen { walk: Some(walk) } => format!("{job}:inputs:keys:{walk}"),
            Map::Waiting => format!("{job}:waiting"),
        }
    }

    /// The map of the keys walk `walk` of a job's file has seen: a
    /// once-job has one walk, whatever its number.
    pub fn seen(once: bool, walk: u64) -> Self {
        Map::Seen {
            walk: (!once).then_some(walk),
        }
    }
}

/// A failed input as the store keeps it: where it is in the file, and the
/// answer that failed it (status 0: none, or not sent; the excerpt's
/// secrets masked when it was recorded).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FailedInput {
    /// Its key: the map's field, so not in the kept text (but in what
    /// `status --json` shows).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    #[serde(default)]
    pub line: u64,
    /// Where its line starts in the file: kept (see [`Self::text`]), not
    /// shown.
    #[serde(default, skip_serializing)]
    pub offset: u64,
    #[serde(default)]
    pub status: u16,
    #[serde(default)]
    pub excerpt: String,
}

impl FailedInput {
    /// A kept entry read back (an entry that cannot be read: its key
    /// alone, line 0).
    fn read(key: String, text: &str) -> Self {
        FailedInput {
            key,
            ..serde_json::from_str(text).unwrap_or_default()
        }
    }

    /// As the store keeps it: its place (offset included, to read it back
    /// from there) and its answer, without the key (the map's field).
    fn text(&self) -> String {
        serde_json::json!({
            "line": self.line,
            "offset": self.offset,
            "status": self.status,
            "excerpt": self.excerpt,
        })
        .to_string()
    }
}

/// Calls a job's runs had answered 304, and the units they gave back by
/// pool.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NotModified {
    pub calls: u64,
    pub units_saved: BTreeMap<String, u64>,
}

/// What a run waits for inside itself (`max_wait`), as `status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunWaiting {
    /// The pool whose units it waits for (empty: the credential's block).
    pub pool: String,
    /// The units its charge asks of that pool.
    pub units: u64,
    /// Until when (microseconds since the epoch, this host's clock).
    pub until: i64,
    /// Why: the ledger's refusal, in words.
    pub why: String,
}

/// A job's maps in one store.
pub struct JobState<'s> {
    store: &'s Store,
    job: &'s str,
}

impl<'s> JobState<'s> {
    pub fn new(store: &'s Store, job: &'s str) -> Self {
        JobState { store, job }
    }

    fn name(&self, map: Map) -> String {
        map.name(self.job)
    }

    /// Every entry of `map`.
    pub async fn read(&self, map: Map) -> Result<Vec<(String, String)>, StoreError> {
        self.store.map_read(&self.name(map)).await
    }

    /// The entries of `map` for `fields`, in their order (`None`: none).
    pub async fn get(
        &self,
        map: Map,
        fields: &[String],
    ) -> Result<Vec<Option<String>>, StoreError> {
        self.store.map_get(&self.name(map), fields).await
    }

    /// Set `entries` of `map` (`""` forgets a field).
    pub async fn put(&self, map: Map, entries: &[(String, String)]) -> Result<(), StoreError> {
        self.store.map_put(&self.name(map), entries).await
    }

    /// Set the `entries` of `map` whose field it does not have yet; the
    /// value each field holds after (its own, or the one already there).
    pub async fn put_new(
        &self,
        map: Map,
        entries: &[(String, String)],
    ) -> Result<Vec<String>, StoreError> {
        self.store.map_put_new(&self.name(map), entries).await
    }

    /// Forget `map` whole.
    pub async fn forget(&self, map: Map) -> Result<(), StoreError> {
        self.store.map_forget(&self.name(map)).await
    }

    /// How many entries `map` has.
    pub async fn len(&self, map: Map) -> Result<u64, StoreError> {
        self.store.map_len(&self.name(map)).await
    }

    /// Note what a run waits for, or (`None`) that it waits no more.
    pub async fn set_waiting(&self, waiting: Option<&RunWaiting>) -> Result<(), StoreError> {
        match waiting {
            Some(w) => {
                let text = serde_json::to_string(w).expect("a wait always serializes");
                self.put(Map::Waiting, &[("run".into(), text)]).await
            }
            None => self.forget(Map::Waiting).await,
        }
    }

    /// What a run of the job waits for, as it last noted (it may have
    /// ended since: the caller compares `until` with the time).
    pub async fn waiting(&self) -> Result<Option<RunWaiting>, StoreError> {
        let kept = self.get(Map::Waiting, &["run".into()]).await?;
        Ok(kept
            .into_iter()
            .flatten()
            .next()
            .and_then(|t| serde_json::from_str(&t).ok()))
    }

    /// Record `input` as failed (in [`Map::Failed`]).
    pub async fn record_failed(&self, input: &FailedInput) -> Result<(), StoreError> {
        self.put(Map::Failed, &[(input.key.clone(), input.text())])
            .await
    }

    /// The failed inputs of `map` ([`Map::Failed`] or [`Map::Retry`]),
    /// those already done again (an empty entry) left out.
    pub async fn failed(&self, map: Map) -> Result<Vec<FailedInput>, StoreError> {
        Ok(self
            .read(map)
            .await?
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(key, v)| FailedInput::read(key, &v))
            .collect())
    }

    /// The failed inputs moved to those the next run does again (with
    /// those a reset asked for before, not yet done): how many there are.
    pub async fn retry_failed(&self) -> Result<usize, StoreError> {
        let failed = self.read(Map::Failed).await?;
        self.put(Map::Retry, &failed).await?;
        self.forget(Map::Failed).await?;
        Ok(self.failed(Map::Retry).await?.len())
    }

    /// The calls answered 304 the job's runs counted.
    pub async fn not_modified(&self) -> Result<NotModified, StoreError> {
        let mut n = NotModified::default();
        for (field, value) in self.read(Map::NotModified).await? {
            let Ok(v) = value.parse::<u64>() else {
                continue;
            };
            match field.strip_prefix("units ") {
                Some(pool) => {
                    n.units_saved.insert(pool.to_string(), v);
                }
                None if field == "calls" => n.calls = v,
                None => {}
            }
        }
        Ok(n)
    }

    /// Add a run's `calls` answered 304 and the units they gave back to
    /// the job's counts.
    pub async fn add_not_modified(
        &self,
        calls: u64,
        saved: &BTreeMap<String, u64>,
    ) -> Result<(), StoreError> {
        let mut n = self.not_modified().await?;
        n.calls += calls;
        for (pool, units) in saved {
            *n.units_saved.entry(pool.clone()).or_default() += units;
        }
        let entries: Vec<(String, String)> = std::iter::once(("calls".to_string(), n.calls))
            .chain(
                (n.units_saved.into_iter()).map(|(pool, units)| (format!("units {pool}"), units)),
            )
            .map(|(f, v)| (f, v.to_string()))
            .collect();
        self.put(Map::NotModified, &entries).await
    }

    /// Forget what the job kept of its walks: validators and incremental
    /// values, and for a job of inputs (`seen`: the map of the keys its
    /// walk saw, [`Map::seen`]) the keys seen, the done part, the failed
    /// inputs and those to do again. What `portion reset JOB` does besides
    /// its cursor.
    pub async fn forget_walks(&self, seen: Option<Map>) -> Result<(), StoreError> {
        self.forget(Map::Conditional).await?;
        if let Some(seen) = seen {
            for map in [seen, Map::Done, Map::Failed, Map::Retry] {
                self.forget(map).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_map_has_one_name_per_job() {
        let names = [
            Map::Conditional,
            Map::NotModified,
            Map::Failed,
            Map::Retry,
            Map::Done,
            Map::seen(true, 0),
            Map::seen(true, 2),
            Map::seen(false, 0),
            Map::seen(false, 2),
            Map::Waiting,
        ]
        .map(|m| m.name("j"));
        assert_eq!(
            names,
            [
                "j:conditional",
                "j:not_modified",
                "j:inputs:failed",
                "j:inputs:retry",
                "j:inputs:done",
                // (a once-job has one walk; a job not once numbers its
                // walks from 0, as builds before this one did)
                "j:inputs:keys",
                "j:inputs:keys",
                "j:inputs:keys:0",
                "j:inputs:keys:2",
                "j:waiting",
            ]
        );
    }

    /// What a run waits for, noted and read back typed, then forgotten.
    #[test]
    fn a_runs_wait_is_noted_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::Embedded(
            crate::ledger::EmbeddedLedger::open(&dir.path().join("ledger.sqlite3")).unwrap(),
        );
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let state = JobState::new(&store, "j");
            assert_eq!(state.waiting().await.unwrap(), None);
            let w = RunWaiting {
                pool: "requests".into(),
                units: 2,
                until: 1_700_000_000_000_000,
                why: "pool requests's 1m window is full".into(),
            };
            state.set_waiting(Some(&w)).await.unwrap();
            assert_eq!(state.waiting().await.unwrap(), Some(w));
            // (another job's maps are its own)
            assert_eq!(JobState::new(&store, "k").waiting().await.unwrap(), None);
            state.set_waiting(None).await.unwrap();
            assert_eq!(state.waiting().await.unwrap(), None);
        });
    }

    /// On the embedded store: failed inputs recorded, moved to those to
    /// do again, read back typed; 304 counts added up; a reset forgets
    /// the walks' maps and keeps the counts.
    #[test]
    fn a_jobs_maps_on_the_embedded_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::Embedded(
            crate::ledger::EmbeddedLedger::open(&dir.path().join("ledger.sqlite3")).unwrap(),
        );
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let state = JobState::new(&store, "j");
            let failed = |key: &str, line| FailedInput {
                key: key.into(),
                line,
                offset: line * 10,
                status: 404,
                excerpt: "no such id".into(),
            };
            state.record_failed(&failed("b", 2)).await.unwrap();
            state.record_failed(&failed("a", 1)).await.unwrap();
            let mut got = state.failed(Map::Failed).await.unwrap();
            got.sort_by_key(|f| f.line);
            assert_eq!(got, [failed("a", 1), failed("b", 2)]);
            assert_eq!(state.retry_failed().await.unwrap(), 2);
            assert_eq!(state.len(Map::Failed).await.unwrap(), 0);
            // One done again: no longer to do.
            (state.put(Map::Retry, &[("a".into(), String::new())]))
                .await
                .unwrap();
            assert_eq!(state.failed(Map::Retry).await.unwrap(), [failed("b", 2)]);

            let saved = BTreeMap::from([("units".to_string(), 3)]);
            state.add_not_modified(2, &saved).await.unwrap();
            state.add_not_modified(1, &saved).await.unwrap();
            let n = state.not_modified().await.unwrap();
            assert_eq!((n.calls, n.units_saved["units"]), (3, 6));

            state
                .put(Map::Conditional, &[("since 0 r".into(), "7".into())])
                .await
                .unwrap();
            state.forget_walks(Some(Map::seen(true, 0))).await.unwrap();
            for map in [Map::Conditional, Map::Retry, Map::Failed] {
                assert_eq!(state.len(map).await.unwrap(), 0, "{map:?}");
            }
            assert_eq!(state.not_modified().await.unwrap().calls, 3);
        });
    }

    /// The one place map names are made, checked over the crate's source:
    /// a name of a job's map built anywhere else (`format!("{}:inputs:…`)
    /// would drift from this one.
    #[test]
    fn no_map_name_is_made_outside_this_file() {
        let kinds = [
            ":conditional",
            ":not_modified",
            ":inputs:",
            ":values:",
            ":seen",
        ];
        let mut wrong = Vec::new();
        for (shown, text) in crate::layers::source_texts() {
            if shown == "runner/job_state.rs" {
                continue;
            }
            let code = crate::layers::code(&text);
            for (i, _) in code.match_indices("format!(") {
                let call = &code[i..];
                let call = &call[..call.find(';').unwrap_or(call.len()).min(300)];
                if kinds.iter().any(|k| call.contains(k)) {
                    let call = call.split_whitespace().collect::<Vec<_>>().join(" ");
                    wrong.push(format!("src/{shown}: {call}"));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "map names made outside JobState:\n{}",
            wrong.join("\n")
        );
    }
}
