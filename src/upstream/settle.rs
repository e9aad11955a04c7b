//! Costs settled from the response (issue 13, part 1): what a response
//! says a call actually cost, for each pool whose cost is `{estimate,
//! actual}`. Read from any answer, whatever its status (the upstream
//! counts what it spent, success or not); the runner then settles the
//! reservation on the ledger (`Ledger::settle`).

use reqwest::header::HeaderMap;

use crate::config::{ActualFrom, SettledCost};
use crate::page_scan::{self, Leaf};

/// What a response says one settled cost was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Actual {
    /// Units spent (a fraction is rounded up: never less than spent).
    Units(u64),
    /// The response does not say, or not as a number: the estimate stays.
    Unreadable(String),
}

/// The actual of each settled cost of a step, in `specs` order, from a
/// response's headers and (when it was read) its body.
pub fn actuals(specs: &[SettledCost], headers: &HeaderMap, body: Option<&[u8]>) -> Vec<Actual> {
    if specs.is_empty() {
        return Vec::new();
    }
    specs
        .iter()
        .map(|s| match &s.actual {
            ActualFrom::Header(name) => match headers.get(name).map(|v| v.to_str()) {
                Some(Ok(text)) => units(&Leaf::Text(text.trim().into()))
                    .map_or_else(|| unreadable(&format!("header {name}")), Actual::Units),
                Some(Err(_)) => Actual::Unreadable(format!("header {name} is not text")),
                None => Actual::Unreadable(format!("no header {name}")),
            },
            // Read by streaming, only what the pointer names: the body is
            // never built as a tree (a page of 32 MB took 549 MB so), and
            // not read at all for an actual from a header.
            ActualFrom::Pointer(p) => match body.map(|b| page_scan::leaf_at(b, p)) {
                None | Some(Err(_)) => Actual::Unreadable(format!("no JSON body to read {p} from")),
                Some(Ok(None)) => Actual::Unreadable(format!("nothing at {p} in the body")),
                Some(Ok(Some(v))) => {
                    units(&v).map_or_else(|| unreadable(&format!("{p} in the body")), Actual::Units)
                }
            },
        })
        .collect()
}

/// (The value itself is not shown: an upstream may echo anything there,
/// the key included.)
fn unreadable(what: &str) -> Actual {
    Actual::Unreadable(format!("{what} is not a number of units (0 or more)"))
}

/// A non-negative number, or a string that holds one; fractions rounded up.
fn units(v: &Leaf) -> Option<u64> {
    let n = match v {
        Leaf::Number(n) => n.as_f64()?,
        Leaf::Text(s) => s.trim().parse::<f64>().ok()?,
        Leaf::Unreadable | Leaf::Other => return None,
    };
    (n.is_finite() && n >= 0.0 && n < 2f64.powi(53)).then(|| n.ceil() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(actual: ActualFrom) -> SettledCost {
        SettledCost {
            pool: "tokens".into(),
            estimate: 100,
            actual,
        }
    }

    #[test]
    fn reads_numbers_from_the_body_or_a_header_and_says_why_not() {
        let mut h = HeaderMap::new();
        h.insert("x-cost", "12.2".parse().unwrap());
        h.insert("x-bad", "-3".parse().unwrap());
        let body = br#"{"usage": {"total_tokens": 345, "text": "n/a"}}"#;
        let specs = [
            spec(ActualFrom::Pointer("/usage/total_tokens".into())),
            spec(ActualFrom::Header("x-cost".into())),
            spec(ActualFrom::Header("x-bad".into())),
            spec(ActualFrom::Header("x-none".into())),
            spec(ActualFrom::Pointer("/usage/text".into())),
            spec(ActualFrom::Pointer("/usage/missing".into())),
        ];
        let got = actuals(&specs, &h, Some(body));
        assert_eq!(got[0], Actual::Units(345));
        assert_eq!(got[1], Actual::Units(13), "rounded up");
        for (k, why) in [
            (2, "not a number"),
            (3, "no header x-none"),
            (4, "not a number"),
            (5, "nothing at /usage/missing"),
        ] {
            assert!(
                matches!(&got[k], Actual::Unreadable(w) if w.contains(why)),
                "{k}: {:?}",
                got[k]
            );
        }
        let none = actuals(&specs[..1], &h, None);
        assert!(matches!(&none[0], Actual::Unreadable(w) if w.contains("no JSON body")));
    }
}
