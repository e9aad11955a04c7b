//! Costs as written in an endpoint: a whole number, or units per pool,
//! or `{estimate, actual}` for a cost settled from the response. Apart
//! from [`super`] because a cost's shapes are a small language of their own.

use super::*;

impl Validator<'_> {
    /// A cost is a positive whole number or a map of pool → positive units,
    /// or → `{estimate: N, actual: POINTER | {header: NAME}}`: N units
    /// reserved, settled from the response.
    pub(super) fn cost_shape(&self, field: &str, v: &Value) -> Result<Vec<CostShape>> {
        let units = |f: String, v: &Value| -> Result<u64> {
            match v.as_i64() {
                Some(n) if n > 0 && n as u64 > MAX_UNITS => Err(self.err(f, units_too_large(n))),
                Some(n) if n > 0 => Ok(n as u64),
                Some(n) => {
                    Err(self.err(f, format!("{n} is not positive: a cost is at least 1 unit")))
                }
                None => Err(self.err(f, "expected a whole number of units")),
            }
        };
        match v {
            Value::Number(_) => Ok(vec![(None, units(field.to_string(), v)?, None)]),
            Value::Mapping(m) if !m.is_empty() => {
                let mut out = Vec::new();
                for (k, n) in m {
                    let pool = k
                        .as_str()
                        .ok_or_else(|| self.err(field, "pool names are strings"))?
                        .to_string();
                    if pool == NOT_MODIFIED {
                        continue;
                    }
                    let f = format!("{field}.{pool}");
                    let (u, actual) = match n {
                        Value::Mapping(_) => {
                            let (u, a) = self.settled_cost(&f, n, units)?;
                            (u, Some(a))
                        }
                        _ => (units(f, n)?, None),
                    };
                    out.push((Some(pool), u, actual));
                }
                if out.is_empty() {
                    return Err(self.err(field, "no pool's units beside not_modified"));
                }
                Ok(out)
            }
            _ => Err(self.err(
                field,
                "expected units (cost: 1) or units per pool (cost: { units: 1 })",
            )),
        }
    }

    /// `{estimate: N, actual: POINTER | {header: NAME}}`: the units
    /// reserved, and where the response says what was spent.
    fn settled_cost(
        &self,
        field: &str,
        v: &Value,
        units: impl Fn(String, &Value) -> Result<u64>,
    ) -> Result<(u64, ActualFrom)> {
        let shape = "expected units, or { estimate: N, actual: /json/pointer } or { estimate: N, actual: { header: NAME } }";
        let Value::Mapping(m) = v else {
            return Err(self.err(field, shape));
        };
        for k in m.keys() {
            if !matches!(k.as_str(), Some("estimate" | "actual")) {
                return Err(self.err(field, format!("unknown key {k:?}: {shape}")));
            }
        }
        let estimate = match m.get("estimate") {
            Some(n) => units(format!("{field}.estimate"), n)?,
            None => return Err(self.err(field, format!("no estimate: {shape}"))),
        };
        let actual_field = format!("{field}.actual");
        let actual = match m.get("actual") {
            Some(Value::String(p)) if p.starts_with('/') => ActualFrom::Pointer(p.clone()),
            Some(Value::String(p)) => {
                return Err(self.err(
                    actual_field,
                    format!(
                        "'{p}' is not a JSON pointer: it starts with '/' (/usage/total_tokens)"
                    ),
                ));
            }
            Some(Value::Mapping(h)) if h.len() == 1 => match h.get("header") {
                Some(Value::String(name))
                    if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_ok() =>
                {
                    ActualFrom::Header(name.to_ascii_lowercase())
                }
                _ => {
                    return Err(self.err(
                        actual_field,
                        "expected { header: NAME } with a valid header name",
                    ));
                }
            },
            None => return Err(self.err(field, format!("no actual: {shape}"))),
            _ => return Err(self.err(actual_field, shape)),
        };
        Ok((estimate, actual))
    }

    /// `not_modified: N` in a cost map: what a call answered 304 costs
    /// in each pool of the cost, at most its units there.
    pub(super) fn not_modified(
        &self,
        field: &str,
        v: &Value,
        cost: &[PoolCost],
    ) -> Result<Option<u64>> {
        let Some(n) = v.as_mapping().and_then(|m| m.get(NOT_MODIFIED)) else {
            return Ok(None);
        };
        let f = format!("{field}.{NOT_MODIFIED}");
        let n = match n.as_i64() {
            Some(n) if n >= 0 => n as u64,
            _ => return Err(self.err(f, "expected a whole number of units, 0 or more")),
        };
        if let Some(c) = cost.iter().find(|c| c.units < n) {
            return Err(self.err(
                f,
                format!(
                    "{n} is more than the call's cost in {} ({}): a 304 costs at most a call",
                    c.pool.name, c.units
                ),
            ));
        }
        Ok(Some(n))
    }
}

/// The key of a cost map that says what a 304 costs (not a pool).
const NOT_MODIFIED: &str = "not_modified";
