//! `upstream_headers` on a credential (issue 13, part 2): which response
//! headers carry the upstream's own remaining count and reset, per pool.
//! Presets name the common ones; an explicit map names any. Resolved here
//! against the credential's pools; read by `upstream::quota_headers`.

use serde_yaml::Value;

/// Where one pool's remaining count and reset are read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountHeaders {
    pub pool: String,
    /// The header with the remaining units (lower case).
    pub remaining: String,
    /// The header with the reset: epoch seconds, seconds from now, or a
    /// duration such as `6m0s` (read by its form).
    pub reset: Option<String>,
    /// The header with the limit the count is of, when the upstream says:
    /// a count of another limit than the pool's longest window's is not
    /// applied (OpenAI's tokens per minute against a pool whose longest
    /// window is a day).
    pub limit: Option<String>,
    /// Also read the IETF `RateLimit` structured field (`r`, `t`) first.
    pub ietf_field: bool,
}

/// Resolve `upstream_headers` against the credential's `pools`; the error
/// is the message for the field.
pub fn resolve(v: &Value, pools: &[String]) -> Result<Vec<CountHeaders>, String> {
    // (github and ietf apply to `requests`, or to the credential's only pool)
    let requests = || -> Result<String, String> {
        if pools.iter().any(|p| p == "requests") {
            Ok("requests".into())
        } else if let [only] = pools {
            Ok(only.clone())
        } else {
            Err(format!(
                "github and ietf apply to the pool named requests, or to a credential's only pool; this one has {}: name the headers per pool instead ({{ POOL: {{ remaining: HEADER, reset: HEADER }} }})",
                pools.join(", ")
            ))
        }
    };
    let named = |pool: String, remaining: &str, reset: &str, limit: &str| CountHeaders {
        pool,
        remaining: remaining.into(),
        reset: Some(reset.into()),
        limit: Some(limit.into()),
        ietf_field: false,
    };
    match v {
        Value::String(s) if s == "github" => Ok(vec![named(
            requests()?,
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
            "x-ratelimit-limit",
        )]),
        Value::String(s) if s == "ietf" => Ok(vec![CountHeaders {
            ietf_field: true,
            ..named(
                requests()?,
                "ratelimit-remaining",
                "ratelimit-reset",
                "ratelimit-limit",
            )
        }]),
        Value::String(s) if s == "openai" => {
            for need in ["requests", "tokens"] {
                if !pools.iter().any(|p| p == need) {
                    return Err(format!(
                        "openai reads the pools requests and tokens; this credential has no pool {need}"
                    ));
                }
            }
            Ok(vec![
                named(
                    "requests".into(),
                    "x-ratelimit-remaining-requests",
                    "x-ratelimit-reset-requests",
                    "x-ratelimit-limit-requests",
                ),
                named(
                    "tokens".into(),
                    "x-ratelimit-remaining-tokens",
                    "x-ratelimit-reset-tokens",
                    "x-ratelimit-limit-tokens",
                ),
            ])
        }
        Value::Mapping(m) if !m.is_empty() => {
            m.iter().map(|(k, v)| explicit(k, v, pools)).collect()
        }
        _ => Err(
            "expected github, openai, ietf, or { POOL: { remaining: HEADER, reset: HEADER } }"
                .into(),
        ),
    }
}

/// One pool's `{remaining: HEADER, reset: HEADER}`.
fn explicit(k: &Value, v: &Value, pools: &[String]) -> Result<CountHeaders, String> {
    let pool = k.as_str().ok_or("pool names are strings")?;
    if !pools.iter().any(|p| p == pool) {
        return Err(format!("no pool {pool} (pools: {})", pools.join(", ")));
    }
    let header = |key: &str| -> Result<Option<String>, String> {
        match v.get(key) {
            None => Ok(None),
            Some(Value::String(h))
                if reqwest::header::HeaderName::from_bytes(h.as_bytes()).is_ok() =>
            {
                Ok(Some(h.to_ascii_lowercase()))
            }
            Some(_) => Err(format!("{pool}.{key}: expected a header name")),
        }
    };
    let Value::Mapping(m) = v else {
        return Err(format!(
            "{pool}: expected {{ remaining: HEADER, reset: HEADER }}"
        ));
    };
    if let Some(k) = m
        .keys()
        .find(|k| !matches!(k.as_str(), Some("remaining" | "reset" | "limit")))
    {
        return Err(format!(
            "{pool}: unknown key {k:?} (remaining, reset, limit)"
        ));
    }
    Ok(CountHeaders {
        pool: pool.into(),
        remaining: header("remaining")?.ok_or(format!("{pool}: no remaining header"))?,
        reset: header("reset")?,
        limit: header("limit")?,
        ietf_field: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(s: &str) -> Value {
        serde_yaml::from_str(s).unwrap()
    }

    #[test]
    fn presets_and_maps_resolve_against_the_pools() {
        let pools = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let gh = resolve(&yaml("github"), &pools(&["core"])).unwrap();
        assert_eq!(gh[0].pool, "core");
        assert!(resolve(&yaml("github"), &pools(&["a", "b"])).is_err());
        let ai = resolve(&yaml("openai"), &pools(&["requests", "tokens"])).unwrap();
        assert_eq!(ai[1].remaining, "x-ratelimit-remaining-tokens");
        assert!(resolve(&yaml("openai"), &pools(&["requests"])).is_err());
        let m = resolve(
            &yaml("{ a: { remaining: X-Left, reset: X-Reset } }"),
            &pools(&["a"]),
        )
        .unwrap();
        assert_eq!(
            (m[0].remaining.as_str(), m[0].reset.as_deref()),
            ("x-left", Some("x-reset"))
        );
        for bad in [
            "{ b: { remaining: x } }",
            "{ a: { reset: x } }",
            "{ a: { left: x } }",
            "7",
        ] {
            assert!(resolve(&yaml(bad), &pools(&["a"])).is_err(), "{bad}");
        }
    }
}
