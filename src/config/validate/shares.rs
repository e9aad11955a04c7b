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
            Some(v) => match self.amount(&format!("{at}.lend_after"), v)? {
                Amount::Basis(bp) => Some(bp),
                Amount::Units(_) => {
                    return Err(self.err(
                        format!("{at}.lend_after"),
                        "a part of each calendar period, as a percentage (\"80%\")",
                    ));
                }
            },
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

    /// Units (`12`) or a percentage of each window's budget (`"60%"`, to a
    /// hundredth of a percent).
    fn amount(&self, field: &str, v: &Value) -> Result<Amount> {
        match v {
            Value::Number(n) => match n.as_u64() {
                Some(n) if n <= MAX_UNITS => Ok(Amount::Units(n)),
                _ => Err(self.err(field, format!("{n} is not a whole number of units ≥ 0"))),
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
