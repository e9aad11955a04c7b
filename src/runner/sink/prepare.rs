//! A page's rows made ready on the page's own thread: the page parsed, its
//! items found at `items`, each keyed at `key` and serialized, and its
//! index entries made, so that the writer that commits (for several pages
//! at once, see [`super::group`]) only runs the statements. Apart from the
//! sink because none of it touches the database.

use serde_json::Value;

use super::PageRows;
use super::index::Entry;
use crate::config::{SqliteOutput, pointer_parts};

/// A page's rows made ready to write: parsed, keyed and serialized on the
/// page's own thread, so that the writer that commits (for several pages
/// at once, see [`super::group`]) only runs the statements.
pub struct Prepared {
    pub(super) input: String,
    pub(super) fetched_at: String,
    pub(super) run: u64,
    /// Each row's key and item (JSON text), in the page's order.
    pub(super) rows: Vec<(String, String)>,
    pub(super) entries: Vec<Entry>,
    pub(super) found: PageRows,
}

impl Prepared {
    /// What the page gives the table (its rows, once written).
    pub fn found(&self) -> PageRows {
        self.found
    }
}

/// `page`'s rows for `input` (the key of the input or region it was
/// fetched for), fetched at `fetched_at` by run `run`.
pub fn prepare(
    spec: &SqliteOutput,
    input: &str,
    page: &[u8],
    fetched_at: String,
    run: u64,
) -> Prepared {
    let mut p = Prepared {
        input: input.to_string(),
        fetched_at,
        run,
        rows: Vec::new(),
        entries: Vec::new(),
        found: PageRows::default(),
    };
    let Ok(page) = serde_json::from_slice::<Value>(page) else {
        p.found.not_json = true;
        return p;
    };
    let (items, missed) = items_found(&page, &spec.items);
    // (a page with nothing at all at `items`: another shape than the file
    // expects, said and counted, never silently no rows)
    p.found.no_items = missed && items.is_empty();
    for item in items {
        let Some(key) = row_key(item, &spec.key, input) else {
            p.found.without_key += 1;
            continue;
        };
        if !spec.search.is_empty() {
            p.entries.push(Entry::of(spec, key.clone(), item));
        }
        p.rows.push((key, item.to_string()));
        p.found.rows += 1;
    }
    p
}

/// The items of a page at `pointer`, each `*` part every element of the
/// array there (none where there is no array), and whether the pointer led
/// nowhere somewhere (a name not there, a `*` at something not an array),
/// as opposed to an empty array.
fn items_found<'v>(page: &'v Value, pointer: &str) -> (Vec<&'v Value>, bool) {
    let mut at = vec![page];
    let mut missed = false;
    for part in pointer_parts(pointer).unwrap_or_default() {
        let mut next = Vec::new();
        for v in at {
            if part == "*" {
                match v.as_array() {
                    Some(a) => next.extend(a.iter()),
                    None => missed = true,
                }
                continue;
            }
            let found = match v {
                Value::Object(m) => m.get(&part),
                Value::Array(a) => part.parse::<usize>().ok().and_then(|i| a.get(i)),
                _ => None,
            };
            match found {
                Some(x) => next.push(x),
                None => missed = true,
            }
        }
        at = next;
    }
    (at, missed)
}

/// A row's key: the input's (`""`), else the string or number at the
/// pointer; none when it holds neither.
fn row_key(item: &Value, pointer: &str, input: &str) -> Option<String> {
    if pointer.is_empty() {
        return Some(input.to_string());
    }
    match item.pointer(pointer)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_take_every_element_at_a_star() {
        let page: Value =
            serde_json::from_str(r#"{"items":[{"id":"a"},{"id":"b"}],"x":[[1,2],[3]]}"#).unwrap();
        assert_eq!(items_found(&page, "/items/*").0.len(), 2);
        assert_eq!(items_found(&page, "/x/*/*").0.len(), 3);
        assert_eq!(items_found(&page, "").0.len(), 1);
        assert_eq!(items_found(&page, "/nothing/*").0.len(), 0);
        assert!(items_found(&page, "/nothing/*").1);
        assert!(items_found(&page, "/items/0/id/*").1);
        let empty: Value = serde_json::from_str(r#"{"items":[]}"#).unwrap();
        assert_eq!(items_found(&empty, "/items/*"), (vec![], false));
        assert_eq!(items_found(&page, "/items/1/id").0, [&Value::from("b")]);
        assert_eq!(
            row_key(&page["items"][0], "/id", "US").as_deref(),
            Some("a")
        );
        assert_eq!(row_key(&page, "", "US").as_deref(), Some("US"));
        assert_eq!(row_key(&page, "/items", "US"), None);
    }
}
