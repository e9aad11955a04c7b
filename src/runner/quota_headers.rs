//! What an answer's headers say about the upstream's own quota: how long to
//! wait (`Retry-After`, RFC 9110: seconds or an HTTP-date), and whether the
//! quota is spent and until when (GitHub's `X-RateLimit-Remaining` /
//! `X-RateLimit-Reset`; the IETF `RateLimit` field, `r` and `t`, and its
//! older `RateLimit-Remaining` / `RateLimit-Reset`). Times the upstream
//! states as instants become durations against its own `Date` header when
//! it sends one, so this host's clock is not trusted for them.

use std::time::{Duration, SystemTime};

use reqwest::header::{DATE, HeaderMap, RETRY_AFTER};

/// The upstream's word on its quota, from one answer's headers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuotaHeaders {
    /// How long to wait before asking again, when the answer says.
    pub wait: Option<Duration>,
    /// The headers say no units remain.
    pub spent: bool,
}

impl QuotaHeaders {
    pub fn read(headers: &HeaderMap) -> Self {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let now = text(DATE.as_str())
            .and_then(|d| httpdate::parse_http_date(d).ok())
            .unwrap_or_else(SystemTime::now);
        let retry_after = text(RETRY_AFTER.as_str()).and_then(|v| retry_after(v, now));
        let number = |name: &str| text(name).and_then(|v| v.trim().parse::<u64>().ok());

        // GitHub: remaining, and the reset as epoch seconds.
        let github_spent = number("x-ratelimit-remaining") == Some(0);
        let github_reset = number("x-ratelimit-reset").map(|epoch| until(epoch, now));
        // IETF draft: `RateLimit: "policy";r=0;t=30`, or the older pair.
        let (ietf_r, ietf_t) = text("ratelimit").map_or((None, None), ratelimit_field);
        let ietf_spent = ietf_r == Some(0) || number("ratelimit-remaining") == Some(0);
        let ietf_reset = ietf_t
            .or_else(|| number("ratelimit-reset"))
            .map(Duration::from_secs);

        let spent = github_spent || ietf_spent;
        let reset = if github_spent {
            github_reset
        } else if ietf_spent {
            ietf_reset
        } else {
            None
        };
        Self {
            wait: retry_after.or(reset),
            spent,
        }
    }
}

/// `Retry-After`: delay-seconds or an HTTP-date (RFC 9110, 10.2.3). A delay
/// too large for any clock is as long as can be; the caller caps it.
fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return Some(
            value
                .parse::<u64>()
                .map(Duration::from_secs)
                .unwrap_or(Duration::MAX),
        );
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or_default())
}

/// The wait until `epoch` seconds, on the clock `now` comes from.
fn until(epoch: u64, now: SystemTime) -> Duration {
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(epoch);
    at.duration_since(now).unwrap_or_default()
}

/// The smallest `r` (remaining) and its `t` (seconds to reset) among the
/// policies of a `RateLimit` structured field.
fn ratelimit_field(value: &str) -> (Option<u64>, Option<u64>) {
    let Ok(list) = sfv::Parser::new(value).parse::<sfv::List>() else {
        return (None, None);
    };
    let param = |item: &sfv::Item, key: &str| {
        item.params
            .get(key)
            .and_then(|v| v.as_integer())
            .and_then(|i| u64::try_from(i64::from(i)).ok())
    };
    list.iter()
        .filter_map(|entry| match entry {
            sfv::ListEntry::Item(item) => Some((param(item, "r"), param(item, "t"))),
            sfv::ListEntry::InnerList(_) => None,
        })
        .min_by_key(|(r, _)| r.unwrap_or(u64::MAX))
        .unwrap_or((None, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn retry_after_in_both_forms_of_rfc_9110() {
        let date = "Mon, 23 Nov 2026 12:00:00 GMT";
        let h = headers(&[("date", date), ("retry-after", "120")]);
        assert_eq!(QuotaHeaders::read(&h).wait, Some(Duration::from_secs(120)));
        // An HTTP-date, against the upstream's own Date.
        let h = headers(&[
            ("date", date),
            ("retry-after", "Mon, 23 Nov 2026 12:05:00 GMT"),
        ]);
        assert_eq!(QuotaHeaders::read(&h).wait, Some(Duration::from_secs(300)));
        // Huge values do not overflow into "now": they are as long as can be.
        for huge in [
            "99999999999",
            "18446744073709551615",
            "999999999999999999999999",
        ] {
            let h = headers(&[("retry-after", huge)]);
            assert!(QuotaHeaders::read(&h).wait.unwrap() >= Duration::from_secs(99_999_999_999));
        }
        // A date in the past means now; garbage means nothing said.
        let h = headers(&[
            ("date", date),
            ("retry-after", "Sun, 22 Nov 2026 12:00:00 GMT"),
        ]);
        assert_eq!(QuotaHeaders::read(&h).wait, Some(Duration::ZERO));
        assert_eq!(
            QuotaHeaders::read(&headers(&[("retry-after", "soon")])).wait,
            None
        );
    }

    #[test]
    fn githubs_spent_quota_and_its_reset() {
        let h = headers(&[
            ("date", "Mon, 23 Nov 2026 12:00:00 GMT"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1795435500"), // 12:05:00
        ]);
        let q = QuotaHeaders::read(&h);
        assert!(q.spent);
        assert_eq!(q.wait, Some(Duration::from_secs(300)));
        let h = headers(&[
            ("x-ratelimit-remaining", "12"),
            ("x-ratelimit-reset", "1795435500"),
        ]);
        assert_eq!(QuotaHeaders::read(&h), QuotaHeaders::default());
    }

    #[test]
    fn the_ietf_ratelimit_fields() {
        let h = headers(&[("ratelimit", "\"hour\";r=40;t=900, \"minute\";r=0;t=30")]);
        let q = QuotaHeaders::read(&h);
        assert!(q.spent);
        assert_eq!(q.wait, Some(Duration::from_secs(30)));
        let h = headers(&[("ratelimit-remaining", "0"), ("ratelimit-reset", "45")]);
        assert_eq!(
            QuotaHeaders::read(&h),
            QuotaHeaders {
                wait: Some(Duration::from_secs(45)),
                spent: true
            }
        );
        let h = headers(&[("ratelimit", "\"hour\";r=40;t=900")]);
        assert!(!QuotaHeaders::read(&h).spent);
    }
}
