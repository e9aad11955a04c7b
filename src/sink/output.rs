//! The one way results leave a run: a page handed to the job's
//! [`Outputs`], each an [`Output`] (its file in a folder, [`Files`]; its
//! rows in a table, [`super::sqlite::Sqlite`] or [`super::postgres::Postgres`]). The run
//! never names a database: it writes a [`Page`], asks whether what a
//! page's validators stand for is still [`ResultsHeld`], which inputs' results
//! are there, the highest run that wrote there, and the outputs' id.
//!
//! Every method is blocking (files, SQLite, PostgreSQL's connection
//! thread): the run calls them on a blocking thread, or before its first
//! request.

use std::collections::HashSet;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A page of a job, its secret masked, to write.
pub struct Page<'a> {
    /// The input or region it was fetched for.
    pub key: &'a str,
    /// Its page file's name (`JOB.rRUN.….json`).
    pub file: &'a str,
    pub body: &'a [u8],
    /// A page of the job's last step: its results (the pages before are
    /// the lists a fan-out reads its values from).
    pub last_step: bool,
    /// When it was fetched (RFC 3339) and by which run.
    pub fetched_at: &'a str,
    pub run: u64,
}

/// What a page's results are in the outputs, which its validators stand
/// for: its file in the folder, the key of its first row in the table.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResultsHeld {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row: Option<String>,
}

/// What a page gave an output of rows.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PageRows {
    /// Rows upserted.
    pub rows: u64,
    /// Of those, rows whose key the table did not have (the rest replaced
    /// the row of their key): known once the rows are written.
    pub new: u64,
    /// Items without a key at `key`: skipped.
    pub without_key: u64,
    /// The page is not JSON: no rows.
    pub not_json: bool,
    /// Nothing in the page at `items` (not even an empty array): no rows.
    pub no_items: bool,
    /// Values of typed columns (`columns`) that did not fit the column's
    /// type, written NULL.
    pub unfit: super::columns::UnfitCounts,
}

/// What writing a page did.
#[derive(Debug, Default)]
pub struct Wrote {
    /// Where its results are.
    pub held: ResultsHeld,
    /// Its file, when a folder took it.
    pub path: Option<PathBuf>,
    /// Its rows, when a table took them.
    pub rows: Option<PageRows>,
    /// Rows upserted per output of rows, named by its sink (`sqlite`,
    /// `postgres`), for the metrics: `rows` is the first one's.
    pub upserted: Vec<(&'static str, u64)>,
}

/// An output that could not take a page.
#[derive(Debug)]
pub enum OutputError {
    /// Its file (`AlreadyExists`: a page of that name is there).
    File(std::io::Error),
    /// Its table, of another shape than the configuration's.
    Shape(String),
    /// Its rows, for another reason: why.
    Rows(String),
    /// Its server, unreachable or gone (a PostgreSQL connection lost):
    /// why, naming the server, never its password.
    Unavailable(String),
}

/// One place a job's results go.
pub trait Output: Send + Sync {
    /// Write `page`, durable when this returns, noting in `wrote` what
    /// it holds of it.
    fn write(&self, page: &Page<'_>, wrote: &mut Wrote) -> Result<(), OutputError>;

    /// Whether what `held` says of this output is still there (an output
    /// cannot say: not, so the page is asked in full).
    fn holds(&self, held: &ResultsHeld) -> bool;

    /// The id kept in the output (made with it), and whether it holds
    /// anything of the job.
    fn id(&self) -> Result<(String, bool), String>;

    /// The highest run that wrote results here (0: none): a run is
    /// numbered after it.
    fn highest_run(&self) -> Result<u64, OutputError>;

    /// The inputs whose results of the last step (`last`) are here.
    fn keys_held(&self, last: usize) -> HashSet<String>;

    /// Whether one of `runs` wrote results of input `key`'s last step
    /// (`last`) here.
    fn has_key(&self, key: &str, last: usize, runs: &RangeInclusive<u64>) -> bool;

    /// Rows rather than files: where both are, the rows say which inputs
    /// are done.
    fn rows(&self) -> bool {
        false
    }

    /// Whether its results alone make an input done (rows that keep the
    /// run that wrote them): written after every other output's, so that
    /// one that failed leaves the input not done.
    fn marks_inputs(&self) -> bool {
        false
    }

    /// `(commits, pages)` written, for a log line (none: not counted).
    fn commits(&self) -> Option<(u64, u64)> {
        None
    }
}

/// A job's outputs, in the order the configuration has them (a folder
/// first), each with its sink's name (`folder`, `sqlite`, `postgres`).
#[derive(Clone, Default)]
pub struct Outputs {
    all: Vec<(&'static str, Arc<dyn Output>)>,
}

impl Outputs {
    /// `output`, of sink `sink` (its name in the metrics).
    pub fn push(&mut self, sink: &'static str, output: Arc<dyn Output>) {
        self.all.push((sink, output));
    }

    /// `output` as the first (a folder: its id comes first in the
    /// outputs', as it always has).
    pub fn put_first(&mut self, output: Arc<dyn Output>) {
        self.all.insert(0, ("folder", output));
    }

    fn outputs(&self) -> impl Iterator<Item = &Arc<dyn Output>> {
        self.all.iter().map(|(_, o)| o)
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// Write `page` to every output. Both are durable before the page
    /// counts (the cursor moves only after this returns), so they are
    /// written at once (a file's fsyncs and rows' commit overlap): rows
    /// committed beside a file that failed are written again by the redone
    /// page as upserts, nothing twice. An output that marks inputs done
    /// by itself comes after the others, and not at all when one failed.
    /// A file's error is returned before a table's.
    pub fn write(&self, page: &Page<'_>) -> Result<Wrote, OutputError> {
        let (first, after): (Vec<_>, Vec<_>) =
            self.all.iter().partition(|(_, o)| !o.marks_inputs());
        let mut wrote = Wrote::default();
        let results: Vec<(&str, Wrote, Result<(), OutputError>)> = match first.as_slice() {
            [] => Vec::new(),
            [(sink, one)] => {
                let mut w = Wrote::default();
                let r = one.write(page, &mut w);
                vec![(sink, w, r)]
            }
            many => std::thread::scope(|s| {
                let running: Vec<_> = (many.iter())
                    .map(|(sink, o)| {
                        let written = s.spawn(move || {
                            let mut w = Wrote::default();
                            let r = o.write(page, &mut w);
                            (w, r)
                        });
                        (*sink, written)
                    })
                    .collect();
                running
                    .into_iter()
                    .map(|(sink, h)| {
                        let (w, r) = h.join().unwrap_or_else(|_| {
                            let e = std::io::Error::other("an output's writer failed");
                            (Wrote::default(), Err(OutputError::File(e)))
                        });
                        (sink, w, r)
                    })
                    .collect()
            }),
        };
        let mut failed: Option<OutputError> = None;
        for (sink, w, r) in results {
            merge(&mut wrote, sink, w);
            if let Err(e) = r {
                failed = Some(match (failed, e) {
                    (Some(OutputError::File(f)), _) => OutputError::File(f),
                    (_, e) => e,
                });
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        for (sink, o) in after {
            let mut w = Wrote::default();
            o.write(page, &mut w)?;
            merge(&mut wrote, sink, w);
        }
        Ok(wrote)
    }

    /// Whether every output still holds what `held` says of it, and a
    /// row it names is in a table the job still writes (none: not held,
    /// so the page is asked in full).
    pub fn holds(&self, held: &ResultsHeld) -> bool {
        let table = held.row.is_none() || self.outputs().any(|o| o.rows());
        table && self.outputs().all(|o| o.holds(held))
    }

    /// The outputs' id (each one's, joined: losing either loses what a 304
    /// would not write again), and whether every one holds something of
    /// the job.
    pub fn id(&self) -> Result<(String, bool), String> {
        let mut ids = Vec::new();
        let mut holds = true;
        for o in self.outputs() {
            let (id, any) = o.id()?;
            ids.push(id);
            holds &= any;
        }
        Ok((ids.join("+"), holds))
    }

    /// The highest run that wrote results in any output.
    pub fn highest_run(&self) -> Result<u64, OutputError> {
        let mut highest = 0;
        for o in self.outputs() {
            highest = highest.max(o.highest_run()?);
        }
        Ok(highest)
    }

    /// The outputs that say which inputs are done: those of rows where
    /// there are, else the folder.
    fn deciding(&self) -> impl Iterator<Item = &Arc<dyn Output>> {
        let rows = self.outputs().any(|o| o.rows());
        self.outputs().filter(move |o| o.rows() == rows)
    }

    /// The inputs whose results of the last step are in the outputs.
    pub fn keys_held(&self, last: usize) -> HashSet<String> {
        self.deciding().flat_map(|o| o.keys_held(last)).collect()
    }

    /// Whether one of `runs` wrote input `key`'s results in the outputs.
    pub fn has_key(&self, key: &str, last: usize, runs: &RangeInclusive<u64>) -> bool {
        self.deciding().any(|o| o.has_key(key, last, runs))
    }

    /// `(commits, pages)` of the outputs that count them.
    pub fn commits(&self) -> Option<(u64, u64)> {
        self.outputs().find_map(|o| o.commits())
    }
}

/// `w`'s notes, of sink `sink`, added to `into`'s.
fn merge(into: &mut Wrote, sink: &'static str, w: Wrote) {
    if let Some(rows) = &w.rows {
        into.upserted.push((sink, rows.rows));
    }
    into.held.file = into.held.file.take().or(w.held.file);
    into.held.row = into.held.row.take().or(w.held.row);
    into.path = into.path.take().or(w.path);
    into.rows = into.rows.take().or(w.rows);
}

#[cfg(test)]
mod tests;
