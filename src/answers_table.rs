//! What an upstream answer does is decided in one place, checked: the table
//! of answers (`upstream/answers.rs`) is the only file that reads an
//! HTTP status: its classes (`is_success()`, `is_server_error()`, …), its
//! constants (`StatusCode::NOT_FOUND`) or its number compared
//! (`status == 404`, `matches!(status, 400 | 404)`). A status read anywhere
//! else is how an answer came to end a whole job on one path while ending
//! one key on another. The rule reads the source's text, as `layers.rs`
//! does; tests are not code here.

use crate::layers::{code, source_texts};

/// The one file that reads statuses.
const TABLE: &str = "upstream/answers.rs";

/// What reads a status: the class tests, the constants, and comparisons of
/// a value named `status` (the crate's name for one, whatever its type).
const READS: &[&str] = &[
    "StatusCode::",
    ".is_success()",
    ".is_client_error()",
    ".is_server_error()",
    ".is_redirection()",
    ".is_informational()",
    "status ==",
    "status !=",
    "status >",
    "status <",
    "== status",
    "matches!(status",
    "match status",
    "refused_for_itself",
];

/// The lines of `code` that read a status.
fn reads_status(code: &str) -> Vec<String> {
    code.lines()
        .filter(|l| READS.iter().any(|r| l.contains(r)))
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn only_the_table_of_answers_reads_a_status() {
    let mut wrong = Vec::new();
    let mut table = None;
    for (shown, text) in source_texts() {
        if shown == TABLE {
            table = Some(text);
            continue;
        }
        if shown == "answers_table.rs" {
            continue;
        }
        wrong.extend(
            reads_status(&code(&text))
                .into_iter()
                .map(|l| format!("src/{shown}: {l}")),
        );
    }
    assert!(
        wrong.is_empty(),
        "an HTTP status read outside the table of answers (src/{TABLE}): \
         decide there what the answer does, and act on its verdict here:\n{}",
        wrong.join("\n")
    );
    let table = table.expect("the table of answers");
    assert!(
        !reads_status(&code(&table)).is_empty(),
        "the table of answers reads no status: is the rule still reading the right file?"
    );
}

#[test]
fn the_reading_finds_each_form_but_not_tests_or_comments() {
    let text = "fn a(s: StatusCode) -> bool { s.is_server_error() }\n\
                fn b(status: u16) -> bool { matches!(status, 400 | 404) }\n\
                fn c(status: u16) -> bool { status == 409 }\n\
                fn d() -> u16 { StatusCode::GONE.as_u16() }\n\
                fn e(n: u16) -> u16 { n + 1 } // status == 1\n\
                #[cfg(test)]\nmod tests {\n    fn f(s: StatusCode) -> bool { s.is_success() }\n}\n";
    let found = reads_status(&code(text));
    assert_eq!(found.len(), 4, "{found:?}");
}
