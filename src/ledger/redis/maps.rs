//! A job's maps in Redis ([`crate::ledger::Ledger::map_put_new`]): a map of
//! a million fields as one hash would leave Redis's compact encoding and
//! cost ~80 bytes a field, so its fields are spread over [`MAP_BUCKETS`]
//! small hashes by a hash of the field, with a set of the buckets in use.
//! Plain commands in one pipeline each: one writer at a time (the job's run
//! lock), and each command is safe to send again.

use std::collections::BTreeSet;

use redis::Value;

use super::RedisLedger;
use super::keys::{MAP_BUCKETS, map_bucket, map_bucket_key, map_buckets_key};
use super::wire::text;
use crate::ledger::StoreError;

impl RedisLedger {
    pub(super) async fn maps_put_new(
        &self,
        map: &str,
        entries: &[(String, String)],
    ) -> Result<Vec<String>, StoreError> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        let buckets: BTreeSet<u64> = entries.iter().map(|(f, _)| map_bucket(f)).collect();
        pipe.cmd("SADD")
            .arg(map_buckets_key(map))
            .arg(buckets.into_iter().collect::<Vec<_>>());
        pipe.ignore();
        for (field, value) in entries {
            let key = map_bucket_key(map, map_bucket(field));
            pipe.cmd("HSETNX").arg(&key).arg(field).arg(value).ignore();
            pipe.cmd("HGET").arg(&key).arg(field);
        }
        let pipe = &pipe;
        let held: Vec<Option<String>> = self
            .retrying("keep a job's map", |mut c| async move {
                pipe.query_async(&mut c).await
            })
            .await?;
        Ok(held
            .into_iter()
            .zip(entries)
            .map(|(h, (_, v))| h.unwrap_or_else(|| v.clone()))
            .collect())
    }

    pub(super) async fn maps_put(
        &self,
        map: &str,
        entries: &[(String, String)],
    ) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        let buckets: BTreeSet<u64> = entries.iter().map(|(f, _)| map_bucket(f)).collect();
        pipe.cmd("SADD")
            .arg(map_buckets_key(map))
            .arg(buckets.into_iter().collect::<Vec<_>>())
            .ignore();
        for (field, value) in entries {
            let key = map_bucket_key(map, map_bucket(field));
            pipe.cmd("HSET").arg(&key).arg(field).arg(value).ignore();
        }
        let pipe = &pipe;
        self.retrying("keep a job's map", |mut c| async move {
            pipe.query_async::<()>(&mut c).await
        })
        .await
    }

    /// The buckets of `map` in use.
    async fn buckets(&self, map: &str) -> Result<Vec<u64>, StoreError> {
        let cmd = &redis::cmd("SMEMBERS").arg(map_buckets_key(map)).clone();
        let mut b: Vec<u64> = self
            .retrying("read a job's map", |mut c| async move {
                cmd.query_async(&mut c).await
            })
            .await?;
        b.retain(|b| *b < MAP_BUCKETS);
        b.sort_unstable();
        Ok(b)
    }

    pub(super) async fn maps_len(&self, map: &str) -> Result<u64, StoreError> {
        let buckets = self.buckets(map).await?;
        if buckets.is_empty() {
            return Ok(0);
        }
        let mut pipe = redis::pipe();
        for b in buckets {
            pipe.cmd("HLEN").arg(map_bucket_key(map, b));
        }
        let pipe = &pipe;
        let lens: Vec<u64> = self
            .retrying("read a job's map", |mut c| async move {
                pipe.query_async(&mut c).await
            })
            .await?;
        Ok(lens.iter().sum())
    }

    pub(super) async fn maps_read(&self, map: &str) -> Result<Vec<(String, String)>, StoreError> {
        let buckets = self.buckets(map).await?;
        if buckets.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for b in buckets {
            pipe.cmd("HGETALL").arg(map_bucket_key(map, b));
        }
        let pipe = &pipe;
        let replies: Vec<Value> = self
            .retrying("read a job's map", |mut c| async move {
                pipe.query_async(&mut c).await
            })
            .await?;
        let mut all = Vec::new();
        for reply in &replies {
            match reply {
                Value::Map(pairs) => all.extend(pairs.iter().map(|(f, v)| (text(f), text(v)))),
                Value::Array(flat) => {
                    all.extend(flat.chunks(2).map(|p| (text(&p[0]), text(&p[1]))))
                }
                _ => {}
            }
        }
        all.sort();
        Ok(all)
    }

    pub(super) async fn maps_get(
        &self,
        map: &str,
        fields: &[String],
    ) -> Result<Vec<Option<String>>, StoreError> {
        if fields.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for field in fields {
            pipe.cmd("HGET")
                .arg(map_bucket_key(map, map_bucket(field)))
                .arg(field);
        }
        let pipe = &pipe;
        self.retrying("read a job's map", |mut c| async move {
            pipe.query_async(&mut c).await
        })
        .await
    }

    pub(super) async fn maps_forget(&self, map: &str) -> Result<(), StoreError> {
        let buckets = self.buckets(map).await?;
        let mut keys: Vec<String> = buckets.iter().map(|b| map_bucket_key(map, *b)).collect();
        keys.push(map_buckets_key(map));
        for chunk in keys.chunks(1024) {
            // (one slot: the keys share their hash tag; UNLINK frees them
            // in the background: a fan-out's list of millions of values
            // deleted at once blocked the server for as long)
            let cmd = &redis::cmd("UNLINK").arg(chunk).clone();
            self.retrying("forget a job's map", |mut c| async move {
                cmd.query_async::<()>(&mut c).await
            })
            .await?;
        }
        Ok(())
    }
}
