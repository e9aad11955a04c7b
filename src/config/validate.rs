//! The semantic checks: raw values (see [`super::raw`]) into the typed,
//! checked configuration. Every error names the file and the field.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_yaml::Value;

use super::raw::*;
use super::upstream_headers;
use super::{
    ActualFrom, Config, Credential, Fill, ForEach, HttpSettings, Job, JsonTemplate, PageKind,
    Paginate, Placeholder, Secret, SecretSource, Secrets, SettledCost, Step, StorePolicy, Template,
    UpstreamReset,
};
use crate::ledger::{Pool, PoolCost, StoreLocation, Window};
use crate::timefmt::fmt_duration;
use crate::{Error, Result};

mod cost;
mod paginate;
mod step;

pub(super) struct Validator<'a> {
    pub(super) file: &'a Path,
    pub(super) dir: &'a Path,
    pub(super) secrets: Secrets,
}

/// One pool's part of a cost, as written: the pool (none: the credential's
/// only one), its units, and where a settled cost's actual is read.
type CostShape = (Option<String>, u64, Option<ActualFrom>);

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

    /// A size: bytes (`1048576`) or a number with a unit (`500kB`, `32MiB`,
    /// `1GB`), between 1 KiB and 4 GiB.
    fn max_body(&self, field: &str, v: &Value) -> Result<u64> {
        let bytes = match v {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => parse_size(s),
            _ => None,
        }
        .ok_or_else(|| {
            self.err(
                field,
                format!(
                    "{} is not a size: write bytes (1048576) or a number with a unit (500kB, 32MiB, 1GB)",
                    serde_yaml::to_string(v).unwrap_or_default().trim()
                ),
            )
        })?;
        if !(1 << 10..=4 << 30).contains(&bytes) {
            return Err(self.err(
                field,
                format!("{bytes} bytes is out of range: 1KiB to 4GiB"),
            ));
        }
        Ok(bytes)
    }

    fn name(&self, field: &str, name: &str) -> Result<()> {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if ok {
            Ok(())
        } else {
            Err(self.err(
                field,
                format!(
                    "'{name}' is not a valid name: use 1 to 64 letters, digits, '.', '_' or '-'"
                ),
            ))
        }
    }

    /// A region is any key (a country code, `owner/repo`, an account): not
    /// empty, no control characters, and short enough that its
    /// percent-encoded form fits in a page file's name.
    fn region(&self, field: &str, r: &str) -> Result<()> {
        let why = if r.is_empty() {
            "a region must not be empty"
        } else if r.chars().any(char::is_control) {
            "a region must not hold control characters (line breaks, tabs, …)"
        } else if crate::runner::output::encode_region(r).len() > 150 {
            "too long: a region takes at most 150 bytes once percent-encoded for file names"
        } else {
            return Ok(());
        };
        Err(self.err(field, why))
    }

    fn duration(&self, field: &str, s: &str) -> Result<Duration> {
        humantime::parse_duration(s.trim()).map_err(|e| {
            self.err(
                field,
                format!("'{s}' is not a duration ({e}); write e.g. 90s, 10m, 1h, 24h"),
            )
        })
    }

    fn positive_duration(&self, field: &str, s: &str) -> Result<Duration> {
        let d = self.duration(field, s)?;
        if d.is_zero() {
            return Err(self.err(field, "must be positive"));
        }
        Ok(d)
    }

    fn credential(&self, name: String, raw: RawCredential) -> Result<Credential> {
        let at = format!("credentials.{name}");
        self.name(&at, &name)?;
        let secret_source = self.secret_source(&format!("{at}.secret"), &raw.secret)?;
        let secret = match self.secrets {
            Secrets::Read => secret_source
                .read(self.dir)
                .map_err(|m| self.err(format!("{at}.secret"), m))?,
            Secrets::Skip => Secret::new(String::new()),
        };
        let upstream_reset = raw
            .upstream_reset
            .as_deref()
            .map(|s| {
                UpstreamReset::parse(s).map_err(|m| self.err(format!("{at}.upstream_reset"), m))
            })
            .transpose()?;
        if raw.pools.0.is_empty() {
            return Err(self.err(
                format!("{at}.pools"),
                "a credential needs at least one pool",
            ));
        }
        let mut pools = Vec::new();
        for (pool, windows) in raw.pools.0 {
            let at = format!("{at}.pools.{pool}");
            self.name(&at, &pool)?;
            if windows.is_empty() {
                return Err(self.err(at, "a pool needs at least one window"));
            }
            let mut checked = Vec::new();
            for (i, w) in windows.into_iter().enumerate() {
                checked.push(self.window(&format!("{at}[{i}]"), w)?);
            }
            pools.push(Pool {
                name: pool,
                windows: checked,
            });
        }
        let names: Vec<String> = pools.iter().map(|p| p.name.clone()).collect();
        let upstream_headers = match &raw.upstream_headers {
            Some(v) => upstream_headers::resolve(v, &names)
                .map_err(|m| self.err(format!("{at}.upstream_headers"), m))?,
            None => Vec::new(),
        };
        let observe = match raw.mode.as_deref() {
            None | Some("enforce") => false,
            Some("observe") => true,
            Some(other) => {
                return Err(self.err(
                    format!("{at}.mode"),
                    format!("'{other}': expected enforce or observe"),
                ));
            }
        };
        Ok(Credential {
            name,
            secret,
            secret_source,
            upstream_reset,
            upstream_headers,
            observe,
            pools,
        })
    }

    fn secret_source(&self, field: &str, v: &Value) -> Result<SecretSource> {
        let Value::Mapping(m) = v else {
            return Err(self.err(
                field,
                "write { env: NAME }, { file: PATH } or { credential: NAME }; a secret is never written inline",
            ));
        };
        if m.len() != 1 {
            return Err(self.err(field, "name exactly one of env, file or credential"));
        }
        let (k, v) = m.iter().next().expect("one entry");
        let (Some(k), Some(v)) = (k.as_str(), v.as_str()) else {
            return Err(self.err(
                field,
                "expected { env: NAME }, { file: PATH } or { credential: NAME }",
            ));
        };
        if v.is_empty() {
            return Err(self.err(format!("{field}.{k}"), "must not be empty"));
        }
        match k {
            "env" => Ok(SecretSource::Env(v.to_string())),
            "file" => Ok(SecretSource::File(PathBuf::from(v))),
            "credential" => Ok(SecretSource::Credential(v.to_string())),
            other => Err(self.err(
                format!("{field}.{other}"),
                "unknown secret source: expected env, file or credential",
            )),
        }
    }

    fn window(&self, at: &str, raw: RawWindow) -> Result<Window> {
        if raw.limit <= 0 {
            return Err(self.err(
                format!("{at}.limit"),
                format!("{} is not positive", raw.limit),
            ));
        }
        let limit = raw.limit as u64;
        let per = self.positive_duration(&format!("{at}.per"), &raw.per)?;
        if per < Duration::from_secs(1) {
            return Err(self.err(format!("{at}.per"), "a window is at least 1s long"));
        }
        let headroom = match &raw.headroom {
            None => 0,
            Some(v) => self.headroom(&format!("{at}.headroom"), v, limit)?,
        };
        if headroom >= limit {
            return Err(self.err(
                format!("{at}.headroom"),
                format!("a headroom of {headroom} units leaves nothing of the limit of {limit}"),
            ));
        }
        let aligned = match &raw.aligned {
            None => None,
            Some(zone) => {
                let tz: chrono_tz::Tz = zone.parse().map_err(|_| {
                    self.err(
                        format!("{at}.aligned"),
                        format!("'{zone}' is not a time zone of the IANA database (e.g. America/Los_Angeles, or UTC)"),
                    )
                })?;
                let day = Duration::from_secs(86_400);
                if !day.as_micros().is_multiple_of(per.as_micros()) {
                    return Err(self.err(
                        format!("{at}.per"),
                        format!(
                            "{} does not divide a day: a calendar window (aligned) resets at local midnight and every per after it",
                            fmt_duration(per)
                        ),
                    ));
                }
                Some(tz)
            }
        };
        Ok(Window {
            per,
            limit,
            headroom,
            aligned,
        })
    }

    fn headroom(&self, field: &str, v: &Value, limit: u64) -> Result<u64> {
        match v {
            Value::Number(n) => match n.as_i64() {
                Some(n) if n >= 0 => Ok(n as u64),
                _ => Err(self.err(field, format!("{n} is not a whole number of units ≥ 0"))),
            },
            Value::String(s) => {
                let pct = s
                    .trim()
                    .strip_suffix('%')
                    .and_then(|p| p.trim().parse::<f64>().ok())
                    .filter(|p| p.is_finite() && *p >= 0.0)
                    .ok_or_else(|| {
                        self.err(
                            field,
                            format!("'{s}' is neither units nor a percentage like 5%"),
                        )
                    })?;
                if pct >= 100.0 {
                    return Err(self.err(field, format!("{s} leaves nothing of the limit")));
                }
                // Rounded up to whole units: the reserve is never smaller than asked.
                Ok(((limit as f64) * pct / 100.0 - 1e-9).ceil().max(0.0) as u64)
            }
            _ => Err(self.err(field, "expected units (5) or a percentage (\"5%\")")),
        }
    }

    fn job(
        &self,
        name: String,
        raw: RawJob,
        credentials: &[Credential],
        endpoints: &[(String, EndpointSpec)],
    ) -> Result<Job> {
        let at = format!("jobs.{name}");
        self.name(&at, &name)?;
        let credential = credentials
            .iter()
            .position(|c| c.name == raw.credential)
            .ok_or_else(|| {
                self.err(
                    format!("{at}.credential"),
                    format!(
                        "no credential named '{}' (defined: {})",
                        raw.credential,
                        list(credentials.iter().map(|c| &c.name))
                    ),
                )
            })?;
        let cred = &credentials[credential];

        let has_regions = raw.regions.is_some();
        let regions = raw.regions.unwrap_or_default();
        if has_regions && regions.is_empty() {
            return Err(self.err(
                format!("{at}.regions"),
                "an empty list: leave `regions` out for a job without regions",
            ));
        }
        let mut seen = HashSet::with_capacity(regions.len());
        for (i, r) in regions.iter().enumerate() {
            self.region(&format!("{at}.regions[{i}]"), r)?;
            if !seen.insert(r.as_str()) {
                return Err(self.err(
                    format!("{at}.regions[{i}]"),
                    format!("region '{r}' appears twice"),
                ));
            }
        }
        if raw.steps.is_empty() {
            return Err(self.err(format!("{at}.steps"), "a job needs at least one step"));
        }
        if raw.steps[0].for_each.is_some() {
            return Err(self.err(
                format!("{at}.steps[0].for_each"),
                "the first step has no previous step to take values from: for_each belongs on a later step",
            ));
        }
        let mut steps: Vec<Step> = Vec::new();
        for (i, s) in raw.steps.into_iter().enumerate() {
            let mut step =
                self.step(&format!("{at}.steps[{i}]"), s, cred, endpoints, has_regions)?;
            if let (Some(f), Some(prev)) = (step.for_each.as_mut(), steps.last()) {
                f.max_values = prev.max_requests().saturating_mul(u64::from(f.per_page));
            }
            steps.push(step);
        }
        self.filled(&at, &name, &regions, &steps, cred)?;
        if raw.output.trim().is_empty() {
            return Err(self.err(format!("{at}.output"), "must name a directory"));
        }
        let output = self.dir.join(&raw.output);
        let schedule = raw
            .schedule
            .as_deref()
            .map(|s| {
                let d = s.trim().strip_prefix("every ").ok_or_else(|| {
                    self.err(
                        format!("{at}.schedule"),
                        format!("'{s}': expected 'every DURATION', e.g. every 30m"),
                    )
                })?;
                self.positive_duration(&format!("{at}.schedule"), d)
            })
            .transpose()?;
        let concurrency = super::concurrency::concurrency(&at, raw.concurrency.as_ref())
            .map_err(|(field, message)| self.err(field, message))?;
        Ok(Job {
            name,
            credential,
            regions,
            steps,
            output,
            schedule,
            concurrency,
        })
    }

    /// Every request of the job as it will be sent, placeholders filled in
    /// (the secret too, when it was read), for every region: the URL must
    /// parse and every header value be one HTTP allows, or the run would
    /// charge calls it can never send. The error names the field, never the
    /// value (it may hold the secret).
    fn filled(
        &self,
        at: &str,
        job: &str,
        regions: &[String],
        steps: &[Step],
        cred: &Credential,
    ) -> Result<()> {
        let all = [String::new()];
        let regions = if regions.is_empty() {
            &all[..]
        } else {
            regions
        };
        for (i, step) in steps.iter().enumerate() {
            let at = format!("{at}.steps[{i}].request");
            for (r, region) in regions.iter().enumerate() {
                let fill = Fill {
                    region,
                    secret: &cred.secret,
                    job,
                    step: i,
                    page: 0,
                    batch: "",
                };
                let with = |t: &Template| {
                    let mut what = String::from("after substitution");
                    if t.uses(Placeholder::Region) {
                        what.push_str(&format!(" for region {region}"));
                    }
                    if t.uses(Placeholder::Secret) {
                        what.push_str(&format!(" of the secret from {}", cred.secret_source));
                    }
                    what
                };
                // A template without {region} is the same for every region.
                if r == 0 || step.url.uses(Placeholder::Region) {
                    reqwest::Url::parse(&step.url.fill(&fill)).map_err(|e| {
                        self.err(
                            format!("{at}.url"),
                            format!("{}, it is not a URL: {e}", with(&step.url)),
                        )
                    })?;
                }
                for (k, v) in &step.headers {
                    if r > 0 && !v.uses(Placeholder::Region) {
                        continue;
                    }
                    if reqwest::header::HeaderValue::from_str(&v.fill(&fill)).is_err() {
                        return Err(self.err(
                            format!("{at}.headers.{k}"),
                            format!(
                                "{}, the value is not one HTTP allows in a header: it holds a control character (a line break, an escape, …); the request could never be sent",
                                with(v)
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// `500kB`, `32 MiB`, `1GB`, `2048`, `2048B`: bytes (k, M, G are powers of
/// 1000; Ki, Mi, Gi of 1024).
pub(super) fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let factor: u64 = match unit.trim() {
        "" | "B" => 1,
        "k" | "kB" | "K" | "KB" => 1000,
        "Ki" | "KiB" => 1 << 10,
        "M" | "MB" => 1_000_000,
        "Mi" | "MiB" => 1 << 20,
        "G" | "GB" => 1_000_000_000,
        "Gi" | "GiB" => 1 << 30,
        _ => return None,
    };
    let n: f64 = number.parse().ok()?;
    let bytes = n * factor as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64 && bytes.fract() == 0.0)
        .then_some(bytes as u64)
}

fn list<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let v: Vec<&str> = names.map(String::as_str).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_take_decimal_and_binary_units() {
        assert_eq!(parse_size("2048"), Some(2048));
        assert_eq!(parse_size("500kB"), Some(500_000));
        assert_eq!(parse_size("32MiB"), Some(32 << 20));
        assert_eq!(parse_size("1.5 MB"), Some(1_500_000));
        assert_eq!(parse_size("1GiB"), Some(1 << 30));
        for bad in ["", "MB", "12 parsecs", "-1MB", "0.5B"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }
}
