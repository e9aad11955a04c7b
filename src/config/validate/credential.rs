//! A credential: its secret's source, its pools and their windows (limit,
//! per, headroom, calendar alignment), its mode and upstream headers.
//! Apart from [`super`] because a credential's budgets are a section of
//! their own.

use super::*;
use crate::config::{Headroom, LearnedWindow};

impl Validator<'_> {
    pub(super) fn credential(&self, name: String, raw: RawCredential) -> Result<Credential> {
        let at = format!("credentials.{name}");
        self.name(&at, &name)?;
        let secret_source = self.secret_source(&format!("{at}.secret"), &raw.secret)?;
        let secret = match self.secrets {
            Secrets::ReadVisible if secret_source.outside_its_unit() => Secret::new(String::new()),
            Secrets::Read | Secrets::ReadVisible => secret_source
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
        let mut learned = Vec::new();
        for (pool, windows) in raw.pools.0 {
            let at = format!("{at}.pools.{pool}");
            self.name(&at, &pool)?;
            if windows.is_empty() {
                return Err(self.err(at, "a pool needs at least one window"));
            }
            let mut checked = Vec::new();
            for (i, w) in windows.into_iter().enumerate() {
                let (window, from_upstream) = self.window(&format!("{at}[{i}]"), w)?;
                if let Some((cap, headroom)) = from_upstream {
                    learned.push(LearnedWindow {
                        pool: pool.clone(),
                        index: i,
                        per: window.per,
                        cap,
                        headroom,
                    });
                }
                checked.push(window);
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
        if let Some(l) =
            (learned.iter()).find(|l| !upstream_headers.iter().any(|h| h.pool == l.pool))
        {
            return Err(self.err(
                format!("{at}.pools.{}[{}].from", l.pool, l.index),
                format!(
                    "a limit from the upstream needs the headers it is read from: set upstream_headers (github, openai, ietf, or {{ {}: {{ remaining: HEADER, limit: HEADER }} }})",
                    l.pool
                ),
            ));
        }
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
        let shares = self.shares(&at, raw.shares, raw.lend_after.as_ref(), &pools)?;
        Ok(Credential {
            name,
            secret,
            secret_source,
            upstream_reset,
            upstream_headers,
            observe,
            pools,
            shares,
            learned,
        })
    }

    pub(super) fn secret_source(&self, field: &str, v: &Value) -> Result<SecretSource> {
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

    /// A window as written; with `from: upstream`, also its cap and
    /// headroom (its limit is learned: the cap's, else none, until then).
    #[allow(clippy::type_complexity)]
    fn window(
        &self,
        at: &str,
        raw: RawWindow,
    ) -> Result<(Window, Option<(Option<u64>, Headroom)>)> {
        let from_upstream = match raw.from.as_deref() {
            None => false,
            Some("upstream") => true,
            Some(other) => {
                return Err(self.err(
                    format!("{at}.from"),
                    format!("'{other}': the one source of a limit is upstream"),
                ));
            }
        };
        let limit = match (raw.limit, from_upstream) {
            (Some(l), _) if l <= 0 => {
                return Err(self.err(format!("{at}.limit"), format!("{l} is not positive")));
            }
            (Some(l), _) => l as u64,
            (None, true) => MAX_UNITS,
            (None, false) => {
                return Err(self.err(
                    format!("{at}.limit"),
                    "missing: a window needs a limit (or from: upstream, the limit the upstream announces)",
                ));
            }
        };
        if limit > MAX_UNITS {
            return Err(self.err(format!("{at}.limit"), units_too_large(limit)));
        }
        let per = self.positive_duration(&format!("{at}.per"), &raw.per)?;
        if per < Duration::from_secs(1) {
            return Err(self.err(format!("{at}.per"), "a window is at least 1s long"));
        }
        self.at_most_max_window(&format!("{at}.per"), &raw.per, per)?;
        let headroom = match &raw.headroom {
            None => 0,
            Some(v) => self.headroom(&format!("{at}.headroom"), v, limit)?,
        };
        let learned_headroom = match &raw.headroom {
            Some(serde_yaml::Value::String(s)) => Headroom::Percent(
                s.trim()
                    .trim_end_matches('%')
                    .trim()
                    .parse()
                    .unwrap_or_default(),
            ),
            _ => Headroom::Units(headroom),
        };
        if from_upstream && raw.aligned.is_some() {
            return Err(self.err(
                format!("{at}.aligned"),
                "a limit from the upstream is of a sliding window: its announced window has no calendar",
            ));
        }
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
        let window = Window {
            per,
            limit,
            headroom,
            aligned,
        };
        let cap = raw.limit.map(|l| l as u64);
        Ok((window, from_upstream.then_some((cap, learned_headroom))))
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
}
