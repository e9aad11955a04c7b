//! What an answer's headers say about the upstream's own quota: how long to
//! wait (`Retry-After`, RFC 9110: seconds or an HTTP-date), and whether the
//! quota is spent and until when (GitHub's `X-RateLimit-Remaining` /
//! `X-RateLimit-Reset`; the IETF `RateLimit` field, `r` and `t`, and its
//! older `RateLimit-Remaining` / `RateLimit-Reset`). Times the upstream
//! states as instants become durations against its own `Date` header when
//! it sends one, so this host's clock is not trusted for them.

use std::time::{Duration, SystemTime};

use reqwest::header::{DATE, HeaderMap, RETRY_AFTER};

use crate::config::CountHeaders;

mod ietf;

pub use self::ietf::{Policy, ietf_policies, stated, tightest};

/// The upstream's word on its quota, from one answer's headers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuotaHeaders {
    /// How long to wait before asking again, when the answer says.
    pub wait: Option<Duration>,
    /// The headers say no units remain.
    pub spent: bool,
    /// Which count said so, as the answer named it
    /// (`X-RateLimit-Remaining: 0`): a 2xx that says so blocks the
    /// credential as the refusal after it would.
    pub said: Option<&'static str>,
}

/// The counts that say "nothing remains" at 0, each with its reset: the
/// header of the count, the header of its reset, and how the run names it.
const SPENT_COUNTS: [(&str, &str, &str); 4] = [
    (
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        "X-RateLimit-Remaining: 0",
    ),
    (
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
        "x-ratelimit-remaining-requests: 0",
    ),
    (
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-tokens",
        "x-ratelimit-remaining-tokens: 0",
    ),
    (
        "ratelimit-remaining",
        "ratelimit-reset",
        "RateLimit-Remaining: 0",
    ),
];

impl QuotaHeaders {
    pub fn read(headers: &HeaderMap) -> Self {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let now = text(DATE.as_str())
            .and_then(|d| httpdate::parse_http_date(d).ok())
            .unwrap_or_else(SystemTime::now);
        let retry_after = text(RETRY_AFTER.as_str()).and_then(|v| retry_after(v, now));

        // Every count that says nothing remains, with its reset: GitHub's
        // (the reset in epoch seconds), OpenAI's requests and tokens
        // (durations such as `6m0s`), the IETF draft's `RateLimit:
        // "policy";r=0;t=30` and its older pair.
        let mut spent: Vec<(&'static str, Option<Duration>)> = SPENT_COUNTS
            .iter()
            .filter(|(count, ..)| lowest(headers, count) == Some(0))
            .map(|&(_, reset, said)| (said, text(reset).and_then(|r| reset_in(r, now))))
            .collect();
        if let Some(p) = tightest(&ietf_policies(headers)).filter(|p| p.remaining == Some(0)) {
            spent.insert(0, ("RateLimit: r=0", p.reset.map(Duration::from_secs)));
        }
        // (the latest reset of them all: until then, one of them says no)
        let reset = spent.iter().filter_map(|(_, reset)| *reset).max();
        Self {
            wait: retry_after.or(reset),
            spent: !spent.is_empty(),
            said: spent.first().map(|(said, _)| *said),
        }
    }
}

/// The upstream's own count of one pool, from one answer's headers
/// (`upstream_headers`): units remaining, and how long until its count
/// resets, against its own `Date` when an instant is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamCount {
    pub pool: String,
    pub remaining: u64,
    pub reset: Option<Duration>,
    /// The limit the count is of, when the upstream says.
    pub limit: Option<u64>,
    /// The window of that limit, when the upstream says (the IETF
    /// `RateLimit-Policy`'s `w`; the vendors' headers do not).
    pub window: Option<Duration>,
}

/// Every count `specs` name that the headers carry.
pub fn upstream_counts(specs: &[CountHeaders], headers: &HeaderMap) -> Vec<UpstreamCount> {
    if specs.is_empty() {
        return Vec::new();
    }
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let now = text(DATE.as_str())
        .and_then(|d| httpdate::parse_http_date(d).ok())
        .unwrap_or_else(SystemTime::now);
    specs
        .iter()
        .filter_map(|s| {
            let (mut remaining, mut reset, mut limit, mut window) = (None, None, None, None);
            // (the policy that says no first: its count, its quota, its window)
            if s.ietf_field
                && let Some(p) = tightest(&ietf_policies(headers))
            {
                (remaining, reset) = (p.remaining, p.reset.map(Duration::from_secs));
                (limit, window) = (p.quota, p.window.map(Duration::from_secs));
            }
            remaining = remaining.or_else(|| lowest(headers, &s.remaining));
            reset = reset.or_else(|| reset_in(text(s.reset.as_deref()?)?, now));
            let limit = limit.or_else(|| text(s.limit.as_deref()?)?.trim().parse().ok());
            Some(UpstreamCount {
                pool: s.pool.clone(),
                remaining: remaining?,
                reset,
                limit,
                window,
            })
        })
        .collect()
}

/// A limit the upstream announces: so many units, per a window when it
/// says which (the IETF `RateLimit-Policy`'s `w`; GitHub's and OpenAI's
/// headers do not).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AnnouncedLimit {
    pub limit: u64,
    pub per: Option<Duration>,
}

/// Every limit the answer announces for each pool `specs` name (in their
/// order, a pool left out when nothing is said of it): with the IETF field,
/// each policy `RateLimit-Policy` states (else the tightest count's
/// limit), else the spec's limit header.
pub fn announced_limits(
    specs: &[CountHeaders],
    headers: &HeaderMap,
) -> Vec<(String, Vec<AnnouncedLimit>)> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    specs
        .iter()
        .filter_map(|s| {
            let mut limits: Vec<AnnouncedLimit> = Vec::new();
            if s.ietf_field {
                let mut policies = stated(headers);
                if policies.is_empty() {
                    policies.extend(tightest(&ietf_policies(headers)).cloned());
                }
                limits.extend(policies.iter().filter_map(|p| {
                    Some(AnnouncedLimit {
                        limit: p.quota?,
                        per: p.window.map(Duration::from_secs),
                    })
                }));
            }
            if limits.is_empty()
                && let Some(limit) = text(s.limit.as_deref()?).and_then(|v| v.trim().parse().ok())
            {
                limits.push(AnnouncedLimit { limit, per: None });
            }
            limits.sort();
            limits.dedup();
            (!limits.is_empty()).then(|| (s.pool.clone(), limits))
        })
        .collect()
}

/// The lowest count among every value of header `name`: one sent twice (a
/// proxy's and the upstream's, or a line folded with commas) is taken at
/// its most cautious, not at whichever came first.
fn lowest(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| n.trim().parse::<u64>().ok())
        .min()
}

/// A reset as upstreams write it: epoch seconds (GitHub), seconds from
/// now (IETF), or a duration such as `6m0s`, `1.5s` or `20ms` (OpenAI).
fn reset_in(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(n) = value.parse::<u64>() {
        // (no delay is a billion seconds: such a number is an instant)
        return Some(if n > 1_000_000_000 {
            until(n, now)
        } else {
            Duration::from_secs(n)
        });
    }
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    go_duration(value)
}

/// `1h2m3.5s`, `6m0s`, `20ms`: numbers, each with its unit.
fn go_duration(mut s: &str) -> Option<Duration> {
    let mut total = Duration::ZERO;
    while !s.is_empty() {
        let n = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (num, rest) = s.split_at(n);
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (unit, rest) = rest.split_at(unit_len);
        let scale = match unit {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += Duration::try_from_secs_f64(num.parse::<f64>().ok()? * scale).ok()?;
        s = rest;
    }
    Some(total)
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
    fn upstream_counts_in_every_form_of_reset() {
        let date = "Mon, 23 Nov 2026 12:00:00 GMT";
        let epoch = 1_795_435_200 + 300; // 12:05:00 that day
        let spec = |remaining: &str, reset: &str, ietf_field| CountHeaders {
            pool: "p".into(),
            remaining: remaining.into(),
            reset: Some(reset.into()),
            limit: None,
            ietf_field,
        };
        let h = headers(&[
            ("date", date),
            ("x-ratelimit-remaining", "42"),
            ("x-ratelimit-reset", &epoch.to_string()),
            ("x-left-tokens", "900"),
            ("x-reset-tokens", "6m0.5s"),
            ("ratelimit", "\"a\";r=7;t=30, \"b\";r=3;t=50"),
            ("x-bad", "lots"),
        ]);
        let got = upstream_counts(
            &[
                spec("x-ratelimit-remaining", "x-ratelimit-reset", false),
                spec("x-left-tokens", "x-reset-tokens", false),
                spec("ratelimit-remaining", "ratelimit-reset", true),
                spec("x-bad", "x-reset-tokens", false),
            ],
            &h,
        );
        let pairs: Vec<(u64, Option<Duration>)> =
            got.iter().map(|c| (c.remaining, c.reset)).collect();
        assert_eq!(
            pairs,
            [
                (42, Some(Duration::from_secs(300))),
                (900, Some(Duration::from_millis(360_500))),
                (3, Some(Duration::from_secs(50))),
            ],
            "the unreadable count is left out"
        );
        assert_eq!(go_duration("1h2m3s"), Some(Duration::from_secs(3723)));
        assert_eq!(go_duration("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(go_duration("5x"), None);
    }

    #[test]
    fn a_count_sent_twice_is_taken_at_its_lowest() {
        let mut h = HeaderMap::new();
        for v in ["99", "junk", "10"] {
            h.append("x-ratelimit-remaining", v.parse().unwrap());
        }
        let spec = CountHeaders {
            pool: "p".into(),
            remaining: "x-ratelimit-remaining".into(),
            reset: None,
            limit: None,
            ietf_field: false,
        };
        let got = upstream_counts(std::slice::from_ref(&spec), &h);
        assert_eq!(got[0].remaining, 10);
        // Folded on one line, and a spent count after a non-zero one.
        let h = headers(&[("x-ratelimit-remaining", "7, 3")]);
        assert_eq!(upstream_counts(&[spec], &h)[0].remaining, 3);
        let mut h = headers(&[("x-ratelimit-remaining", "5")]);
        h.append("x-ratelimit-remaining", "0".parse().unwrap());
        assert!(QuotaHeaders::read(&h).spent);
        let mut h = headers(&[("ratelimit-remaining", "5")]);
        h.append("ratelimit-remaining", "0".parse().unwrap());
        assert!(QuotaHeaders::read(&h).spent);
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
    fn openais_spent_requests_or_tokens_and_the_latest_reset() {
        let h = headers(&[
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "1m2s"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        let q = QuotaHeaders::read(&h);
        assert_eq!(q.said, Some("x-ratelimit-remaining-requests: 0"));
        assert_eq!(q.wait, Some(Duration::from_secs(360)), "the later reset");
        let h = headers(&[
            ("x-ratelimit-remaining-requests", "4"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "20ms"),
        ]);
        let q = QuotaHeaders::read(&h);
        assert_eq!(
            (q.spent, q.said, q.wait),
            (
                true,
                Some("x-ratelimit-remaining-tokens: 0"),
                Some(Duration::from_millis(20))
            )
        );
        let h = headers(&[("x-ratelimit-remaining-tokens", "1")]);
        assert_eq!(QuotaHeaders::read(&h), QuotaHeaders::default());
    }

    #[test]
    fn an_ietf_count_says_its_policys_limit_and_window() {
        let spec = CountHeaders {
            pool: "requests".into(),
            remaining: "ratelimit-remaining".into(),
            reset: Some("ratelimit-reset".into()),
            limit: Some("ratelimit-limit".into()),
            ietf_field: true,
        };
        let h = headers(&[
            (
                "ratelimit-policy",
                "\"hour\";q=5000;w=3600, \"minute\";q=250;w=60",
            ),
            ("ratelimit", "\"hour\";r=4000;t=1800, \"minute\";r=20;t=15"),
        ]);
        let got = upstream_counts(std::slice::from_ref(&spec), &h);
        assert_eq!(
            got,
            [UpstreamCount {
                pool: "requests".into(),
                remaining: 20,
                reset: Some(Duration::from_secs(15)),
                limit: Some(250),
                window: Some(Duration::from_secs(60)),
            }]
        );
        // The older pair: its limit, no window.
        let h = headers(&[
            ("ratelimit-limit", "100"),
            ("ratelimit-remaining", "7"),
            ("ratelimit-reset", "9"),
        ]);
        let got = upstream_counts(&[spec], &h);
        assert_eq!(
            (got[0].remaining, got[0].limit, got[0].window),
            (7, Some(100), None)
        );
        // The older draft's dictionary says nothing remains.
        let h = headers(&[("ratelimit", "limit=100, remaining=0, reset=30")]);
        let q = QuotaHeaders::read(&h);
        assert_eq!(
            (q.said, q.wait),
            (Some("RateLimit: r=0"), Some(Duration::from_secs(30)))
        );
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
                spent: true,
                said: Some("RateLimit-Remaining: 0"),
            }
        );
        let h = headers(&[("ratelimit", "\"hour\";r=40;t=900")]);
        assert!(!QuotaHeaders::read(&h).spent);
    }
}
