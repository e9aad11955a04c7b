//! A page's rows made ready on the page's own thread: the page parsed, its
//! items found at `items`, each keyed at `key` and serialized, and its
//! index entries made, so that the writer that commits (for several pages
//! at once, see [`super::group`]) only runs the statements. Apart from the
//! sink because none of it touches the database.

use super::PageRows;
use super::index::Entry;
use crate::config::SqliteOutput;
use crate::page_scan;
use crate::sink::columns::{Typed, value_of};

/// A page's rows made ready to write: parsed, keyed and serialized on the
/// page's own thread, so that the writer that commits (for several pages
/// at once, see [`super::group`]) only runs the statements.
pub struct PreparedRows {
    pub(crate) input: String,
    pub(crate) fetched_at: String,
    pub(crate) run: u64,
    /// Each row's key and item (JSON text), in the page's order.
    pub(crate) rows: Vec<(String, String)>,
    /// Each row's typed columns' values (`columns`, in their order; none:
    /// NULL), row after row: [`PreparedRows::cells`].
    pub(crate) cells: Vec<Option<Typed>>,
    pub(super) entries: Vec<Entry>,
    pub(crate) found: PageRows,
}

impl PreparedRows {
    /// What the page gives the table (its rows, once written).
    pub fn found(&self) -> PageRows {
        self.found.clone()
    }

    /// Row `i`'s typed columns' values, of `width` columns (the spec's).
    pub(crate) fn cells(&self, i: usize, width: usize) -> &[Option<Typed>] {
        &self.cells[i * width..(i + 1) * width]
    }

    /// The key of the page's first row, if it has one: what a validator
    /// of the page looks for in the table (`conditional`).
    pub fn first_key(&self) -> Option<String> {
        self.rows.first().map(|(k, _)| k.clone())
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
) -> PreparedRows {
    let mut p = PreparedRows {
        input: input.to_string(),
        fetched_at,
        run,
        rows: Vec::new(),
        cells: Vec::new(),
        entries: Vec::new(),
        found: PageRows::default(),
    };
    let mut unfit = vec![0u64; spec.columns.len()];
    // One streaming pass, as every reader of a page reads it: one item's
    // text at a time, never a tree of the page (a tree costs many times
    // the page's bytes).
    let mut rows = |item: &str| {
        let Some(key) = row_key(item, &spec.key, input) else {
            p.found.without_key += 1;
            return;
        };
        if !spec.search.is_empty() {
            p.entries.push(Entry::of(spec, key.clone(), item));
        }
        for (column, unfit) in spec.columns.iter().zip(&mut unfit) {
            // (a value that does not fit is NULL, and counted: never a
            // failed page)
            p.cells.push(value_of(column, item).unwrap_or_else(|_| {
                *unfit += 1;
                None
            }));
        }
        p.rows.push((key, page_scan::compact(item)));
        p.found.rows += 1;
    };
    match page_scan::each_item(page, &spec.items, &mut rows) {
        // (a page with nothing at all at `items`: another shape than the
        // file expects, said and counted, never silently no rows)
        Ok(missed) => p.found.no_items = missed && p.found.rows == 0 && p.found.without_key == 0,
        Err(_) => p.found.not_json = true,
    }
    p.found.unfit.0 = (spec.columns.iter().zip(unfit))
        .filter(|(_, n)| *n > 0)
        .map(|(c, n)| (c.name.clone(), n))
        .collect();
    p
}

/// A row's key: the input's (`""`), else the string or number (as the
/// page writes it) at the pointer in the item; none when it holds neither.
fn row_key(item: &str, pointer: &str, input: &str) -> Option<String> {
    if pointer.is_empty() {
        return Some(input.to_string());
    }
    page_scan::key_at(item, pointer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(items: &str, key: &str) -> SqliteOutput {
        SqliteOutput {
            path: "rows.db".into(),
            table: "t".into(),
            items: items.into(),
            key: key.into(),
            search: Vec::new(),
            columns: Vec::new(),
        }
    }

    fn rows(items: &str, key: &str, page: &str) -> (Vec<(String, String)>, PageRows) {
        let p = prepare(&spec(items, key), "US", page.as_bytes(), "t".into(), 1);
        (p.rows, p.found.clone())
    }

    #[test]
    fn items_take_every_element_at_a_star() {
        let page = r#"{"items":[{"id":"a"},{"id":"b"}],"x":[[1,2],[3]]}"#;
        assert_eq!(rows("/items/*", "/id", page).0.len(), 2);
        assert_eq!(rows("/x/*/*", "", page).0.len(), 3);
        assert_eq!(rows("", "", page).0.len(), 1);
        let (none, found) = rows("/nothing/*", "", page);
        assert!(none.is_empty() && found.no_items);
        assert!(rows("/items/0/id/*", "", page).1.no_items);
        assert!(rows("/items/*", "", page).0.iter().all(|(k, _)| k == "US"));
        let (empty, found) = rows("/items/*", "/id", r#"{"items":[]}"#);
        assert!(empty.is_empty() && !found.no_items);
        assert_eq!(
            rows("/items/1", "/id", page).0,
            [("b".to_string(), r#"{"id":"b"}"#.to_string())]
        );
        assert_eq!(rows("/items/*", "/items", page).1.without_key, 2);
        assert!(rows("/items/*", "/id", "{").1.not_json);
    }

    /// A row's key and item are the page's text: a number past 64 bits
    /// stays itself (two ids that a double makes one stay two rows), the
    /// item only loses the whitespace between its tokens.
    #[test]
    fn keys_and_items_keep_numbers_as_written() {
        let page = r#"{"items":[ {"id": 123456789012345678901234, "v": [1.50, 1E3, -0]},
            {"id":123456789012345678901235,"s":"a \"b\" \u00e9"} ]}"#;
        let (got, found) = rows("/items/*", "/id", page);
        assert_eq!(found.rows, 2);
        assert_eq!(
            got,
            [
                (
                    "123456789012345678901234".to_string(),
                    r#"{"id":123456789012345678901234,"v":[1.50,1E3,-0]}"#.to_string()
                ),
                (
                    "123456789012345678901235".to_string(),
                    r#"{"id":123456789012345678901235,"s":"a \"b\" \u00e9"}"#.to_string()
                ),
            ]
        );
    }
}
