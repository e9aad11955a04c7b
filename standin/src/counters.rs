//! The upstreams' own counters for the example jobs: GitHub's hourly
//! window, the LLM API's minute, the GraphQL cost bucket. They are kept in
//! the shared [`crate::exchange::State`]; [`crate::examples`] counts with
//! them and reports them the way each API does.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant, SystemTime};

use crate::Options;

/// A fixed window's start and what was spent in it.
pub struct Window {
    pub start: SystemTime,
    pub used: u64,
    pub tokens: u64,
}

impl Window {
    /// The window `now` falls in, `length` long (a fresh one once the last
    /// has ended).
    pub fn roll(&mut self, now: SystemTime, length: Duration) {
        if now.duration_since(self.start).unwrap_or_default() >= length {
            *self = Window {
                start: now,
                used: 0,
                tokens: 0,
            };
        }
    }

    pub fn left(&self, now: SystemTime, length: Duration) -> Duration {
        length.saturating_sub(now.duration_since(self.start).unwrap_or_default())
    }
}

/// The GraphQL cost bucket: points available as of an instant.
pub struct Bucket {
    pub available: f64,
    pub at: Instant,
}

/// The upstreams' own counters (see the module's text).
pub struct Counters {
    pub github: Mutex<Window>,
    /// GitHub's issues touched: by repository, issue → seconds after the
    /// stand-in's epoch it was last updated.
    pub updated: Mutex<HashMap<String, HashMap<u64, u64>>>,
    /// Touches so far (which issue the next touch updates).
    pub touches: AtomicU64,
    pub llm: Mutex<Window>,
    pub graphql: Mutex<Bucket>,
}

impl Counters {
    /// Fresh counters, with the usage of others the options start them with.
    pub fn new(opts: &Options) -> Self {
        let now = SystemTime::now();
        Counters {
            github: Mutex::new(Window {
                start: now,
                used: opts.github_used,
                tokens: 0,
            }),
            updated: Mutex::default(),
            touches: AtomicU64::new(0),
            llm: Mutex::new(Window {
                start: now,
                used: opts.llm_used_requests,
                tokens: opts.llm_used_tokens,
            }),
            graphql: Mutex::new(Bucket {
                available: opts.graphql_points as f64,
                at: Instant::now(),
            }),
        }
    }
}
