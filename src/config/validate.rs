//! The semantic checks: raw values (see [`super::raw`]) into the typed,
//! checked configuration. Every error names the file and the field.
//!
//! Rooms: [`values`] (names, regions, durations, sizes), [`credential`],
//! [`job`], [`step`], [`cost`] and [`paginate`]; this one checks the whole
//! file and its `http` settings.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_yaml::Value;

use super::raw::*;
use super::upstream_headers;
use super::{
    ActualFrom, ConditionalRequests, Config, Credential, Fill, ForEach, HttpSettings, Incremental,
    InputFields, InputFormat, Inputs, Job, JsonTemplate, MAX_BATCH, MAX_UNITS, MAX_WINDOW,
    PageKind, Paginate, Placeholder, Secret, SecretSource, Secrets, SettledCost, SqliteOutput,
    Step, StorePolicy, Template, UpstreamReset, units_too_large,
};
use crate::ledger::{Pool, PoolCost, StoreLocation, Window};
use crate::timefmt::fmt_duration;
use crate::{Error, Result};

mod columns;
mod cost;
mod credential;
mod inputs;
mod job;
mod output;
mod paginate;
mod postgres;
mod request;
mod shares;
mod step;
mod values;

pub(super) struct Validator<'a> {
    pub(super) file: &'a Path,
    pub(super) dir: &'a Path,
    pub(super) secrets: Secrets,
}

/// One pool's part of a cost, as written: the pool (none: the credential's
/// only one), its units, and where a settled cost's actual is read.
type CostShape = (Option<String>, u64, Option<ActualFrom>);

/// The work keys a job has, for the placeholders that stand for them.
#[derive(Clone, Copy)]
struct Keys {
    regions: bool,
    inputs: bool,
    /// `inputs.batch` given: `{batch}` is the inputs' keys outside a
    /// fan-out step too.
    batched: bool,
}

/// A resolved endpoint, before it meets a job's credential.
struct EndpointSpec {
    cost: Value,
    on_store_error: StorePolicy,
}

impl Validator<'_> {
    fn err(&self, field: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Config {
            file: self.file.to_path_buf(),
            field: field.into(),
            message: message.into(),
        }
    }

    pub(super) fn config(&self, raw: RawConfig) -> Result<Config> {
        let store = raw
            .store
            .as_deref()
            .map(|s| StoreLocation::parse(s).map_err(|m| self.err("store", m)))
            .transpose()?
            .map(|location| match location {
                // Like `output`, a relative path is taken from the file's folder.
                StoreLocation::Embedded(Some(p)) if p.is_relative() => {
                    StoreLocation::Embedded(Some(self.dir.join(p)))
                }
                other => other,
            });
        let http = self.http(raw.http)?;
        let lock_ttl = match raw.lock_ttl {
            None => Duration::from_secs(30),
            Some(s) => {
                let d = self.duration("lock_ttl", &s)?;
                if d < Duration::from_secs(1) || d > Duration::from_secs(3600) {
                    return Err(self.err(
                        "lock_ttl",
                        format!("{s} is out of range: between 1s and 1h"),
                    ));
                }
                d
            }
        };

        let mut credentials = Vec::new();
        for (name, c) in raw.credentials.0 {
            credentials.push(self.credential(name, c)?);
        }
        let mut endpoints = Vec::new();
        for (name, e) in raw.endpoints.0 {
            self.name(&format!("endpoints.{name}"), &name)?;
            endpoints.push((
                name,
                EndpointSpec {
                    cost: e.cost,
                    on_store_error: e.on_store_error.unwrap_or(StorePolicy::FailClosed),
                },
            ));
        }
        let mut jobs = Vec::new();
        for (name, j) in raw.jobs.0 {
            jobs.push(self.job(name, j, &credentials, &endpoints)?);
        }
        self.shared_tables(&jobs)?;
        self.shared_postgres_tables(&jobs)?;
        // An endpoint no job uses still has its cost checked for shape.
        for (name, e) in &endpoints {
            self.cost_shape(&format!("endpoints.{name}.cost"), &e.cost)?;
        }
        Ok(Config {
            file: self.file.to_path_buf(),
            store,
            http,
            lock_ttl,
            credentials,
            jobs,
        })
    }

    fn http(&self, raw: Option<RawHttp>) -> Result<HttpSettings> {
        let mut http = HttpSettings::default();
        let Some(raw) = raw else { return Ok(http) };
        if let Some(s) = raw.timeout {
            http.timeout = self.positive_duration("http.timeout", &s)?;
        }
        if let Some(s) = raw.connect_timeout {
            http.connect_timeout = self.positive_duration("http.connect_timeout", &s)?;
        }
        if let Some(s) = raw.backoff {
            http.backoff = self.duration("http.backoff", &s)?;
        }
        if let Some(v) = raw.max_body {
            http.max_body = self.max_body("http.max_body", &v)?;
        }
        if let Some(n) = raw.retries {
            if !(0..=10).contains(&n) {
                return Err(self.err("http.retries", format!("{n} is out of range: 0 to 10")));
            }
            http.retries = n as u32;
        }
        Ok(http)
    }
}

fn list<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let v: Vec<&str> = names.map(String::as_str).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}
