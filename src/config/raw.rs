//! The raw shape of the configuration file, as serde reads it: every struct
//! refuses unknown keys, and every map keeps its order and refuses a repeated
//! key. [`super::validate`] turns these into checked, typed values.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};
use serde_yaml::Value;

use super::StorePolicy;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) store: Option<String>,
    pub(super) http: Option<RawHttp>,
    pub(super) lock_ttl: Option<String>,
    #[serde(default)]
    pub(super) credentials: OrderedMap<RawCredential>,
    #[serde(default)]
    pub(super) endpoints: OrderedMap<RawEndpoint>,
    #[serde(default)]
    pub(super) jobs: OrderedMap<RawJob>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    pub(super) timeout: Option<String>,
    pub(super) connect_timeout: Option<String>,
    pub(super) retries: Option<i64>,
    pub(super) backoff: Option<String>,
    pub(super) max_body: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCredential {
    pub(super) secret: Value,
    pub(super) upstream_reset: Option<String>,
    pub(super) upstream_headers: Option<Value>,
    pub(super) mode: Option<String>,
    pub(super) pools: OrderedMap<Vec<RawWindow>>,
    pub(super) shares: Option<OrderedMap<RawShare>>,
    pub(super) lend_after: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawShare {
    pub(super) reserve: Option<Value>,
    pub(super) limit: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWindow {
    /// With `from: upstream`, a cap (optional).
    pub(super) limit: Option<i64>,
    /// `upstream`: the limit is the one the upstream announces.
    pub(super) from: Option<String>,
    pub(super) per: String,
    pub(super) headroom: Option<Value>,
    pub(super) aligned: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEndpoint {
    pub(super) cost: Value,
    pub(super) on_store_error: Option<StorePolicy>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJob {
    pub(super) credential: String,
    pub(super) regions: Option<Vec<String>>,
    pub(super) inputs: Option<RawInputs>,
    pub(super) once: Option<bool>,
    /// `{key}` may stand in a URL's host that receives the secret.
    pub(super) hosts_from_inputs: Option<bool>,
    pub(super) steps: Vec<RawStep>,
    /// A folder (a string), or `{ folder, sqlite }`: see `validate/output.rs`.
    pub(super) output: Value,
    pub(super) schedule: Option<String>,
    /// Requests in flight at once (see `concurrency.rs`).
    pub(super) concurrency: Option<Value>,
    /// How long a run waits for refused units before it stops (a duration).
    pub(super) max_wait: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOutput {
    pub(super) folder: Option<String>,
    pub(super) sqlite: Option<RawSqlite>,
    pub(super) postgres: Option<RawPostgres>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPostgres {
    pub(super) url: Value,
    pub(super) table: String,
    pub(super) items: Option<String>,
    pub(super) key: Option<String>,
    #[serde(default)]
    pub(super) search: Vec<String>,
    pub(super) search_language: Option<String>,
    /// As `output.sqlite`'s (`RawSqlite::columns`).
    pub(super) columns: Option<serde_yaml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSqlite {
    pub(super) path: String,
    pub(super) table: String,
    pub(super) items: Option<String>,
    pub(super) key: Option<String>,
    #[serde(default)]
    pub(super) search: Vec<String>,
    /// `{ NAME: POINTER | { from: POINTER, type: TYPE } }`, read by hand
    /// so that each error names its column.
    pub(super) columns: Option<serde_yaml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawInputs {
    pub(super) file: String,
    pub(super) key: Option<String>,
    pub(super) batch: Option<i64>,
    pub(super) join: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStep {
    pub(super) endpoint: String,
    pub(super) request: RawRequest,
    pub(super) paginate: Option<RawPaginate>,
    pub(super) for_each: Option<RawForEach>,
    pub(super) conditional: Option<bool>,
    pub(super) on_not_modified: Option<String>,
    pub(super) incremental: Option<RawIncremental>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIncremental {
    pub(super) from: String,
    pub(super) param: String,
    pub(super) initial: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawForEach {
    pub(super) from: Option<String>,
    pub(super) batch: Option<i64>,
    pub(super) join: Option<String>,
    pub(super) per_page: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRequest {
    pub(super) method: Option<String>,
    pub(super) url: String,
    #[serde(default)]
    pub(super) query: OrderedMap<Value>,
    #[serde(default)]
    pub(super) headers: OrderedMap<String>,
    /// A JSON template: placeholders inside its strings.
    pub(super) body: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPaginate {
    pub(super) token: Option<String>,
    pub(super) param: Option<String>,
    pub(super) link: Option<String>,
    pub(super) next_url: Option<String>,
    pub(super) page: Option<String>,
    pub(super) start: Option<i64>,
    pub(super) offset: Option<String>,
    pub(super) size: Option<i64>,
    pub(super) until_empty: Option<String>,
    pub(super) max_pages: i64,
}

/// A YAML map that keeps its order and refuses a repeated key.
pub(super) struct OrderedMap<V>(pub(super) Vec<(String, V)>);

impl<V> Default for OrderedMap<V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for OrderedMap<V> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MapVisitor<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for MapVisitor<V> {
            type Value = OrderedMap<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(OrderedMap(Vec::new()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries: Vec<(String, V)> = Vec::new();
                // (a set beside the list: a map of 10^5 jobs is checked in
                // linear time, not quadratic)
                let mut seen = std::collections::HashSet::new();
                while let Some(key) = map.next_key::<String>()? {
                    if !seen.insert(key.clone()) {
                        return Err(de::Error::custom(format!("duplicate key '{key}'")));
                    }
                    let value = map.next_value()?;
                    entries.push((key, value));
                }
                Ok(OrderedMap(entries))
            }
        }
        d.deserialize_any(MapVisitor(PhantomData))
    }
}
