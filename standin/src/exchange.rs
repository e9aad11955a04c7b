//! What every path of the stand-in works with: the request as the server
//! read it, the answer it gives, and the state all requests share (the
//! options, the quotas spent, the upstreams' counters, the request log).
//! The answering modules ([`crate::youtube`], [`crate::apis`],
//! [`crate::examples`], [`crate::odd`]) build on it and not on each other.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::counters::Counters;
use crate::{Error, Options};

/// Per (key, pool): the (arrival, cost) of requests inside the window.
pub type Spent = HashMap<(String, &'static str), VecDeque<(Instant, u64)>>;

/// The stand-in's options and what it has seen so far.
pub struct State {
    pub opts: Options,
    /// YouTube's own quota, per key and pool ([`crate::youtube`]).
    pub spent: Mutex<Spent>,
    /// Requests to YouTube's paths so far (`--fail-first` counts them).
    pub requests: Mutex<u64>,
    log: Option<Mutex<std::fs::File>>,
    /// The upstreams' own counters for the example jobs.
    pub counters: Counters,
    /// Requests read and not yet answered in full: each log line says how
    /// many, so a test sees how many a client had in flight at once.
    pub in_flight: AtomicU64,
}

impl State {
    /// A fresh state; opens (appends to) the request log, if any.
    pub fn new(opts: Options) -> Result<Self, Error> {
        let log = match &opts.log {
            Some(p) => Some(Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| format!("cannot open {}: {e}", p.display()))?,
            )),
            None => None,
        };
        Ok(State {
            counters: Counters::new(&opts),
            opts,
            spent: Mutex::new(HashMap::new()),
            requests: Mutex::new(0),
            log,
            in_flight: AtomicU64::new(0),
        })
    }

    /// Whether there is a request log (`--log`).
    pub fn logs(&self) -> bool {
        self.log.is_some()
    }
}

/// An answer: status, extra headers, JSON body.
pub type Answer = (u16, Vec<(&'static str, String)>, serde_json::Value);

/// The header by which an answer asks the server for an endless body
/// instead (the server does not send it).
pub const ENDLESS: &str = "X-Standin-Endless";

/// One request as the server read it.
pub struct Request {
    pub method: String,
    /// Path and query.
    pub target: String,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    /// As sent (`Content-Length` bytes).
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The target as a URL (on a made-up origin), or `None` when it is
    /// not one.
    pub fn url(&self) -> Option<url::Url> {
        url::Url::parse(&format!("http://standin{}", self.target)).ok()
    }
}

/// Append one JSON line to the request log, if there is one: one write per
/// line, so a reader never sees half of one.
pub fn write_log(state: &State, mut line: serde_json::Value) {
    let Some(log) = &state.log else { return };
    let in_flight = state.in_flight.load(Ordering::SeqCst);
    if let Some(fields) = line.as_object_mut() {
        fields.insert("in_flight".into(), in_flight.into());
    }
    let mut f = log.lock().unwrap();
    let _ = f.write_all(format!("{line}\n").as_bytes());
}
