//! [`FoundValues`]: the values the pages of a step hold for a fan-out after it,
//! in page order, each once, and the list in the store they go to.
//!
//! A page of millions of tiny values held them all in process memory
//! (a `Vec` and a `HashSet`, 1,147 MiB for 16 M values of a 32 MB page),
//! and in the cursor saved after every page. Now each page's values go
//! to the store as the page is written, in chunks of at most
//! [`CHUNK_VALUES`] values or [`CHUNK_BYTES`] bytes per store call, and the
//! cursor keeps only the list's id and how many values it holds
//! ([`FoundIn`]). The list is two of the job's maps (both stores have them,
//! [`crate::ledger::JobStore::map_put`]) named after [`crate::runner::cursor::values_key`]: the
//! list itself (field: a position, value: the value; field `id`: which
//! walk's list it is) and, beside it, the values seen (field: the value,
//! value: its position), which is how a value is kept once without the
//! process holding them all; it is forgotten once the step is done
//! ([`super::JobRun::step_done`]), the list once the fan-out is.
//!
//! A kill between a page's values reaching the store and the cursor that
//! counts them: the next run fetches the page again and appends its values
//! again from the cursor's count. A value the seen map places at or past
//! that count was put there by the killed run, after the cursor: it counts
//! as not seen, and its position is written again. So the list holds each
//! value once, in page order, whatever was killed where; nothing is ever
//! deleted to get there.
//!
//! Without a store (a run unmetered) the values stay in memory, as they
//! always did; so do one batch's own values while batches before it are
//! in flight ([`super::batches`]), bounded by that batch's page.

use std::collections::HashSet;

use crate::ledger::{JobStore, Store, StoreError};
use crate::runner::cursor::FoundIn;

/// The most values one store call appends: one SQLite transaction, or one
/// Redis pipeline of single-field commands (no script: each command is
/// microseconds, whatever the chunk, so none shows in SLOWLOG).
pub(super) const CHUNK_VALUES: usize = 10_000;

/// The most bytes of values one store call appends.
pub(super) const CHUNK_BYTES: usize = 4 << 20;

/// The values found so far for a fan-out step, in order, each once.
pub(super) enum FoundValues {
    /// In process memory: with no store, or one batch's own values.
    Held {
        values: Vec<String>,
        seen: HashSet<String>,
    },
    /// In the store's list `name` ([`crate::runner::cursor::values_key`]): `id` once started (on
    /// the first value), `len` values in it.
    Listed {
        name: String,
        id: Option<String>,
        len: u64,
    },
}

impl Default for FoundValues {
    fn default() -> Self {
        Self::held(Vec::new())
    }
}

impl FoundValues {
    /// Held in memory, starting from `values` (each once).
    pub(super) fn held(values: Vec<String>) -> Self {
        Self::Held {
            seen: values.iter().cloned().collect(),
            values,
        }
    }

    /// In the store's list `name`, empty (started on the first value).
    pub(super) fn listed(name: String) -> Self {
        Self::Listed {
            name,
            id: None,
            len: 0,
        }
    }

    /// The list `at` says, in the store's list `name` (checked by
    /// [`holds`] by the caller).
    pub(super) fn resumed(name: String, at: &FoundIn) -> Self {
        Self::Listed {
            name,
            id: Some(at.list.clone()),
            len: at.count,
        }
    }

    /// The values held in memory (none when listed).
    pub(super) fn held_values(&self) -> &[String] {
        match self {
            Self::Held { values, .. } => values,
            Self::Listed { .. } => &[],
        }
    }

    /// The values held in memory, taken (none when listed).
    pub(super) fn into_held(self) -> Vec<String> {
        match self {
            Self::Held { values, .. } => values,
            Self::Listed { .. } => Vec::new(),
        }
    }

    /// Where the list is, for the cursor (none when held, or not started).
    pub(super) fn found_in(&self) -> Option<Box<FoundIn>> {
        match self {
            Self::Listed {
                id: Some(id), len, ..
            } => Some(Box::new(FoundIn {
                list: id.clone(),
                count: *len,
            })),
            _ => None,
        }
    }

    /// Take what is held, leaving this empty (of the same kind, a list
    /// not started).
    pub(super) fn take(&mut self) -> Self {
        let empty = match self {
            Self::Held { .. } => Self::default(),
            Self::Listed { name, .. } => Self::listed(name.clone()),
        };
        std::mem::replace(self, empty)
    }

    /// Add `values` in order, each not yet kept, up to `max` in all; how
    /// many were left out for the limit. Listed: in chunks, each one store
    /// call ([`append`]).
    pub(super) async fn keep<'v>(
        &mut self,
        store: Option<&Store>,
        values: impl IntoIterator<Item = &'v str>,
        max: u64,
        run: u64,
    ) -> Result<u64, StoreError> {
        match self {
            Self::Held { values: kept, seen } => {
                let mut left_out = 0;
                for v in values {
                    if seen.contains(v) {
                        continue;
                    }
                    if kept.len() as u64 >= max {
                        left_out += 1;
                    } else {
                        seen.insert(v.to_string());
                        kept.push(v.to_string());
                    }
                }
                Ok(left_out)
            }
            Self::Listed { name, id, len } => {
                let Some(store) = store else {
                    // (a list is made only with a store)
                    return Ok(0);
                };
                let mut left_out = 0;
                let mut chunk: Vec<&str> = Vec::new();
                let mut bytes = 0;
                for v in values {
                    chunk.push(v);
                    bytes += v.len();
                    if chunk.len() >= CHUNK_VALUES || bytes >= CHUNK_BYTES {
                        left_out += append(store, name, id, len, &chunk, max, run).await?;
                        chunk.clear();
                        bytes = 0;
                    }
                }
                if !chunk.is_empty() {
                    left_out += append(store, name, id, len, &chunk, max, run).await?;
                }
                Ok(left_out)
            }
        }
    }
}

/// The map of the values seen of list `name`.
fn seen_map(name: &str) -> String {
    crate::runner::job_state::values_seen(name)
}

/// Append `chunk` to list `name` (started as a new list first, when `id`
/// is none), each value not yet in it and while it holds fewer than
/// `max`: the list first, then the values seen, so a kill between leaves
/// a value not yet seen, appended again by the next run. How many were
/// left out for `max`.
async fn append(
    store: &Store,
    name: &str,
    id: &mut Option<String>,
    len: &mut u64,
    chunk: &[&str],
    max: u64,
    run: u64,
) -> Result<u64, StoreError> {
    if id.is_none() {
        let new = format!("r{run}.{:016x}", rand::random::<u64>());
        start(store, name, &new).await?;
        (*id, *len) = (Some(new), 0);
    }
    let mut once: Vec<&str> = Vec::with_capacity(chunk.len());
    let mut in_chunk = HashSet::with_capacity(chunk.len());
    for v in chunk {
        if in_chunk.insert(*v) {
            once.push(v);
        }
    }
    let fields: Vec<String> = once.iter().map(|v| v.to_string()).collect();
    let seen = store.map_get(&seen_map(name), &fields).await?;
    // A value seen says its position; it is in the list only if that
    // position is below the list's length as this chunk starts and the
    // list holds the value there. A run killed before its cursor counted
    // its values left entries past the count, and this run writes other
    // values over those positions (a page answered in another order, or
    // with a new item first): such an entry is stale, its value appended
    // again.
    let listed = *len;
    let claimed: Vec<Option<u64>> = (seen.iter())
        .map(|s| {
            s.as_deref()
                .and_then(|p| p.parse().ok())
                .filter(|p| *p < listed)
        })
        .collect();
    let positions: Vec<String> = claimed.iter().flatten().map(u64::to_string).collect();
    let mut there = match positions.is_empty() {
        true => Vec::new(),
        false => store.map_get(name, &positions).await?,
    }
    .into_iter();
    let mut new = Vec::new();
    let mut left_out = 0;
    for (v, at) in fields.into_iter().zip(claimed) {
        if at.is_some() && there.next().flatten().as_deref() == Some(v.as_str()) {
            continue;
        }
        if *len >= max {
            left_out += 1;
            continue;
        }
        new.push((len.to_string(), v));
        *len += 1;
    }
    if !new.is_empty() {
        store.map_put(name, &new).await?;
        let seen: Vec<(String, String)> = new.into_iter().map(|(p, v)| (v, p)).collect();
        store.map_put(&seen_map(name), &seen).await?;
    }
    Ok(left_out)
}

/// Make `name` the new, empty list `id`: what any list there held before
/// (a walk done, given up, or killed before its cursor named the list) is
/// forgotten first.
pub(super) async fn start(store: &Store, name: &str, id: &str) -> Result<(), StoreError> {
    forget(store, name).await?;
    store
        .map_put(name, &[("id".to_string(), id.to_string())])
        .await
}

/// Forget list `name` and its values seen.
pub(super) async fn forget(store: &Store, name: &str) -> Result<(), StoreError> {
    store.map_forget(name).await?;
    forget_seen(store, name).await
}

/// Forget the values seen of list `name`, once nothing is appended to it.
pub(super) async fn forget_seen(store: &Store, name: &str) -> Result<(), StoreError> {
    store.map_forget(&seen_map(name)).await
}

/// Whether list `name` is list `id` with a value at every position up to
/// `end`: the last one is read, so a list gone or cut short is told.
pub(super) async fn holds(
    store: &Store,
    name: &str,
    id: &str,
    end: u64,
) -> Result<bool, StoreError> {
    let mut fields = vec!["id".to_string()];
    if end > 0 {
        fields.push((end - 1).to_string());
    }
    let got = store.map_get(name, &fields).await?;
    Ok(got.first().and_then(Option::as_deref) == Some(id) && got.iter().all(Option::is_some))
}

/// Values `from..from + n` of list `name`; `None` when one is missing
/// (the list gone or replaced since).
pub(super) async fn read(
    store: &Store,
    name: &str,
    from: u64,
    n: u64,
) -> Result<Option<Vec<String>>, StoreError> {
    let fields: Vec<String> = (from..from + n).map(|p| p.to_string()).collect();
    Ok(store
        .map_get(name, &fields)
        .await?
        .into_iter()
        .collect::<Option<Vec<String>>>())
}

/// Write `values` as the whole of the new list `id` at `name`, in chunks.
pub(super) async fn write(
    store: &Store,
    name: &str,
    id: &str,
    values: &[String],
) -> Result<(), StoreError> {
    start(store, name, id).await?;
    for (k, chunk) in values.chunks(CHUNK_VALUES).enumerate() {
        let at = (k * CHUNK_VALUES) as u64;
        let entries: Vec<(String, String)> = (chunk.iter().enumerate())
            .map(|(i, v)| ((at + i as u64).to_string(), v.clone()))
            .collect();
        store.map_put(name, &entries).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::meter::tests::store;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(f)
    }

    /// The list's values, in order.
    async fn values(store: &Store, found: &FoundValues) -> Vec<String> {
        let FoundValues::Listed { name, len, .. } = found else {
            panic!("not listed")
        };
        read(store, name, 0, *len).await.unwrap().unwrap()
    }

    #[test]
    fn values_are_listed_once_in_order_and_a_killed_runs_tail_is_no_repeat() {
        let (_dir, store) = store();
        block_on(async {
            let mut found = FoundValues::listed("j:values:US:s1".into());
            let page = |r: std::ops::Range<u32>| r.map(|i| i.to_string()).collect::<Vec<_>>();
            // More than a chunk, repeats within and across pages.
            let one = page(0..25_000);
            let refs = one.iter().chain(one[..5].iter()).map(String::as_str);
            assert_eq!(
                found.keep(Some(&store), refs, u64::MAX, 1).await.unwrap(),
                0
            );
            let saved = found.found_in().unwrap();
            assert_eq!(saved.count, 25_000);
            // The next page reaches the store, then a kill before the
            // cursor counts it: the next run resumes from the cursor and
            // reads a page that changed meanwhile.
            let two = page(20_000..30_000);
            let refs = two.iter().map(String::as_str);
            found.keep(Some(&store), refs, u64::MAX, 1).await.unwrap();
            assert!(values(&store, &found).await == page(0..30_000));
            let name = "j:values:US:s1".to_string();
            assert!(
                holds(&store, &name, &saved.list, saved.count)
                    .await
                    .unwrap()
            );
            let mut resumed = FoundValues::resumed(name, &saved);
            let again = page(28_000..31_000);
            let refs = again.iter().map(String::as_str);
            resumed.keep(Some(&store), refs, u64::MAX, 2).await.unwrap();
            let mut want = page(0..25_000);
            want.extend(page(28_000..31_000));
            let got = values(&store, &resumed).await;
            assert_eq!(got.len(), want.len(), "a value twice, or lost");
            assert!(got == want, "not in page order");
            // Past the most values: left out, counted, a repeat not.
            let refs = ["0", "x", "y"].into_iter();
            assert_eq!(
                resumed.keep(Some(&store), refs, 28_001, 2).await.unwrap(),
                1
            );
            assert_eq!(resumed.found_in().unwrap().count, 28_001);
            // A new walk forgets the list before it.
            let mut afresh = FoundValues::listed("j:values:US:s1".into());
            afresh.keep(Some(&store), ["5"], u64::MAX, 3).await.unwrap();
            assert_eq!(values(&store, &afresh).await, ["5"]);
            assert!(
                !holds(&store, "j:values:US:s1", &saved.list, 1)
                    .await
                    .unwrap()
            );
        });
    }

    /// A run killed after a page's values reached the store, before its
    /// cursor counted them; the next run's page holds them in another
    /// order, or a new item first: the killed run's entries are stale,
    /// and every value is listed once, none lost (review finding: `c` was
    /// taken as seen at a position `x` had just taken).
    #[test]
    fn a_killed_runs_values_in_another_order_are_listed_once_none_lost() {
        let (_dir, store) = store();
        block_on(async {
            for (rerun, want) in [
                (vec!["x", "c", "d"], vec!["a", "b", "x", "c", "d"]),
                (vec!["d", "c"], vec!["a", "b", "d", "c"]),
            ] {
                let name = "j:values:US:s1".to_string();
                let mut found = FoundValues::listed(name.clone());
                found
                    .keep(Some(&store), ["a", "b"], u64::MAX, 1)
                    .await
                    .unwrap();
                let saved = found.found_in().unwrap();
                found
                    .keep(Some(&store), ["c", "d"], u64::MAX, 1)
                    .await
                    .unwrap();
                let mut resumed = FoundValues::resumed(name, &saved);
                let refs = rerun.iter().copied();
                resumed.keep(Some(&store), refs, u64::MAX, 2).await.unwrap();
                assert_eq!(values(&store, &resumed).await, want);
                // (and a value of this run's seen again is a repeat)
                resumed
                    .keep(Some(&store), ["c", "a"], u64::MAX, 2)
                    .await
                    .unwrap();
                assert_eq!(values(&store, &resumed).await, want);
            }
        });
    }
}
