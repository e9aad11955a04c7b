//! Every page reaches its readers through the streaming reader
//! (`crate::page_scan`), checked: a page parsed into a `serde_json::Value`
//! costs many times its bytes (a 25 MB page took 600 MB in the SQLite
//! sink, a 32 MB one 1.1 GB in a fan-out), so no file may parse JSON into a
//! `Value` but the few listed here, each with why what it parses is no
//! page. The rule reads the source's text, as `layers.rs` does: a call of
//! serde_json's `from_slice`, `from_str` or `from_reader` whose statement
//! names `Value` (`::<Value>`, `let v: Value =`, `Option<serde_json::Value>`).

use crate::layers::{code, source_texts};

/// The files that may parse JSON into a `Value` (from `src/`), and why
/// what they parse is not a page body.
const ALLOWED: &[(&str, &str)] = &[
    (
        "upstream/classify.rs",
        "an error answer's body, read only up to 64 KiB (`ERROR_BODY`) for its \
         reasons: never a page",
    ),
    (
        "runner/cursor/stored.rs",
        "a cursor as the store keeps it: the tool's own text of a few fields",
    ),
];

/// Whether `word` is in `text` as a name of its own (`Value`, not
/// `RawValue` or `HeaderValue`).
fn names(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        !text[..i].chars().next_back().is_some_and(ident)
            && !text[i + word.len()..].chars().next().is_some_and(ident)
    })
}

/// The statements of `code` that parse JSON into a `Value`.
fn parses_into_value(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for call in [
        "serde_json::from_slice",
        "serde_json::from_str",
        "serde_json::from_reader",
    ] {
        for (i, _) in code.match_indices(call) {
            let start = code[..i].rfind([';', '{', '}']).map_or(0, |s| s + 1);
            let end = code[i..].find(';').map_or(code.len(), |e| i + e);
            let statement = &code[start..end];
            if names(statement, "Value") {
                found.push(statement.split_whitespace().collect::<Vec<_>>().join(" "));
            }
        }
    }
    found
}

#[test]
fn no_page_is_parsed_into_a_tree_but_by_the_streaming_reader() {
    let (mut wrong, mut parsing) = (Vec::new(), Vec::new());
    for (shown, text) in source_texts() {
        if shown == "page_readers.rs" {
            continue;
        }
        let found = parses_into_value(&code(&text));
        if found.is_empty() {
            continue;
        }
        parsing.push(shown.clone());
        if !ALLOWED.iter().any(|(f, _)| *f == shown) {
            wrong.extend(found.into_iter().map(|s| format!("src/{shown}: {s}")));
        }
    }
    assert!(
        wrong.is_empty(),
        "JSON parsed into a serde_json::Value outside the streaming page reader \
         (read a page through crate::page_scan; a file that parses something \
         other than a page goes in ALLOWED, with why):\n{}",
        wrong.join("\n")
    );
    // (an allowance no longer used is taken out, so the list stays the
    // places that do)
    for (file, _) in ALLOWED {
        assert!(
            parsing.iter().any(|p| p == file),
            "src/{file} no longer parses into a Value: take it out of ALLOWED"
        );
    }
}

#[test]
fn the_reading_finds_a_tree_in_every_form_but_not_raw_values_or_tests() {
    let text = "fn a(b: &[u8]) { let v: Value = serde_json::from_slice(b).unwrap(); }\n\
                fn c(s: &str) { let t = serde_json::from_str::<serde_json::Value>(s); }\n\
                fn d(s: &str) { let j: Option<Value> = serde_json::from_str(s).ok(); }\n\
                fn e(s: &str) { let r: &RawValue = serde_json::from_str(s).unwrap(); }\n\
                fn f(s: &str) { let h = HeaderValue::from_str(s); let n: u64 = serde_json::from_str(s).unwrap(); }\n\
                // serde_json::from_str::<Value>(s)\n\
                #[cfg(test)]\nmod tests {\n    fn g() { serde_json::from_str::<Value>(\"1\"); }\n}\n";
    let found = parses_into_value(&code(text));
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found[0].contains("from_slice(b)"), "{found:?}");
    assert!(found.iter().all(|f| !f.contains("RawValue")), "{found:?}");
}
