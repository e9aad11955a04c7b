//! JSON values kept as their text: one rule for every reader of JSON that
//! a file or a page holds (an input line's key and fields here, a page's
//! rows in the runner's page reader), so that a number is what it says,
//! `123456789012345678901234` never a double's `1.2345678901234568e23`
//! (two ids made one row, one key refused, another id sent upstream).
//! serde_json's `arbitrary_precision` would do it in a `Value`, but it is
//! a switch for every user of serde_json in the build, dependencies too
//! (a `Number` then compares as text: `1.0` is not `1.00`), and a `Value`
//! is a tree, which no page may become: values are taken as their raw
//! text instead, read where they are.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::value::RawValue;

/// A value's JSON text, compact, numbers and escapes as written: an input
/// record's field ([`super::InputFields`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonText(String);

impl JsonText {
    /// `raw`, the text of one JSON value, without its whitespace.
    pub fn of_raw(raw: &str) -> Self {
        Self(compact(raw))
    }

    /// A string's value.
    pub fn string(s: &str) -> Self {
        Self(serde_json::to_string(s).expect("a string serializes"))
    }

    /// The JSON text.
    pub fn json(&self) -> &str {
        &self.0
    }

    /// The text the value is put in a string as: a string as it is, any
    /// other value as its JSON (`7`, `true`, `null`, `{"a":1}`).
    pub fn text(&self) -> Cow<'_, str> {
        match self.0.starts_with('"') {
            true => {
                serde_json::from_str::<String>(&self.0).map_or(Cow::Borrowed(&self.0), Cow::Owned)
            }
            false => Cow::Borrowed(&self.0),
        }
    }
}

/// `raw` (one JSON value's text) without the whitespace between its
/// tokens: everything else, numbers and escapes included, as written.
pub fn compact(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in raw.chars() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            in_string = c == '"';
            out.push(c);
        }
    }
    out
}

/// The raw text of the value at `parts` (an object's key, or an array's
/// index as RFC 6901 writes it) in `text`, one JSON document; the last of
/// a repeated key, as a parsed tree keeps. Each level is read on its own,
/// what is below it skipped: for a record's line, not a page (a page is
/// read in one pass by the runner's page reader).
pub fn raw_at<'a, 'p>(text: &'a str, parts: impl IntoIterator<Item = &'p str>) -> Option<&'a str> {
    let mut at: &'a RawValue = serde_json::from_str(text).ok()?;
    for part in parts {
        let here = at.get();
        at = match here.as_bytes().first()? {
            b'{' => serde_json::from_str::<BTreeMap<String, &'a RawValue>>(here)
                .ok()?
                .remove(part)?,
            b'[' => {
                let i = index(part)?;
                serde_json::from_str::<Vec<&'a RawValue>>(here)
                    .ok()?
                    .get(i)
                    .copied()?
            }
            _ => return None,
        };
    }
    Some(at.get())
}

/// An array index as RFC 6901 writes it: digits, no leading zero.
pub fn index(segment: &str) -> Option<usize> {
    if segment.starts_with('+') || (segment.starts_with('0') && segment.len() > 1) {
        return None;
    }
    segment.parse().ok()
}

/// A key's text from a value's raw text: a string as it is, a number as
/// written; none for any other kind or a string that is not text.
pub fn key_text(raw: &str) -> Option<String> {
    match raw.as_bytes().first() {
        Some(b'"') => serde_json::from_str::<String>(raw).ok(),
        Some(b'-' | b'0'..=b'9') => Some(raw.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_their_text_as_written() {
        let line = r#"{ "id": 123456789012345678901234, "a": {"b": [1.50, {"c": -0}]}, "a": {"b": [2]},
            "s": "x \"y\" \u00e9", "k~/": 1 }"#;
        let at = |p: &[&str]| raw_at(line, p.iter().copied());
        assert_eq!(at(&["id"]), Some("123456789012345678901234"));
        assert_eq!(
            at(&["a", "b", "0"]),
            Some("2"),
            "the last of a repeated key"
        );
        assert_eq!(at(&["a", "b", "1"]), None);
        assert_eq!(at(&["a", "b", "00"]), None);
        assert_eq!(at(&["k~/"]), Some("1"));
        assert_eq!(at(&[]).map(|t| t.len()), Some(line.len()));
        assert_eq!(
            key_text(at(&["id"]).unwrap()).as_deref(),
            Some("123456789012345678901234")
        );
        assert_eq!(key_text(at(&["s"]).unwrap()).as_deref(), Some("x \"y\" é"));
        assert_eq!(key_text("[1]"), None);
        assert_eq!(key_text(r#""\ud800""#), None);
        let f = JsonText::of_raw(r#"{"b": [1.50, {"c": -0}], "s": "a  b"}"#);
        assert_eq!(f.json(), r#"{"b":[1.50,{"c":-0}],"s":"a  b"}"#);
        assert_eq!(JsonText::of_raw(r#""x \"y\"""#).text(), "x \"y\"");
        assert_eq!(JsonText::of_raw("1E400").text(), "1E400");
        assert_eq!(JsonText::string("a\"b").json(), r#""a\"b""#);
    }
}
