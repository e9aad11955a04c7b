//! The IETF draft's fields (draft-ietf-httpapi-ratelimit-headers):
//! `RateLimit` (what remains of each policy, and when it resets) and
//! `RateLimit-Policy` (each policy's quota and window), in the current
//! draft's form and the older ones', joined policy by policy. Apart from
//! the vendors' plain headers, which need no structured-field parser.

use reqwest::header::HeaderMap;

/// One policy of the IETF draft's fields (draft-ietf-httpapi-ratelimit-headers):
/// from `RateLimit`, what remains (`r`) and the seconds until its reset
/// (`t`); from `RateLimit-Policy`, its quota (`q`) and window (`w`, seconds).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Its name (`"default"`), when the field names it.
    pub name: Option<String>,
    pub remaining: Option<u64>,
    pub reset: Option<u64>,
    pub quota: Option<u64>,
    pub window: Option<u64>,
}

/// The policies of an answer's `RateLimit` field (the current draft's list,
/// `"default";r=50;t=30`, or an older draft's dictionary, `limit=100,
/// remaining=50, reset=30`), each with its quota and window from
/// `RateLimit-Policy` (`"default";q=100;w=60`, or an older draft's
/// `100;w=60`), joined by name; an unnamed one is joined to the policy of
/// its limit, else to the only one. Unreadable fields say nothing.
pub fn ietf_policies(headers: &HeaderMap) -> Vec<Policy> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let stated = text("ratelimit-policy")
        .map(policy_field)
        .unwrap_or_default();
    let mut counts = text("ratelimit").map(ratelimit_field).unwrap_or_default();
    for count in &mut counts {
        let same = |p: &&Policy| match (&p.name, &count.name) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        };
        let of_its_limit = |p: &&Policy| count.quota.is_some() && p.quota == count.quota;
        let found = stated
            .iter()
            .find(same)
            .or_else(|| stated.iter().find(of_its_limit))
            .or_else(|| match (stated.as_slice(), count.name.is_none()) {
                ([only], true) => Some(only),
                _ => None,
            });
        if let Some(p) = found {
            count.quota = count.quota.or(p.quota);
            count.window = p.window;
        }
    }
    counts
}

/// The policies `RateLimit-Policy` states, with or without a count.
pub fn stated(headers: &HeaderMap) -> Vec<Policy> {
    headers
        .get("ratelimit-policy")
        .and_then(|v| v.to_str().ok())
        .map(policy_field)
        .unwrap_or_default()
}

/// The policy of least remaining: the one that says no first.
pub fn tightest(policies: &[Policy]) -> Option<&Policy> {
    policies
        .iter()
        .filter(|p| p.remaining.is_some())
        .min_by_key(|p| p.remaining)
}

/// A parameter (or a dictionary member) that is a whole number, 0 or more.
fn whole(item: Option<&sfv::BareItem>) -> Option<u64> {
    item.and_then(|v| v.as_integer())
        .and_then(|i| u64::try_from(i64::from(i)).ok())
}

/// A policy's name: a string or a token.
fn named(item: &sfv::BareItem) -> Option<String> {
    item.as_string()
        .map(|s| s.as_str().to_string())
        .or_else(|| item.as_token().map(|t| t.as_str().to_string()))
}

/// The `RateLimit` field's policies (`r`, `t`; an older draft's dictionary
/// also gives its `limit`).
fn ratelimit_field(value: &str) -> Vec<Policy> {
    if let Ok(list) = sfv::Parser::new(value).parse::<sfv::List>() {
        return items(&list)
            .map(|item| Policy {
                name: named(&item.bare_item),
                remaining: whole(item.params.get("r")),
                reset: whole(item.params.get("t")),
                ..Policy::default()
            })
            .collect();
    }
    let Ok(dict) = sfv::Parser::new(value).parse::<sfv::Dictionary>() else {
        return Vec::new();
    };
    let member = |key: &str| match dict.get(key) {
        Some(sfv::ListEntry::Item(item)) => whole(Some(&item.bare_item)),
        _ => None,
    };
    vec![Policy {
        remaining: member("remaining"),
        reset: member("reset"),
        quota: member("limit"),
        ..Policy::default()
    }]
}

/// The `RateLimit-Policy` field's policies: `"name";q=100;w=60`, or an
/// older draft's `100;w=60` (the quota as the item itself).
fn policy_field(value: &str) -> Vec<Policy> {
    let Ok(list) = sfv::Parser::new(value).parse::<sfv::List>() else {
        return Vec::new();
    };
    items(&list)
        .map(|item| Policy {
            name: named(&item.bare_item),
            quota: whole(item.params.get("q")).or_else(|| whole(Some(&item.bare_item))),
            window: whole(item.params.get("w")),
            ..Policy::default()
        })
        .collect()
}

/// The items of a list (an inner list is no policy).
fn items(list: &sfv::List) -> impl Iterator<Item = &sfv::Item> {
    list.iter().filter_map(|entry| match entry {
        sfv::ListEntry::Item(item) => Some(item),
        sfv::ListEntry::InnerList(_) => None,
    })
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

    fn policy(name: Option<&str>, r: u64, t: u64, q: Option<u64>, w: Option<u64>) -> Policy {
        Policy {
            name: name.map(String::from),
            remaining: Some(r),
            reset: Some(t),
            quota: q,
            window: w,
        }
    }

    #[test]
    fn the_current_drafts_fields_joined_by_name() {
        let h = headers(&[
            ("ratelimit-policy", "\"default\";q=100;w=60"),
            ("ratelimit", "\"default\";r=50;t=30"),
        ]);
        assert_eq!(
            ietf_policies(&h),
            [policy(Some("default"), 50, 30, Some(100), Some(60))]
        );
        // Two policies, in another order in each field; names as tokens too.
        let h = headers(&[
            (
                "ratelimit-policy",
                "\"day\";q=1000;w=86400, \"minute\";q=50;w=60",
            ),
            ("ratelimit", "minute;r=0;t=12, day;r=700;t=4000"),
        ]);
        let got = ietf_policies(&h);
        assert_eq!(
            got,
            [
                policy(Some("minute"), 0, 12, Some(50), Some(60)),
                policy(Some("day"), 700, 4000, Some(1000), Some(86400)),
            ]
        );
        assert_eq!(tightest(&got), Some(&got[0]));
        // A policy RateLimit does not name has no count; one of another
        // name is not joined.
        let h = headers(&[
            ("ratelimit-policy", "\"a\";q=10;w=1"),
            ("ratelimit", "\"b\";r=3;t=1"),
        ]);
        assert_eq!(ietf_policies(&h), [policy(Some("b"), 3, 1, None, None)]);
    }

    #[test]
    fn the_older_drafts_fields() {
        // The dictionary, its limit naming its policy among several.
        let h = headers(&[
            ("ratelimit-policy", "1000;w=3600, 100;w=60"),
            ("ratelimit", "limit=100, remaining=0, reset=30"),
        ]);
        assert_eq!(
            ietf_policies(&h),
            [policy(None, 0, 30, Some(100), Some(60))]
        );
        // An unnamed count and a single policy: that one.
        let h = headers(&[
            ("ratelimit-policy", "10;w=1"),
            ("ratelimit", "remaining=4, reset=1"),
        ]);
        assert_eq!(ietf_policies(&h), [policy(None, 4, 1, Some(10), Some(1))]);
        // No policy field: the count alone.
        let h = headers(&[("ratelimit", "limit=5, remaining=2, reset=9")]);
        assert_eq!(ietf_policies(&h), [policy(None, 2, 9, Some(5), None)]);
    }

    #[test]
    fn unreadable_fields_say_nothing() {
        let read = |policy_field: &str, ratelimit: &str| {
            ietf_policies(&headers(&[
                ("ratelimit-policy", policy_field),
                ("ratelimit", ratelimit),
            ]))
        };
        // A policy field that does not parse: the count alone.
        assert_eq!(
            read("garbage;;", "\"x\";r=1;t=1"),
            [policy(Some("x"), 1, 1, None, None)]
        );
        // Negative numbers are no count and no quota.
        let got = read("\"x\";q=-5;w=60", "\"x\";r=-1;t=1");
        assert_eq!((got[0].remaining, got[0].quota), (None, None));
        assert_eq!(tightest(&got), None);
        // An inner list is no policy; a count field that does not parse
        // is no count.
        assert_eq!(read("", "(\"inner\" \"list\");r=1"), []);
        assert_eq!(read("\"x\";q=1;w=1", "not a field ,,"), []);
    }
}
