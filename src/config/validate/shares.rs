//! A credential's shares (issue 28): `shares: { JOB: { reserve, limit } }`
//! and `lend_after`, in units or percentages of each window's budget.
//! Reserves add up to at most every window's budget; a reserve above its
//! own limit could never be taken.

use super::*;
use crate::ledger::{Amount, Share, Shares};

impl Validator<'_> {
    pub(super) fn shares(
        &self,
        at: &str,
        raw: Option<OrderedMap<RawShare>>,
        lend_after: Option<&Value>,
        pools: &[Pool],
    ) -> Result<Shares> {
        let lend_after = match lend_after {
            None => None,
            // (a part of a period, never units: its own message, not
            // amount()'s "neither units nor a percentage")
            Some(v) => {
                let field = format!("{at}.lend_after");
                match v {
                    Value::String(_) => match self.amount(&field, v) {
                        Ok(Amount::Basis(bp)) => Some(bp),
                        _ => return Err(self.lend_after_err(&field, v)),
                    },
                    _ => return Err(self.lend_after_err(&field, v)),
                }
            }
        };
        let mut list = Vec::new();
        for (name, share) in raw.map(|r| r.0).unwrap_or_default() {
            let field = format!("{at}.shares.{name}");
            self.name(&field, &name)?;
            let reserve = match &share.reserve {
                Some(v) => self.amount(&format!("{field}.reserve"), v)?,
                None => Amount::Units(0),
            };
            let limit = (share.limit.as_ref())
                .map(|v| self.amount(&format!("{field}.limit"), v))
                .transpose()?;
            if limit.is_some_and(|l| l == Amount::Units(0) || l == Amount::Basis(0)) {
                return Err(self.err(format!("{field}.limit"), "a limit of nothing"));
            }
            list.push(Share {
                name,
                reserve,
                limit,
            });
        }
        for pool in pools {
            for w in &pool.windows {
                self.shares_fit(at, &list, pool, w.budget())?;
            }
        }
        Ok(Shares { list, lend_after })
    }

    /// Every window of `pool` of `budget` units holds the reserves, and no
    /// reserve is above its own limit.
    fn shares_fit(&self, at: &str, list: &[Share], pool: &Pool, budget: u64) -> Result<()> {
        let mut sum = 0u64;
        for s in list {
            let reserve = s.reserve.of(budget);
            if let Amount::Units(n) = s.reserve
                && n > budget
            {
                return Err(self.err(
                    format!("{at}.shares.{}.reserve", s.name),
                    format!(
                        "{n} units: more than pool {}'s budget of {budget}",
                        pool.name
                    ),
                ));
            }
            if let Some(limit) = s.limit.map(|l| l.of(budget))
                && limit == 0
            {
                // (a percentage rounded down: every charge of the job
                // would then be refused, run after run)
                return Err(self.err(
                    format!("{at}.shares.{}.limit", s.name),
                    format!(
                        "rounds down to 0 units of pool {}'s budget of {budget}: the job could never take anything",
                        pool.name
                    ),
                ));
            }
            if let Some(limit) = s.limit.map(|l| l.of(budget))
                && reserve > limit
            {
                return Err(self.err(
                    format!("{at}.shares.{}.reserve", s.name),
                    format!(
                        "{reserve} units of pool {}: above the share's limit of {limit}",
                        pool.name
                    ),
                ));
            }
            sum += reserve;
        }
        if sum > budget {
            return Err(self.err(
                format!("{at}.shares"),
                format!("the reserves add up to {sum} units of pool {}: more than its budget of {budget}", pool.name),
            ));
        }
        Ok(())
    }

    fn lend_after_err(&self, field: &str, v: &Value) -> Error {
        let shown =
            serde_yaml::to_string(v).map_or_else(|_| "this value".into(), |s| s.trim().to_string());
        self.err(
            field,
            format!("{shown}: expected a part of each calendar period, a percentage from 0% to 100% (\"80%\")"),
        )
    }

    /// Units (`12`) or a percentage of each window's budget (`"60%"`, to a
    /// hundredth of a percent).
    fn amount(&self, field: &str, v: &Value) -> Result<Amount> {
        match v {
            Value::Number(n) => match n.as_u64() {
                Some(n) if n <= MAX_UNITS => Ok(Amount::Units(n)),
                Some(n) => Err(self.err(
                    field,
                    format!("{n} units: above the most a window counts, 2^53 - 1 ({MAX_UNITS})"),
                )),
                None => Err(self.err(field, format!("{n} is not a whole number of units ≥ 0"))),
            },
            Value::String(s) => {
                let bp = (s.trim().strip_suffix('%'))
                    .and_then(|p| p.trim().parse::<f64>().ok())
                    .filter(|p| p.is_finite() && (0.0..=100.0).contains(p))
                    .map(|p| (p * 100.0).round())
                    .ok_or_else(|| {
                        self.err(
                            field,
                            format!("'{s}' is neither units nor a percentage from 0% to 100%"),
                        )
                    })?;
                Ok(Amount::Basis(bp as u32))
            }
            _ => Err(self.err(field, "expected units (12) or a percentage (\"60%\")")),
        }
    }
}
