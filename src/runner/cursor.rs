//! The cursor: where a job is in its round, saved in the store after every
//! page, so the next run starts exactly where this one stopped.
//!
//! A run serves every region once, starting at the cursor's region and
//! wrapping around the list; when it has served them all, the cursor points
//! at the region it started from, which is the one served longest ago.

use serde::{Deserialize, Serialize};

/// A position in a job's work: the region, step and page to do next.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The number of the latest run that wrote a page (output file names carry it).
    pub run: u64,
    /// The region to serve next (empty for a job without regions).
    pub region: String,
    pub step: usize,
    pub page: u32,
    /// The page token that `page` needs, when `page > 0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl Cursor {
    /// Decode a saved cursor; `None` (start afresh) when it is unreadable.
    pub fn decode(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }

    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a cursor always serializes")
    }

    /// Where a run starts: the index of the cursor's region in `regions`
    /// (the list may have changed since: a region no longer listed restarts
    /// the round at the first region), and whether the saved step and page
    /// still apply.
    pub fn start(&self, regions: &[String], steps: usize) -> Start {
        let index = if regions.is_empty() {
            Some(0)
        } else {
            regions.iter().position(|r| *r == self.region)
        };
        match index {
            Some(index) if self.step < steps => Start {
                index,
                step: self.step,
                page: self.page,
                token: self.token.clone(),
            },
            Some(index) => Start {
                index,
                ..Start::default()
            },
            None => Start::default(),
        }
    }
}

/// The first position of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Start {
    pub index: usize,
    pub step: usize,
    pub page: u32,
    pub token: Option<String>,
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
            region: "GB".into(),
            step: 1,
            page: 2,
            token: Some("T".into()),
        };
        let s = c.start(&regions(), 2);
        assert_eq!(
            (s.index, s.step, s.page, s.token.as_deref()),
            (1, 1, 2, Some("T"))
        );
        assert_eq!(Cursor::decode(&c.encode()), Some(c));
    }

    #[test]
    fn a_region_or_step_gone_from_the_file_restarts_cleanly() {
        let gone = Cursor {
            region: "FR".into(),
            step: 1,
            page: 2,
            ..Cursor::default()
        };
        assert_eq!(gone.start(&regions(), 2), Start::default());
        let fewer_steps = Cursor {
            region: "DE".into(),
            step: 3,
            page: 2,
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
}
