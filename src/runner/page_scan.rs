//! Finding what a page says of the next one without building the page: one
//! pass over the body that checks it is one JSON document and keeps only
//! what is at the step's JSON pointer (a string: a token or a next URL; an
//! array: only its length, for `until_empty`), so a page of tens of
//! megabytes costs no more memory than its bytes.

use serde::de::DeserializeSeed;

/// What a page holds at the pointer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// A non-empty string.
    Text(String),
    /// An array of this many elements.
    Items(usize),
    /// A whole number, as its text (a cursor such as Twitter's `next_cursor`).
    Number(String),
}

impl Found {
    /// A string found: a URL, say.
    pub fn text(self) -> Option<String> {
        match self {
            Self::Text(t) => Some(t),
            Self::Items(_) | Self::Number(_) => None,
        }
    }

    /// A page token: a string, or a whole number as its text.
    pub fn token(self) -> Option<String> {
        match self {
            Self::Text(t) | Self::Number(t) => Some(t),
            Self::Items(_) => None,
        }
    }
}

/// Check that `body` is one JSON document and find what is at `pointer`
/// in it. One pass, and no tree: nothing but the string or the array's
/// length is kept, so a page of tens of megabytes costs no more memory
/// than its bytes (a `serde_json::Value` of it would cost many times that).
pub fn scan(body: &[u8], pointer: Option<&str>) -> Result<Option<Found>, serde_json::Error> {
    let path: Vec<String> = pointer
        .map(|p| {
            p.split('/')
                .skip(1)
                .map(|s| s.replace("~1", "/").replace("~0", "~"))
                .collect()
        })
        .unwrap_or_default();
    let mut de = serde_json::Deserializer::from_slice(body);
    let found = Find {
        path: &path,
        wanted: pointer.is_some(),
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(found.filter(|f| *f != Found::Text(String::new())))
}

/// Follows a JSON pointer through a document as it is parsed, skipping
/// (and so checking) everything else; yields the string at its end.
struct Find<'p> {
    path: &'p [String],
    /// Without a pointer, only the check.
    wanted: bool,
}

impl<'de> serde::de::DeserializeSeed<'de> for Find<'_> {
    type Value = Option<Found>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Find<'_> {
    type Value = Option<Found>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok((self.wanted && self.path.is_empty()).then(|| Found::Text(v.to_string())))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            match self.path.split_first() {
                Some((first, rest)) if self.wanted && *first == key => {
                    // A repeated key: the last one counts, as in a parsed tree.
                    found = map.next_value_seed(Find {
                        path: rest,
                        wanted: true,
                    })?;
                }
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        if self.wanted && self.path.is_empty() {
            let mut n = 0;
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                n += 1;
            }
            return Ok(Some(Found::Items(n)));
        }
        let index = self
            .path
            .split_first()
            .filter(|_| self.wanted)
            .and_then(|(first, rest)| first.parse::<usize>().ok().map(|i| (i, rest)));
        let mut found = None;
        let mut i = 0;
        loop {
            match index {
                Some((at, rest)) if at == i => {
                    match seq.next_element_seed(Find {
                        path: rest,
                        wanted: true,
                    })? {
                        Some(v) => found = v,
                        None => break,
                    }
                }
                _ => {
                    if seq.next_element::<serde::de::IgnoredAny>()?.is_none() {
                        break;
                    }
                }
            }
            i += 1;
        }
        Ok(found)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok((self.wanted && self.path.is_empty()).then(|| Found::Number(v.to_string())))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok((self.wanted && self.path.is_empty()).then(|| Found::Number(v.to_string())))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
