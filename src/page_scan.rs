//! Reading a page without building it: one pass over the body checks that
//! it is one JSON document and keeps only what is at a JSON pointer, so a
//! page of tens of megabytes costs no more memory than its bytes (a
//! `serde_json::Value` of it costs many times that: 1.4 GB for a page of
//! 32 MB of small items). Every reader of a page goes through here (the
//! page check, the next page's token, a settled cost's actual, a fan-out's
//! values, a table's rows: `src/page_readers.rs` checks that no other file
//! parses a page into a tree), so all read a page alike: a string holding a lone surrogate
//! escape (`"\ud800"`, text cut mid-emoji) or nesting of any depth is JSON
//! to all of them; only a value at a pointer that cannot be read as text
//! is left out, and counted, on its own (a next page's token so: the walk
//! ends there, the page written).

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{Deserializer as _, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// What a page holds at the pointer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// A non-empty string.
    Text(String),
    /// An array of this many elements.
    Items(usize),
    /// A whole number, as its text (a cursor such as Twitter's `next_cursor`).
    Number(String),
    /// A value that cannot be read as text (a lone surrogate escape, a
    /// number out of a double's range): the page is JSON all the same.
    Unreadable,
}

impl Found {
    /// A string found: a URL, say.
    pub fn text(self) -> Option<String> {
        match self {
            Self::Text(t) => Some(t),
            Self::Items(_) | Self::Number(_) | Self::Unreadable => None,
        }
    }

    /// A page token: a string, or a whole number as its text.
    pub fn token(self) -> Option<String> {
        match self {
            Self::Text(t) | Self::Number(t) => Some(t),
            Self::Items(_) | Self::Unreadable => None,
        }
    }
}

/// A value at a pointer, read on its own.
#[derive(Clone, Debug, PartialEq)]
pub enum Leaf {
    Text(String),
    Number(serde_json::Number),
    /// A string that is not text (a lone surrogate escape) or a number
    /// out of a double's range (`1e400`; one of more digits than a double
    /// holds is read rounded): there, but not readable.
    Unreadable,
    /// An object, an array, a boolean or null.
    Other,
}

/// Check that `body` is one JSON document and find what is at `pointer`
/// in it (the last of a repeated key, as in a parsed tree). A value there
/// that cannot be read is [`Found::Unreadable`], never an error: the page
/// is JSON, and asking again would get the same.
pub fn scan(body: &[u8], pointer: Option<&str>) -> Result<Option<Found>, serde_json::Error> {
    let text = page_text(body);
    let path = pointer.map(segments).unwrap_or_default();
    let mut last = None;
    walk_all(&text, &path, false, &mut |r| last = Some(r))?;
    let Some(raw) = last.filter(|_| pointer.is_some()) else {
        return Ok(None);
    };
    if raw.get().starts_with('[') {
        let mut de = serde_json::Deserializer::from_str(raw.get());
        return Ok(Some(Found::Items(de.deserialize_seq(Count)?)));
    }
    Ok(match leaf(raw) {
        Leaf::Text(t) if !t.is_empty() => Some(Found::Text(t)),
        Leaf::Number(n) if n.is_u64() || n.is_i64() => Some(Found::Number(n.to_string())),
        Leaf::Unreadable => Some(Found::Unreadable),
        _ => None,
    })
}

/// The values at `pointer` in a page, in document order, `*` matching
/// every element of an array, and how many of them could not be read
/// (left out). Strings as they are, numbers as their text in the page
/// (a double would round `123456789012345678901234` and make `-0` `-0.0`);
/// other kinds (objects, arrays, booleans, null) are not values and are
/// skipped.
pub fn values(body: &[u8], pointer: &str) -> Result<(Vec<String>, u64), serde_json::Error> {
    let mut out = Vec::new();
    let unreadable = each_value(body, pointer, |v| out.push(v.to_string()))?;
    Ok((out, unreadable))
}

/// [`values`] handed to `value` one at a time as they are read, none
/// kept: a page of millions of values costs its own size, not theirs.
/// How many could not be read.
pub fn each_value(
    body: &[u8],
    pointer: &str,
    mut value: impl FnMut(&str),
) -> Result<u64, serde_json::Error> {
    let text = page_text(body);
    let mut unreadable = 0;
    walk_all(
        &text,
        &segments(pointer),
        true,
        &mut |raw| match leaf(raw) {
            Leaf::Text(t) => value(&t),
            Leaf::Number(_) => value(raw.get()),
            // (a number past a double's range is text all the same)
            Leaf::Unreadable if !raw.get().starts_with('"') => value(raw.get()),
            Leaf::Unreadable => unreadable += 1,
            Leaf::Other => {}
        },
    )?;
    Ok(unreadable)
}

/// The value at `pointer` (no `*`: an RFC 6901 pointer, as
/// `Value::pointer` reads it), if any.
pub fn leaf_at(body: &[u8], pointer: &str) -> Result<Option<Leaf>, serde_json::Error> {
    let text = page_text(body);
    let mut last = None;
    walk_all(&text, &segments(pointer), false, &mut |r| last = Some(r))?;
    Ok(last.map(leaf))
}

/// Each item of a page at `pointer` (`*` every element of an array, `""`
/// the whole page), in document order, handed to `row` one at a time as
/// its raw JSON text (numbers and escapes as the page writes them): the
/// rows of a table. Whether the pointer led nowhere somewhere (a name not
/// there, a `*` at something not an array), as opposed to an empty array.
pub fn each_item(
    body: &[u8],
    pointer: &str,
    mut row: impl FnMut(&str),
) -> Result<bool, serde_json::Error> {
    let text = page_text(body);
    walk_all(&text, &segments(pointer), true, &mut |raw| row(raw.get()))
}

/// The raw JSON text at `pointer` (no `*`) in `item`, one JSON value's
/// text (an item [`each_item`] gave), if there is any.
pub fn raw_at<'a>(item: &'a str, pointer: &str) -> Option<&'a str> {
    let mut last = None;
    walk_all(item, &segments(pointer), false, &mut |r| last = Some(r)).ok()?;
    last.map(RawValue::get)
}

/// A key at `pointer` in `item`: a string as text, a number as written
/// (`123456789012345678901234` stays itself, never a double's rounding);
/// none for any other kind, or a string that is not text.
pub fn key_at(item: &str, pointer: &str) -> Option<String> {
    crate::config::key_text(raw_at(item, pointer)?)
}

/// `raw` (one JSON value's text) without the whitespace between its
/// tokens: everything else, numbers and escapes included, as written (the
/// one rule of [`crate::config::compact`], an input's fields' too).
pub fn compact(raw: &str) -> String {
    crate::config::compact(raw)
}

/// A page's bytes as text, as its file is written: bytes that are not
/// UTF-8 replaced (inside strings only, or the page is not JSON anyway);
/// no copy when it is UTF-8.
/// A page's text, a UTF-8 byte order mark before it dropped (RFC 8259
/// §8.1 lets a parser ignore one): every reader reads a page alike.
fn page_text(body: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body))
}

fn segments(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// A walk along a path: what to do with each value found there (raw,
/// borrowed from the page's text), handed over as it is found, none kept,
/// so a page of millions of values costs its own size; and whether the
/// path led nowhere somewhere (a name not there, an index past the end, a
/// step into a value that is neither an object nor an array), as opposed
/// to an empty array.
struct Walked<'a, 'f> {
    each: &'f mut dyn FnMut(&'a RawValue),
    missed: bool,
}

/// Hand each value at `path` in `text` to `each`, in document order;
/// whether the path led nowhere somewhere.
fn walk_all<'a>(
    text: &'a str,
    path: &[String],
    star: bool,
    each: &mut dyn FnMut(&'a RawValue),
) -> serde_json::Result<bool> {
    let mut out = Walked {
        each,
        missed: false,
    };
    walk_text(text, path, star, &mut out)?;
    Ok(out.missed)
}

/// Read one JSON document, `text`, all of it, and hand what is at `path`
/// in it to `out` (raw, borrowed from `text`): one pass that skips (and
/// so checks) everything else, at any depth. Only the values on the path
/// are read again, each on its own (a `RawValue` then walked), so that a
/// string on it that is not text spoils that value only.
fn walk_text<'a>(
    text: &'a str,
    path: &[String],
    star: bool,
    out: &mut Walked<'a, '_>,
) -> serde_json::Result<()> {
    let mut de = serde_json::Deserializer::from_str(text);
    match (path.split_first(), text.trim_start().as_bytes().first()) {
        (Some((first, rest)), Some(b'{')) => de.deserialize_map(On {
            first,
            rest,
            star,
            out,
        })?,
        (Some((first, rest)), Some(b'[')) => de.deserialize_seq(On {
            first,
            rest,
            star,
            out,
        })?,
        (Some(_), _) => {
            IgnoredAny::deserialize(&mut de)?;
            out.missed = true;
        }
        (None, _) => (out.each)(<&RawValue>::deserialize(&mut de)?),
    }
    de.end()
}

/// One step of a pointer: `first` in an object or an array, then `rest`.
struct On<'o, 'a, 'f, 'p> {
    first: &'p str,
    rest: &'p [String],
    star: bool,
    out: &'o mut Walked<'a, 'f>,
}

impl<'a> Visitor<'a> for On<'_, 'a, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_map<A: MapAccess<'a>>(self, mut map: A) -> Result<(), A::Error> {
        // A repeated key: the last one counts, as in a parsed tree. A `*`
        // (when it means every element) is no key: an object there is
        // not the array the pointer expects.
        let every = self.star && self.first == "*";
        // (walked once the object is read: only then is the last known)
        let mut last = None;
        while let Some(key) = map.next_key::<&'a RawValue>()? {
            if !every && key_is(key.get(), self.first) {
                last = Some(map.next_value::<&'a RawValue>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        match last {
            Some(value) => {
                walk_text(value.get(), self.rest, self.star, self.out).map_err(A::Error::custom)?;
            }
            None => self.out.missed = true,
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'a>>(self, mut seq: A) -> Result<(), A::Error> {
        let every = self.star && self.first == "*";
        let index = index(self.first);
        let mut i = 0;
        let mut reached = every;
        loop {
            if every || index == Some(i) {
                let Some(value) = seq.next_element::<&'a RawValue>()? else {
                    break;
                };
                reached = true;
                walk_text(value.get(), self.rest, self.star, self.out).map_err(A::Error::custom)?;
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            i += 1;
        }
        self.out.missed |= !reached;
        Ok(())
    }
}

/// An array index as RFC 6901 writes it: digits, no leading zero.
fn index(segment: &str) -> Option<usize> {
    crate::config::json_index(segment)
}

/// Whether a raw key (quotes and escapes) is `segment`. A key that is not
/// text (a lone surrogate) is no segment's.
fn key_is(raw: &str, segment: &str) -> bool {
    let inner = &raw[1..raw.len() - 1];
    if inner.contains('\\') {
        serde_json::from_str::<String>(raw).is_ok_and(|k| k == segment)
    } else {
        inner == segment
    }
}

/// A value read on its own: only a string or a number is read at all.
fn leaf(raw: &RawValue) -> Leaf {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'"') if !text.contains('\\') => Leaf::Text(text[1..text.len() - 1].to_string()),
        Some(b'"') => serde_json::from_str(text).map_or(Leaf::Unreadable, Leaf::Text),
        Some(b'-' | b'0'..=b'9') => {
            serde_json::from_str(text).map_or(Leaf::Unreadable, Leaf::Number)
        }
        _ => Leaf::Other,
    }
}

/// The length of an array, its elements skipped.
struct Count;

impl<'a> Visitor<'a> for Count {
    type Value = usize;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'a>>(self, mut seq: A) -> Result<usize, A::Error> {
        let mut n = 0;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            n += 1;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reader_drops_a_byte_order_mark() {
        let page = b"\xEF\xBB\xBF{\"next\":\"t\",\"items\":[{\"id\":\"a\"}]}";
        assert_eq!(
            scan(page, Some("/next")).unwrap(),
            Some(Found::Text("t".into()))
        );
        assert_eq!(values(page, "/items/*/id").unwrap(), (vec!["a".into()], 0));
        assert_eq!(
            leaf_at(page, "/next").unwrap(),
            Some(Leaf::Text("t".into()))
        );
    }

    #[test]
    fn page_tokens_follow_the_pointer() {
        let j = br#"{"items":[{"a":1},{"next":"deep"}],"nextPageToken":"CAUQ1","x":"","a/b":{"~":"esc"},"n":3}"#;
        let at = |p: &str| scan(j, Some(p)).unwrap().and_then(Found::text);
        assert_eq!(at("/nextPageToken").as_deref(), Some("CAUQ1"));
        assert_eq!(at("/items/1/next").as_deref(), Some("deep"));
        assert_eq!(at("/a~1b/~0").as_deref(), Some("esc"));
        for none in ["/x", "/missing", "/items/2/next", "/n", "/nextPageToken/0"] {
            assert_eq!(at(none), None, "{none}");
        }
        assert_eq!(scan(j, None).unwrap(), None);
        assert_eq!(scan(j, Some("/items")).unwrap(), Some(Found::Items(2)));
        assert_eq!(
            scan(br#"{"data":{"rows":[]}}"#, Some("/data/rows")).unwrap(),
            Some(Found::Items(0))
        );
        assert_eq!(
            scan(br#"{"t":"a","t":"b"}"#, Some("/t")).unwrap(),
            Some(Found::Text("b".into()))
        );
        for bad in [&b"{"[..], b"{} {}", b"<html>", b"{\"a\":}"] {
            assert!(scan(bad, Some("/a")).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_reader_takes_lone_surrogates_and_any_depth_and_loses_only_the_bad_value() {
        let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
        let page = format!(
            r#"{{"deep":{deep},"items":[{{"id":"a"}},{{"id":"cut \ud800"}},{{"id":7}},{{"id":{deep}}},{{"id":"b\u00e9"}}],"t":"x\udc00","next":"N"}}"#
        );
        let page = page.as_bytes();
        assert_eq!(scan(page, None).unwrap(), None);
        assert_eq!(
            scan(page, Some("/next")).unwrap(),
            Some(Found::Text("N".into()))
        );
        assert_eq!(
            scan(page, Some("/t")).unwrap(),
            Some(Found::Unreadable),
            "a token that is not text, in a page that is JSON"
        );
        let (got, unreadable) = values(page, "/items/*/id").unwrap();
        assert_eq!(
            (got, unreadable),
            (vec!["a".into(), "7".into(), "bé".into()], 1)
        );
        assert_eq!(
            leaf_at(page, "/items/2/id").unwrap(),
            Some(Leaf::Number(7.into()))
        );
        assert_eq!(
            leaf_at(page, "/items/1/id").unwrap(),
            Some(Leaf::Unreadable)
        );
        assert_eq!(leaf_at(page, "/items/02/id").unwrap(), None);
        assert_eq!(
            leaf_at(page, "/items/*/id").unwrap(),
            None,
            "no star without asking"
        );
        // A key that is not text matches no pointer, and spoils nothing else.
        let keyed = br#"{"\ud800":1,"a\/b":2,"a":3,"a":4}"#;
        assert_eq!(
            leaf_at(keyed, "/a~1b").unwrap(),
            Some(Leaf::Number(2.into()))
        );
        assert_eq!(values(keyed, "/a").unwrap(), (vec!["4".into()], 0));
        // Bytes that are not UTF-8 inside a string are read as the page file
        // is written.
        assert_eq!(values(b"{\"a\":\"x\xff\"}", "/a").unwrap().0, ["x\u{fffd}"]);
        // Numbers as written, whatever a double makes of them.
        let numbers = b"[123456789012345678901234, -0 , 1.50, 1E3,\n1e400, 7 ]";
        assert_eq!(
            values(numbers, "/*").unwrap(),
            (
                [
                    "123456789012345678901234",
                    "-0",
                    "1.50",
                    "1E3",
                    "1e400",
                    "7"
                ]
                .map(String::from)
                .to_vec(),
                0
            )
        );
    }
}
