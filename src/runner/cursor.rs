//! The cursor: where a job is in its round, saved in the store after every
//! page, so the next run starts exactly where this one stopped.
//!
//! A run serves every region once, starting at the cursor's region and
//! wrapping around the list; when it has served them all, the cursor points
//! at the region it started from, which is the one served longest ago.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Key;
use crate::inputs::done_part::{FileStamp, Tail};

mod stored;

pub use self::stored::{cursor_text, read_cursor};

/// Where a job is: its round's first region not yet served, where that
/// region is, and the regions after it already started or served.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The number of the latest run that wrote a page (output file names carry it).
    pub run: u64,
    /// The key to serve next (empty for a job without regions); stored as
    /// `region`, as it always was.
    #[serde(rename = "region")]
    pub key: Key,
    /// Where in its steps (stored as the cursor's own fields).
    #[serde(flatten)]
    pub place: Place,
    /// Regions of this round after `region` that a run with requests in
    /// flight side by side (`concurrency`) had already started or served
    /// when it stopped: the next run resumes each where it was, so no page
    /// already written is fetched again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ahead: Vec<Ahead>,
    /// A job of inputs: where its first input not done starts in its file,
    /// and what it keeps of the part done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<InputAt>,
}

/// Where a job of inputs is in its file: the first input not done (the
/// cursor's key, when there is one) starts at `offset`, on `line`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputAt {
    pub offset: u64,
    pub line: u64,
    /// Which walk of the file this is (a job that is not `once` walks it
    /// again from the start each time it reaches the end): names the map
    /// of keys seen in this walk.
    #[serde(default)]
    pub walk: u64,
    /// Inputs done and skipped in this walk (a once-job's: ever).
    #[serde(default)]
    pub done: u64,
    #[serde(default)]
    pub skipped: u64,
    /// A once-job: the chunks of the done part kept in the store, and the
    /// records after them ([`crate::inputs::done_part`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub chunks: u64,
    #[serde(default, skip_serializing_if = "Tail::is_empty")]
    pub tail: Tail,
    /// The file as the last run read it: the same file is not checked again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamp: Option<FileStamp>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Where one region's walk of the job's steps is: the step and page to do
/// next, with what a fan-out there needs. The one position type of the
/// cursor's region, of a region ahead of it and of where a run starts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Place {
    #[serde(default)]
    pub step: usize,
    #[serde(default)]
    pub page: u32,
    /// The page token that `page` needs, when `page > 0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// At a fan-out step: its values not yet sent, the next batch first
    /// (`page` is that batch's number). Kept in the store, not read from
    /// the page files, so a run on another host resumes it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<Vec<String>>,
    /// At a fan-out step, in place of `batch`: where its values not yet
    /// sent are in the list of the step's values the store keeps once per
    /// walk ([`values_key`]). A position a batch, not the values: 10^5
    /// values rewritten after every batch took minutes. (Boxed, as
    /// `largest` is.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_at: Option<Box<BatchAt>>,
    /// At a fan-out step whose batches went out side by side
    /// (`concurrency`): the batches after `page` already written, by
    /// number, so the next run sends none of them again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub written: Vec<u32>,
    /// The batch size `page` and `written` were counted in (with
    /// `written` only): a file whose `batch` changed since cuts the
    /// values not yet written afresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    /// An incremental step's walk: the largest value its pages written so
    /// far hold at the step's pointer; it becomes the key's value when the
    /// walk completes, in whichever run that is. (Boxed: a place is in
    /// every slot of a round.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest: Option<Box<String>>,
    /// Before a fan-out step: the values the pages of this step written
    /// so far hold for it, in order, without duplicates, when the cursor
    /// holds them itself (a cursor of an older build; one never saved in
    /// a store does). A run reads them, and moves them to the store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub found: Vec<String>,
    /// Before a fan-out step, in place of `found`: the list in the store
    /// the values go to as each page is written, and how many it holds
    /// (see `job_run/found.rs`). (Boxed: a place is in every slot of a
    /// round.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found_in: Option<Box<FoundIn>>,
    /// At a fan-out step followed by another, its batches side by side:
    /// what the pages of the batches in `written` hold for the next step,
    /// by batch number, kept apart from `found` until every batch before
    /// them is written, so the next step gets its values in page order.
    /// Kept in the store rather than read again from the page files: a
    /// run on another host has no files, and a page once written may be
    /// taken away by whoever consumes the folder.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "numbered"
    )]
    pub found_ahead: BTreeMap<u32, Vec<String>>,
}

/// A map by batch number, read from JSON's string keys (`{"5": …}`): a
/// flattened struct is read through serde's buffer, which hands a map key
/// over as the string it is, and a `u32` key would refuse it.
fn numbered<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<u32, Vec<String>>, D::Error> {
    let by_text = BTreeMap::<String, Vec<String>>::deserialize(d)?;
    by_text
        .into_iter()
        .map(|(k, v)| {
            k.parse()
                .map(|k| (k, v))
                .map_err(|_| serde::de::Error::custom(format!("not a batch number: {k}")))
        })
        .collect()
}

impl Place {
    /// At a fan-out step: how many of its values are not yet sent.
    pub fn values_left(&self) -> Option<usize> {
        match (&self.batch, &self.batch_at) {
            (Some(values), _) => Some(values.len()),
            (None, Some(at)) => Some(at.left),
            (None, None) => None,
        }
    }
}

/// A region past the cursor's one, in the round: served (`done`), or where
/// it resumes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ahead {
    #[serde(rename = "region")]
    pub key: Key,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub done: bool,
    #[serde(flatten)]
    pub place: Place,
}

impl Ahead {
    /// Where `cursor`'s region resumes, as an entry of another's `ahead`.
    pub fn of(cursor: &Cursor) -> Self {
        Self {
            key: cursor.key.clone(),
            done: false,
            place: cursor.place.clone(),
        }
    }
}

impl Cursor {
    /// Decode a saved cursor; `None` (start afresh) when it is unreadable.
    pub fn decode(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }

    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a cursor always serializes")
    }

    /// Where a run starts: the index of the cursor's key in `keys`
    /// (the list may have changed since: a region no longer listed restarts
    /// the round at the first region), and whether the saved step and page
    /// still apply.
    pub fn start(&self, keys: &[Key], steps: usize) -> Start {
        let index = if keys.is_empty() {
            Some(0)
        } else {
            keys.iter().position(|r| *r == self.key)
        };
        match index {
            Some(index) if self.place.step < steps => Start {
                index,
                place: self.place.clone(),
            },
            Some(index) => Start {
                index,
                ..Start::default()
            },
            None => Start::default(),
        }
    }

    /// The regions of [`Cursor::ahead`] that still apply, by their index
    /// in `keys`: `None` when served this round, else where each
    /// resumes. None at all when the cursor's own region is gone (the
    /// round restarts) or the job has no regions.
    pub fn ahead_starts(&self, keys: &[Key], steps: usize) -> Vec<(usize, Option<Start>)> {
        if !keys.contains(&self.key) {
            return Vec::new();
        }
        self.ahead
            .iter()
            .filter_map(|a| {
                let index = keys.iter().position(|r| *r == a.key)?;
                if a.done {
                    return Some((index, None));
                }
                // A step gone from the file restarts the region.
                let start = if a.place.step < steps {
                    Start {
                        index,
                        place: a.place.clone(),
                    }
                } else {
                    Start {
                        index,
                        ..Start::default()
                    }
                };
                Some((index, Some(start)))
            })
            .collect()
    }
}

/// The first position of a run: the index of its region, and its place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Start {
    pub index: usize,
    pub place: Place,
}

impl Start {
    /// This start as a cursor of run `run` at `region`.
    pub fn at(&self, run: u64, key: &str) -> Cursor {
        Cursor {
            run,
            key: key.to_string(),
            place: self.place.clone(),
            ahead: Vec::new(),
            input: None,
        }
    }
}

/// Where a fan-out's values not yet sent are in its list ([`ValueList`]):
/// the list's `id`, and `left` values from `from` on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchAt {
    pub list: String,
    pub from: usize,
    pub left: usize,
    /// The list is a map of positions, read a batch at a time
    /// (`job_run/found.rs`); without it, one text of all the values
    /// ([`ValueList`], a cursor of an older build), read whole.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mapped: bool,
}

/// Where the values a step's pages found for a fan-out after it are: the
/// list `list` (its id) in the store, `count` of them so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoundIn {
    pub list: String,
    pub count: u64,
}

/// A fan-out step's values, as the step before it found them, kept in the
/// store once per walk (a cursor points into it, [`BatchAt`]). The `id`
/// tells this walk's list from a later walk's under the same key.
#[derive(Debug, Serialize, Deserialize)]
pub struct ValueList<V = Vec<String>> {
    pub id: String,
    pub values: V,
}

/// The store's name for the values of `job`'s fan-out `step` in `region`
/// (see [`crate::runner::job_state::values_list`]).
pub fn values_key(job: &str, key: &str, step: usize) -> String {
    crate::runner::job_state::values_list(job, key, step)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regions() -> Vec<String> {
        ["US", "GB", "DE"].map(String::from).to_vec()
    }

    #[test]
    fn resumes_at_the_saved_region_step_and_page() {
        let c = Cursor {
            run: 3,
            key: "GB".into(),
            place: Place {
                step: 1,
                page: 2,
                token: Some("T".into()),
                ..Place::default()
            },
            ..Cursor::default()
        };
        let s = c.start(&regions(), 2);
        assert_eq!(
            (
                s.index,
                s.place.step,
                s.place.page,
                s.place.token.as_deref()
            ),
            (1, 1, 2, Some("T"))
        );
        assert_eq!(Cursor::decode(&c.encode()), Some(c));
    }

    #[test]
    fn a_region_or_step_gone_from_the_file_restarts_cleanly() {
        let gone = Cursor {
            key: "FR".into(),
            place: Place {
                step: 1,
                page: 2,
                ..Place::default()
            },
            ..Cursor::default()
        };
        assert_eq!(gone.start(&regions(), 2), Start::default());
        let fewer_steps = Cursor {
            key: "DE".into(),
            place: Place {
                step: 3,
                page: 2,
                ..Place::default()
            },
            ..Cursor::default()
        };
        assert_eq!(
            fewer_steps.start(&regions(), 2),
            Start {
                index: 2,
                ..Start::default()
            }
        );
        assert_eq!(Cursor::decode("not json"), None);
    }

    #[test]
    fn what_batches_written_ahead_found_is_kept_and_omitted_when_none() {
        // A cursor saved before the field existed reads and writes back as it was.
        let old = r#"{"run":2,"region":"US","step":1,"page":3,"batch":["a"],"written":[5],"batch_size":10}"#;
        let c = Cursor::decode(old).unwrap();
        assert!(c.place.found_ahead.is_empty());
        assert_eq!(c.encode(), old);
        let c = Cursor {
            place: Place {
                found_ahead: BTreeMap::from([(5, vec!["x".to_string()])]),
                ..c.place
            },
            ..c
        };
        assert!(
            c.encode().contains(r#""found_ahead":{"5":["x"]}"#),
            "{}",
            c.encode()
        );
        assert_eq!(Cursor::decode(&c.encode()), Some(c.clone()));
        // It rides along for a region ahead too.
        let first = Cursor {
            key: "GB".into(),
            ahead: vec![Ahead::of(&c)],
            ..Cursor::default()
        };
        let back = Cursor::decode(&first.encode()).unwrap();
        let starts = back.ahead_starts(&regions(), 2);
        let start = starts[0].1.as_ref().unwrap();
        assert_eq!(start.place.found_ahead, c.place.found_ahead);
        assert_eq!(start.at(2, "US").place.found_ahead, c.place.found_ahead);
    }
}
