//! The names of the keys the ledger keeps in Redis (the layout is described
//! in [`super`]), in one place so the scripts' callers and the tools that
//! read or clean up keys agree on them.

/// The key of credential `credential`'s state hash.
pub fn state_key(credential: &str) -> String {
    format!("portion:{{{credential}}}:state")
}

/// Calls per segment of a pool's log (`lua/charge.lua`): call `s` sits in
/// segment `s / LOG_SEGMENT`, and so does its block's record in the index.
pub const LOG_SEGMENT: u64 = 65536;

/// The prefix of the keys of the log of `pool` of `credential`: its
/// segments are [`log_segment_key`]s.
pub fn log_key(credential: &str, pool: &str) -> String {
    format!("portion:{{{credential}}}:log:{pool}")
}

/// The key of segment `k` of the log of `pool` of `credential`.
pub fn log_segment_key(credential: &str, pool: &str, k: u64) -> String {
    format!("{}:{k}", log_key(credential, pool))
}

/// The prefix of the keys of the index of the log of `pool` of
/// `credential` (one record per block of calls: see `lua/charge.lua`).
pub fn index_key(credential: &str, pool: &str) -> String {
    format!("portion:{{{credential}}}:index:{pool}")
}

/// The key of segment `k` of the index of `pool` of `credential`: the
/// records of the blocks of log segment `k`.
pub fn index_segment_key(credential: &str, pool: &str, k: u64) -> String {
    format!("{}:{k}", index_key(credential, pool))
}

/// The key of job `job`'s run lock.
pub fn lock_key(job: &str) -> String {
    format!("portion:job:{{{job}}}:lock")
}

/// The key of job `job`'s cursor.
pub fn cursor_key(job: &str) -> String {
    format!("portion:job:{{{job}}}:cursor")
}

/// Buckets of a job's map in Redis: each a hash small enough to stay in
/// Redis's compact encoding (128 fields by default) up to ~10^6 fields.
pub const MAP_BUCKETS: u64 = 8192;

/// The key of bucket `b` of `map` (all of a map's keys share the hash tag
/// `{map}`: one Cluster slot).
pub fn map_bucket_key(map: &str, b: u64) -> String {
    format!("portion:map:{{{map}}}:{b}")
}

/// The key of the set of `map`'s buckets in use, so that reading or
/// forgetting a small map touches only the buckets it has.
pub fn map_buckets_key(map: &str) -> String {
    format!("portion:map:{{{map}}}:buckets")
}

/// The bucket of `field`: the same on every host and build.
pub fn map_bucket(field: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(field.as_bytes()) % MAP_BUCKETS
}
