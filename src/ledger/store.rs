//! Where the ledger lives ([`StoreLocation`], parsed from `--store`,
//! `$PORTION_STORE` or the file's `store:`), and [`Store`], a ledger of either
//! kind chosen at run time.

use std::path::PathBuf;
use std::time::Duration;

use super::JobStore;
use super::{
    At, BlockEnd, Charge, ChargeDecision, CredentialLog, EmbeddedLedger, Ledger, LockOutcome,
    Micros, Others, Pool, Receipt, RedisLedger, Settled, StoreError, topology,
};

/// Where the ledger lives, as the operator names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreLocation {
    /// One Redis, a Cluster or a Sentinel group: `redis://…`, `rediss://…`,
    /// `redis+cluster://…`, `redis+sentinel://…` (see [`topology`]).
    Redis(String),
    /// `embedded` (the default state directory) or `embedded:PATH`
    Embedded(Option<PathBuf>),
}

impl StoreLocation {
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if topology::is_redis_url(s) {
            Ok(Self::Redis(s.to_string()))
        } else if s == "embedded" {
            Ok(Self::Embedded(None))
        } else if let Some(path) = s.strip_prefix("embedded:") {
            Ok(Self::Embedded(Some(PathBuf::from(path))))
        } else {
            Err(format!(
                "unknown store '{}': expected redis://HOST:PORT/DB, rediss://…, redis+cluster://HOST:PORT,…, redis+sentinel://HOST:PORT,…/SERVICE, embedded or embedded:PATH",
                redact_url(s)
            ))
        }
    }
}

impl StoreLocation {
    /// This location with `embedded` (the default) resolved to its file, so
    /// that messages name the file a command reads.
    pub fn resolved(&self) -> Result<Self, StoreError> {
        Ok(match self {
            Self::Embedded(None) => Self::Embedded(Some(EmbeddedLedger::default_path()?)),
            other => other.clone(),
        })
    }
}

/// A store URL with any password masked, fit for logs and errors.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                "***".to_string()
            };
            format!("{}{}{}", &url[..scheme + 3], masked, &url[at..])
        }
        _ => url.to_string(),
    }
}

/// A ledger of either kind, chosen at run time from the configuration.
#[derive(Clone)]
pub enum Store {
    Redis(Box<RedisLedger>),
    Embedded(EmbeddedLedger),
}

impl Store {
    /// Open (or connect to) the store at `location`.
    pub async fn open(location: &StoreLocation) -> Result<Self, StoreError> {
        Ok(match location {
            StoreLocation::Redis(url) => Self::redis(url).await?,
            StoreLocation::Embedded(path) => {
                Self::Embedded(EmbeddedLedger::open(&embedded_path(path)?)?)
            }
        })
    }

    /// Open the store at `location` only if it exists, creating nothing:
    /// `Ok(None)` for an embedded store whose file is not there yet. `status`
    /// and `run --dry-run` read a store; they never make one (a store made
    /// by root would then be root's, and the service that needs to write it
    /// would fail). A Redis is connected to as by [`Store::open`].
    pub async fn open_existing(location: &StoreLocation) -> Result<Option<Self>, StoreError> {
        Ok(match location {
            StoreLocation::Redis(url) => Some(Self::redis(url).await?),
            StoreLocation::Embedded(path) => {
                EmbeddedLedger::open_existing(&embedded_path(path)?)?.map(Self::Embedded)
            }
        })
    }

    async fn redis(url: &str) -> Result<Self, StoreError> {
        Ok(Self::Redis(Box::new(RedisLedger::connect(url).await?)))
    }

    /// What this host's history (`history.json`) knows the store by. An
    /// embedded store: its file's canonical path and the id written inside
    /// it (see [`EmbeddedLedger::identity`]). A Redis: `name`, its URL as
    /// messages show it, whatever its data: a Redis that lost its data is
    /// the same store, and the history is there to notice.
    pub fn identity(&self, name: &str) -> String {
        match self {
            Self::Redis(_) => name.to_string(),
            Self::Embedded(l) => l.identity().to_string(),
        }
    }

    /// What the operator can do about a store that forgot charges.
    pub fn lost_log_advice(&self) -> &'static str {
        match self {
            Self::Redis(_) => {
                "A Redis that restarted without persistence, a FLUSHDB or a replica promoted without the data does this: turn on appendonly and keep maxmemory-policy noeviction"
            }
            Self::Embedded(_) => {
                "The store's file was replaced by an older copy of itself (restored from a backup?): the charges made since that copy are not in it"
            }
        }
    }
}

/// The embedded store's file: the one named, else the default.
fn embedded_path(path: &Option<PathBuf>) -> Result<PathBuf, StoreError> {
    match path {
        Some(p) => Ok(p.clone()),
        None => EmbeddedLedger::default_path(),
    }
}

/// Forward a call to whichever ledger this is.
macro_rules! each {
    ($self:ident, $l:ident => $call:expr) => {
        match $self {
            Self::Redis($l) => $call.await,
            Self::Embedded($l) => $call.await,
        }
    };
}

impl Ledger for Store {
    async fn charge(&self, charge: &Charge<'_>, at: At) -> Result<ChargeDecision, StoreError> {
        each!(self, l => l.charge(charge, at))
    }

    async fn block(
        &self,
        credential: &str,
        end: impl Into<BlockEnd> + Send,
        reason: &str,
        at: At,
    ) -> Result<Micros, StoreError> {
        let end = end.into();
        each!(self, l => l.block(credential, end, reason, at))
    }

    async fn unblock(&self, credential: &str) -> Result<Option<(Micros, String)>, StoreError> {
        each!(self, l => l.unblock(credential))
    }

    async fn upstream_remaining(
        &self,
        credential: &str,
        pool: &Pool,
        remaining: u64,
        reset: Option<BlockEnd>,
        at: At,
    ) -> Result<Others, StoreError> {
        each!(self, l => l.upstream_remaining(credential, pool, remaining, reset, at))
    }

    async fn settle(
        &self,
        credential: &str,
        receipt: &Receipt,
        cost: (&str, u64, u64),
        at: At,
    ) -> Result<Settled, StoreError> {
        each!(self, l => l.settle(credential, receipt, cost, at))
    }

    async fn read(
        &self,
        credential: &str,
        pools: &[Pool],
        at: At,
    ) -> Result<CredentialLog, StoreError> {
        each!(self, l => l.read(credential, pools, at))
    }
}

impl JobStore for Store {
    async fn take_lock(
        &self,
        job: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<LockOutcome, StoreError> {
        each!(self, l => l.take_lock(job, holder, ttl))
    }

    async fn renew_lock(&self, job: &str, holder: &str, ttl: Duration) -> Result<bool, StoreError> {
        each!(self, l => l.renew_lock(job, holder, ttl))
    }

    async fn release_lock(&self, job: &str, holder: &str) -> Result<bool, StoreError> {
        each!(self, l => l.release_lock(job, holder))
    }

    async fn load_cursor(&self, job: &str) -> Result<Option<String>, StoreError> {
        each!(self, l => l.load_cursor(job))
    }

    async fn save_cursor(&self, job: &str, cursor: &str) -> Result<(), StoreError> {
        each!(self, l => l.save_cursor(job, cursor))
    }

    async fn map_put_new(
        &self,
        map: &str,
        entries: &[(String, String)],
    ) -> Result<Vec<String>, StoreError> {
        each!(self, l => l.map_put_new(map, entries))
    }

    async fn map_put(&self, map: &str, entries: &[(String, String)]) -> Result<(), StoreError> {
        each!(self, l => l.map_put(map, entries))
    }

    async fn map_len(&self, map: &str) -> Result<u64, StoreError> {
        each!(self, l => l.map_len(map))
    }

    async fn map_read(&self, map: &str) -> Result<Vec<(String, String)>, StoreError> {
        each!(self, l => l.map_read(map))
    }

    async fn map_get(
        &self,
        map: &str,
        fields: &[String],
    ) -> Result<Vec<Option<String>>, StoreError> {
        each!(self, l => l.map_get(map, fields))
    }

    async fn map_forget(&self, map: &str) -> Result<(), StoreError> {
        each!(self, l => l.map_forget(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_store_passwords() {
        assert_eq!(
            redact_url("redis://user:hunter2@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact_url("redis://:pw@host"), "redis://:***@host");
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
    }

    #[test]
    fn parses_store_locations() {
        assert_eq!(
            StoreLocation::parse("embedded").unwrap(),
            StoreLocation::Embedded(None)
        );
        assert!(matches!(
            StoreLocation::parse("redis://127.0.0.1:1/0").unwrap(),
            StoreLocation::Redis(_)
        ));
        assert!(StoreLocation::parse("mongodb://x").is_err());
    }
}
