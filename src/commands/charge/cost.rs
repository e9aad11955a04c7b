//! `--cost POOL=N[,POOL=N]` read against the configured credential: the
//! pools it names, in units that can fit. Every mistake is a configuration
//! error (78) that names what is wrong, found before anything is charged.

use crate::config::{Config, Credential, MAX_UNITS, units_too_large};
use crate::ledger::PoolCost;
use crate::timefmt::fmt_window;
use crate::{Error, Result};

/// The `--cost` values (each `POOL=N[,POOL=N]`, or a bare `N` for a
/// credential with one pool), resolved against `cred`'s pools.
pub fn parse(config: &Config, cred: &Credential, values: &[String]) -> Result<Vec<PoolCost>> {
    let err = |message: String| Error::Config {
        file: config.file.clone(),
        field: format!("--cost (credential {})", cred.name),
        message,
    };
    let mut cost: Vec<PoolCost> = Vec::new();
    for item in values.iter().flat_map(|v| v.split(',')) {
        let item = item.trim();
        let (pool_name, units) = match item.split_once('=') {
            Some((p, n)) => (p.trim(), n.trim()),
            None if cred.pools.len() == 1 => (cred.pools[0].name.as_str(), item),
            None => {
                return Err(err(format!(
                    "'{item}' does not name a pool: write POOL=N (pools: {})",
                    pool_names(cred)
                )));
            }
        };
        let Some(pool) = cred.pools.iter().find(|p| p.name == pool_name) else {
            return Err(err(format!(
                "no pool named '{pool_name}' (pools: {})",
                pool_names(cred)
            )));
        };
        // Digits only: Rust's parse also takes a leading '+'.
        let digits = !units.is_empty() && units.bytes().all(|b| b.is_ascii_digit());
        let units = match units.parse::<u64>().ok().filter(|_| digits) {
            Some(n) if n > MAX_UNITS => {
                return Err(err(format!("pool {pool_name}: {}", units_too_large(n))));
            }
            Some(n) if n > 0 => n,
            // Digits only, yet no u64: larger still (not "not a number").
            None if digits => {
                return Err(err(format!("pool {pool_name}: {}", units_too_large(units))));
            }
            _ => {
                return Err(err(format!(
                    "pool {pool_name}: '{units}' is not a positive whole number of units"
                )));
            }
        };
        if cost.iter().any(|c| c.pool.name == pool_name) {
            return Err(err(format!("pool {pool_name} is named twice")));
        }
        cost.push(PoolCost {
            pool: pool.clone(),
            units,
        });
    }
    if cost.is_empty() {
        return Err(err("no pool named: write POOL=N".into()));
    }
    fits(&cost).map_err(err)?;
    Ok(cost)
}

/// A cost above a window's budget can never fit: refused before any store
/// is asked, naming the window.
fn fits(cost: &[PoolCost]) -> std::result::Result<(), String> {
    for c in cost {
        for w in &c.pool.windows {
            if c.units > w.budget() {
                return Err(format!(
                    "pool {}: {} units can never fit its {} window, whose budget is {} (limit {} less headroom {})",
                    c.pool.name,
                    c.units,
                    fmt_window(w.per),
                    w.budget(),
                    w.limit,
                    w.headroom
                ));
            }
        }
    }
    Ok(())
}

fn pool_names(cred: &Credential) -> String {
    cred.pools
        .iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
