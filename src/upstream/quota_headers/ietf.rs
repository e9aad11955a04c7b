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
