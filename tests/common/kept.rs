//! What the store keeps for a job, read and written behind `portion`'s
//! back, on either store: a cursor (or an older build's list of a
//! fan-out's values) under its name, and a job's maps (a fan-out's list
//! of values, a position a field, and the values it has seen).

use crate::common::deployment::Deployment;
use crate::common::redis::RedisServer;

/// What the store keeps under a cursor's name (`details`, or a list's
/// `details:values:US:s1`), read and written behind `portion`'s back.
pub struct Kept<'a> {
    pub d: &'a Deployment,
    pub redis: Option<&'a RedisServer>,
}

impl Kept<'_> {
    fn sql(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.d.path().join("ledger.sqlite3")).unwrap()
    }

    pub fn get(&self, name: &str) -> Option<String> {
        match self.redis {
            Some(r) => Some(r.cli(&["GET", &format!("portion:job:{{{name}}}:cursor")]))
                .filter(|t| !t.is_empty()),
            None => self
                .sql()
                .query_row(
                    "SELECT cursor FROM job_cursor WHERE job = ?1",
                    [name],
                    |r| r.get(0),
                )
                .ok(),
        }
    }

    pub fn set(&self, name: &str, text: &str) {
        match self.redis {
            Some(r) => assert_eq!(
                r.cli(&["SET", &format!("portion:job:{{{name}}}:cursor"), text]),
                "OK"
            ),
            None => assert_eq!(
                (self.sql()).execute(
                    "INSERT OR REPLACE INTO job_cursor (job, cursor) VALUES (?1, ?2)",
                    [name, text],
                ),
                Ok(1)
            ),
        }
    }
}

impl Kept<'_> {
    /// Every field of map `name` with its value, by field.
    pub fn map(&self, name: &str) -> Vec<(String, String)> {
        let mut all = match self.redis {
            Some(r) => {
                let buckets = r.cli(&["SMEMBERS", &format!("portion:map:{{{name}}}:buckets")]);
                let mut all = Vec::new();
                for b in buckets.lines().filter(|b| !b.is_empty()) {
                    let flat = r.cli(&["HGETALL", &format!("portion:map:{{{name}}}:{b}")]);
                    let flat: Vec<&str> = flat.lines().collect();
                    all.extend(flat.chunks(2).map(|p| (p[0].to_string(), p[1].to_string())));
                }
                all
            }
            None => {
                let sql = self.sql();
                let mut q = sql
                    .prepare("SELECT field, value FROM job_map WHERE map = ?1")
                    .unwrap();
                q.query_map([name], |r| Ok((r.get(0)?, r.get(1)?)))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect()
            }
        };
        all.sort();
        all
    }

    /// A fan-out's list of values `name`: its id, and its values in order.
    pub fn list(&self, name: &str) -> (Option<String>, Vec<String>) {
        let mut id = None;
        let mut at: Vec<(u64, String)> = Vec::new();
        for (field, value) in self.map(name) {
            match field.parse() {
                Ok(p) => at.push((p, value)),
                Err(_) if field == "id" => id = Some(value),
                Err(_) => panic!("{name}: field {field}"),
            }
        }
        at.sort();
        (id, at.into_iter().map(|(_, v)| v).collect())
    }

    /// Set the fields of map `name` to `entries`, whatever it held.
    pub fn put(&self, name: &str, entries: &[(String, String)]) {
        for (field, value) in entries {
            match self.redis {
                Some(r) => {
                    let b = xxhash_rust::xxh3::xxh3_64(field.as_bytes()) % 8192;
                    r.cli(&[
                        "SADD",
                        &format!("portion:map:{{{name}}}:buckets"),
                        &b.to_string(),
                    ]);
                    r.cli(&["HSET", &format!("portion:map:{{{name}}}:{b}"), field, value]);
                }
                None => {
                    self.sql()
                        .execute(
                            "INSERT OR REPLACE INTO job_map (map, field, value) VALUES (?1, ?2, ?3)",
                            [name, field, value],
                        )
                        .unwrap();
                }
            }
        }
    }

    /// Field `field` of map `name`, if it has one.
    pub fn field(&self, name: &str, field: &str) -> Option<String> {
        match self.redis {
            Some(r) => {
                let b = xxhash_rust::xxh3::xxh3_64(field.as_bytes()) % 8192;
                Some(r.cli(&["HGET", &format!("portion:map:{{{name}}}:{b}"), field]))
                    .filter(|v| !v.is_empty())
            }
            None => self
                .sql()
                .query_row(
                    "SELECT value FROM job_map WHERE map = ?1 AND field = ?2",
                    [name, field],
                    |r| r.get(0),
                )
                .ok(),
        }
    }

    /// Forget map `name`.
    pub fn forget(&self, name: &str) {
        match self.redis {
            Some(r) => {
                let buckets = r.cli(&["SMEMBERS", &format!("portion:map:{{{name}}}:buckets")]);
                for b in buckets.lines().filter(|b| !b.is_empty()) {
                    r.cli(&["DEL", &format!("portion:map:{{{name}}}:{b}")]);
                }
                r.cli(&["DEL", &format!("portion:map:{{{name}}}:buckets")]);
            }
            None => {
                self.sql()
                    .execute("DELETE FROM job_map WHERE map = ?1", [name])
                    .unwrap();
            }
        }
    }

    /// Make map `name`'s field `field` one the store cannot read back as
    /// text (in Redis: its bucket a key of another type).
    pub fn spoil_field(&self, name: &str, field: &str) {
        match self.redis {
            Some(r) => {
                let b = xxhash_rust::xxh3::xxh3_64(field.as_bytes()) % 8192;
                let key = format!("portion:map:{{{name}}}:{b}");
                r.cli(&["DEL", &key]);
                r.cli(&["SET", &key, "x"]);
            }
            None => {
                self.sql()
                    .execute(
                        "UPDATE job_map SET value = X'FF00' WHERE map = ?1 AND field = ?2",
                        [name, field],
                    )
                    .unwrap();
            }
        }
    }
}
