//! The limits the upstream last announced for each pool of a credential
//! (`X-RateLimit-Limit`, `RateLimit-Policy`, … as `upstream_headers` reads
//! them), kept in the store with when they were seen, so that `portion
//! status` (and every host) sees what the upstream says beside what the
//! YAML says. One map per credential ([`JobStore`]'s maps, in both
//! stores), a field per pool.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{Credential, LearnedWindow};
use crate::ledger::{JobStore, Micros, Pool, StoreError, Window};
use crate::timefmt::fmt_window;
use crate::upstream::quota_headers::AnnouncedLimit;

/// What the upstream last announced of one pool's limits, and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announced {
    pub limits: Vec<AnnouncedLimit>,
    /// When it was seen: the time of the latest charge before the answer,
    /// on the store's clock.
    pub seen: Micros,
}

/// The stored form: `{"seen": µs, "limits": [{"limit": 250, "per_seconds": 60}]}`.
#[derive(Serialize, Deserialize)]
struct Stored {
    seen: Micros,
    limits: Vec<StoredLimit>,
}

#[derive(Serialize, Deserialize)]
struct StoredLimit {
    limit: u64,
    per_seconds: Option<u64>,
}

/// The map of `credential`'s announced limits. (A job's maps are named
/// after the job, whose name holds no `/`: no job's map is this one.)
fn map_name(credential: &str) -> String {
    format!("upstream-limits/{credential}")
}

/// Keep what the upstream announced of `pool` of `credential`.
pub async fn keep(
    store: &impl JobStore,
    credential: &str,
    pool: &str,
    announced: &Announced,
) -> Result<(), StoreError> {
    let stored = Stored {
        seen: announced.seen,
        limits: (announced.limits.iter())
            .map(|l| StoredLimit {
                limit: l.limit,
                per_seconds: l.per.map(|p| p.as_secs()),
            })
            .collect(),
    };
    let value = serde_json::to_string(&stored).expect("announced limits serialize");
    store
        .map_put(&map_name(credential), &[(pool.to_string(), value)])
        .await
}

/// What the upstream last announced of each pool of `credential`, by pool
/// (a value this build cannot read is left out).
pub async fn read(
    store: &impl JobStore,
    credential: &str,
) -> Result<BTreeMap<String, Announced>, StoreError> {
    let entries = store.map_read(&map_name(credential)).await?;
    Ok(entries
        .into_iter()
        .filter_map(|(pool, value)| {
            let stored: Stored = serde_json::from_str(&value).ok()?;
            let limits = (stored.limits.into_iter())
                .map(|l| AnnouncedLimit {
                    limit: l.limit,
                    per: l.per_seconds.map(Duration::from_secs),
                })
                .collect();
            Some((
                pool,
                Announced {
                    limits,
                    seen: stored.seen,
                },
            ))
        })
        .collect())
}

/// The limit the upstream last announced for the learned window `lw` of
/// `cred` (`announced`: by pool), and when: the one of its window; a limit
/// whose window the upstream does not say (GitHub's, OpenAI's) is that
/// window's when it is the pool's only learned one (the lowest, if
/// several).
pub fn learned_limit(
    cred: &Credential,
    lw: &LearnedWindow,
    announced: &BTreeMap<String, Announced>,
) -> Option<(u64, Micros)> {
    let a = announced.get(&lw.pool)?;
    let of_its_window = (a.limits.iter()).find(|l| l.per == Some(lw.per) && l.limit > 0);
    let only = cred.learned.iter().filter(|l| l.pool == lw.pool).count() == 1;
    let unsaid = (a.limits.iter())
        .filter(|l| l.per.is_none() && l.limit > 0)
        .map(|l| l.limit)
        .min()
        .filter(|_| only);
    of_its_window
        .map(|l| l.limit)
        .or(unsaid)
        .map(|limit| (limit, a.seen))
}

/// `cred`'s pools with each learned window at what the upstream last
/// announced (`announced`), capped; one not learned yet as the YAML left
/// it (its cap, else no limit).
pub fn with_learned(cred: &Credential, announced: &BTreeMap<String, Announced>) -> Vec<Pool> {
    let mut pools = cred.pools.clone();
    for lw in &cred.learned {
        let learned = learned_limit(cred, lw, announced).map(|(limit, _)| limit);
        if let Some(w) = (pools.iter_mut())
            .find(|p| p.name == lw.pool)
            .and_then(|p| p.windows.get_mut(lw.index))
        {
            *w = lw.window(learned);
        }
    }
    pools
}

/// Whether the upstream announces a limit that none of the pool's
/// `windows` is: another number, or another window when it says one.
pub fn differs<'w>(
    windows: impl Iterator<Item = &'w Window> + Clone,
    limits: &[AnnouncedLimit],
) -> bool {
    limits.iter().any(|l| {
        !windows
            .clone()
            .any(|w| w.limit == l.limit && l.per.is_none_or(|per| per == w.per))
    })
}

/// `250 per 1m, 5000 per 1h`; a limit whose window the upstream does not
/// say: `5000 (its window unsaid)`.
pub fn upstream_says(limits: &[AnnouncedLimit]) -> String {
    let said: Vec<String> = (limits.iter())
        .map(|l| match l.per {
            Some(per) => format!("{} per {}", l.limit, fmt_window(per)),
            None => format!("{} (its window unsaid)", l.limit),
        })
        .collect();
    said.join(", ")
}

/// `5000 per 1h, 100 per 1m`: the pool's windows as the YAML says them.
pub fn pool_says<'w>(windows: impl Iterator<Item = &'w Window>) -> String {
    let said: Vec<String> = windows
        .map(|w| format!("{} per {}", w.limit, fmt_window(w.per)))
        .collect();
    said.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(limit: u64, secs: u64) -> Window {
        Window {
            per: Duration::from_secs(secs),
            limit,
            headroom: 0,
            aligned: None,
        }
    }

    fn said(limit: u64, per: Option<u64>) -> AnnouncedLimit {
        AnnouncedLimit {
            limit,
            per: per.map(Duration::from_secs),
        }
    }

    #[test]
    fn another_limit_or_window_differs_and_is_named() {
        let pool = [window(5000, 3600)];
        let w = || pool.iter();
        assert!(!differs(w(), &[said(5000, Some(3600))]));
        assert!(!differs(w(), &[said(5000, None)]), "no window said");
        assert!(differs(w(), &[said(250, Some(60))]));
        assert!(differs(w(), &[said(5000, Some(60))]), "another window");
        assert!(differs(w(), &[said(250, None)]));
        assert!(differs(w(), &[said(5000, Some(3600)), said(250, Some(60))]));
        assert_eq!(
            format!(
                "the upstream says {}; pool requests says {}",
                upstream_says(&[said(250, Some(60))]),
                pool_says(w())
            ),
            "the upstream says 250 per 1m; pool requests says 5000 per 1h"
        );
        assert_eq!(
            upstream_says(&[said(250, None), said(9, Some(1))]),
            "250 (its window unsaid), 9 per 1s"
        );
    }

    #[test]
    fn kept_and_read_back_from_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::ledger::EmbeddedLedger::open(&dir.path().join("q.db")).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            assert!(read(&store, "main").await.unwrap().is_empty());
            let first = Announced {
                limits: vec![said(250, Some(60))],
                seen: 1_000_000,
            };
            keep(&store, "main", "requests", &first).await.unwrap();
            let later = Announced {
                limits: vec![said(300, None)],
                seen: 2_000_000,
            };
            keep(&store, "main", "requests", &later).await.unwrap();
            keep(&store, "other", "requests", &first).await.unwrap();
            let got = read(&store, "main").await.unwrap();
            assert_eq!(got.len(), 1);
            assert_eq!(got["requests"], later, "the last one kept");
        });
    }
}
