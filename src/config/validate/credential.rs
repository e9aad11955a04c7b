//! A credential: its secret's source, its pools and their windows (limit,
//! per, headroom, calendar alignment), its mode and upstream headers.
//! Apart from [`super`] because a credential's budgets are a section of
//! their own.

use super::*;

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

    fn window(&self, at: &str, raw: RawWindow) -> Result<Window> {
        if raw.limit <= 0 {
            return Err(self.err(
                format!("{at}.limit"),
                format!("{} is not positive", raw.limit),
            ));
        }
        let limit = raw.limit as u64;
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
}
