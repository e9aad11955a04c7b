//! What crosses between Rust and the scripts besides keys: the clock
//! argument, and script replies read as numbers, text, arrays, tag names and
//! typed errors.

use redis::Value;

use crate::ledger::{At, StoreError, untag};

/// A script's refusal of keys that an older build wrote (an `OLDER_LAYOUT`
/// error reply), typed.
pub(super) fn older_layout(e: StoreError, credential: &str) -> StoreError {
    match e {
        StoreError::Redis(r) if r.code() == Some("OLDER_LAYOUT") => StoreError::OlderLayout {
            credential: credential.to_string(),
        },
        e => e,
    }
}

/// The names of a credential's tags, indexed by tag id, from the flat
/// (id, "endpoint<TAB>job", ...) list the read scripts return.
pub(super) fn tag_names(flat: &[Value]) -> Result<Vec<(String, String)>, StoreError> {
    let mut names = Vec::new();
    for kv in flat.chunks(2) {
        let id = usize::try_from(int(&kv[0])?)
            .ok()
            .filter(|id| *id < 1 << 20)
            .ok_or_else(|| StoreError::Reply("a tag id out of range".into()))?;
        if names.len() <= id {
            names.resize(id + 1, (String::new(), String::new()));
        }
        names[id] = untag(&text(&kv[1]));
    }
    Ok(names)
}

pub(super) fn clock_arg(at: At) -> String {
    match at {
        At::StoreClock => String::new(),
        At::Fixed(us) => us.to_string(),
    }
}

pub(super) fn int(v: &Value) -> Result<i64, StoreError> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| StoreError::Reply("a number that is not one".into())),
        other => Err(StoreError::Reply(format!("{other:?}"))),
    }
}

pub(super) fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        _ => String::new(),
    }
}

pub(super) fn array(v: &Value) -> Result<&[Value], StoreError> {
    match v {
        Value::Array(a) => Ok(a),
        other => Err(StoreError::Reply(format!("{other:?}"))),
    }
}
