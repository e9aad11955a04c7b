//! The house's layers, checked: a room of `src/` may use the rooms of the
//! layers below its own, never one of its own layer or above. The rule is
//! about the text of the source (what a file names with `crate::`), so this
//! test reads that text.
//!
//! From the bottom: a folder's fsyncs shared by the names made at once
//! ([`crate::folder_sync`]); files written whole ([`crate::atomic_file`]) and the
//! OpenMetrics text; the ledger (its vocabulary of windows, pools, times
//! and store errors, and its stores) and page files' names; what every room
//! above shows or fails with (times, log lines, the one error type); the
//! configuration, which validates into the ledger's vocabulary, and the
//! command line's types; a job's inputs file, read as its configuration
//! says, and the one streaming reader of pages; this host's history of
//! each log; the wire (one request and its answer) and the sinks (where
//! results go), neither using the other; one run of a job, which uses
//! both; the commands, which take the command line's types. The binary
//! (`main.rs`) is on top.

/// The layers, lowest first.
const LAYERS: &[&[&str]] = &[
    &["folder_sync"],
    &["atomic_file", "metrics"],
    &["ledger", "page_name"],
    &["timefmt", "logging", "error"],
    &["config", "cli"],
    &["inputs", "page_scan"],
    &["history"],
    &["upstream", "sink"],
    &["runner"],
    &["commands"],
];

fn layer(room: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&room))
}

/// The room a name after `crate::` belongs to (the crate root re-exports
/// the error type's names).
fn room_of(name: &str) -> &str {
    match name {
        "Error" | "ExitStatus" | "Result" => "error",
        other => other,
    }
}

/// The text of a source file without comments and without its
/// `#[cfg(test)]` modules (a test may compare two layers' values).
pub(crate) fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let line = line.split("//").next().unwrap_or("");
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                // (`mod tests {`, `pub(super) mod tests {`)
                .is_some_and(|l| l.split_whitespace().any(|w| w == "mod") && l.ends_with('{'))
        {
            let mut depth = 0;
            for l in lines.by_ref() {
                depth += l.matches('{').count() as i64 - l.matches('}').count() as i64;
                if depth <= 0 && l.contains('}') {
                    break;
                }
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Every room `code` names with `crate::`: `crate::ledger::Pool`, and each
/// first name of a group, `crate::{ledger::Pool, Error}`.
fn rooms_named(code: &str) -> Vec<String> {
    names_after(code, "crate::")
}

/// Every first name after `prefix` in `code`: `PREFIX ledger::Pool`, and
/// each of a group, `PREFIX {ledger::Pool, Error}`.
fn names_after(code: &str, prefix: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut rooms = Vec::new();
    for (i, _) in code.match_indices(prefix) {
        let rest = &code[i + prefix.len()..];
        let Some(group) = rest.strip_prefix('{') else {
            rooms.push(ident(rest));
            continue;
        };
        let (mut depth, mut start) = (0, 0);
        for (j, ch) in group.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    rooms.push(ident(&group[start..j]));
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    rooms.push(ident(&group[start..j]));
                    start = j + 1;
                }
                _ => {}
            }
        }
    }
    rooms.retain(|r| !r.is_empty());
    rooms
}

/// Every `.rs` file of `src/` as the rules over the crate read it: its
/// path under `src/` (`upstream/answers.rs`) and its text, for the
/// tests that hold a class of code to one place.
pub(crate) fn source_texts() -> Vec<(String, String)> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, None, &mut files);
    files
        .into_iter()
        .map(|(_, path)| {
            let shown = path
                .strip_prefix(&src)
                .unwrap_or(&path)
                .display()
                .to_string();
            let text = std::fs::read_to_string(&path).expect("a readable source file");
            (shown, text)
        })
        .collect()
}

/// `(room, file)` for every `.rs` file under `dir`, its room the first
/// name under `src/`.
pub(crate) fn sources(
    dir: &std::path::Path,
    room: Option<&str>,
    out: &mut Vec<(String, std::path::PathBuf)>,
) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("an entry of src/").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("")
            .to_string();
        let room = room.map_or(name, str::to_string);
        if path.is_dir() {
            sources(&path, Some(&room), out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push((room, path));
        }
    }
}

#[test]
fn no_room_uses_one_of_its_layer_or_above() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, None, &mut files);
    let mut up = Vec::new();
    for (room, path) in &files {
        if matches!(
            room.as_str(),
            "lib" | "main" | "layers" | "page_readers" | "answers_table" | "files_made"
        ) {
            continue;
        }
        let own = layer(room).unwrap_or_else(|| panic!("{room} ({path:?}) is in no layer: add it"));
        let text = std::fs::read_to_string(path).expect("a readable source file");
        for named in rooms_named(&code(&text)) {
            let named = room_of(&named);
            if named == room {
                continue;
            }
            let theirs = layer(named).unwrap_or_else(|| panic!("crate::{named} is in no layer"));
            if theirs >= own {
                let shown = path.strip_prefix(&src).unwrap_or(path).display();
                up.push(format!("src/{shown}: crate::{named}"));
            }
        }
    }
    up.sort();
    up.dedup();
    assert!(
        up.is_empty(),
        "imports that run up a layer:\n{}",
        up.join("\n")
    );
}

#[test]
fn the_reading_finds_uses_and_paths_but_not_comments_or_tests() {
    let text = "use crate::ledger::Pool;\nuse crate::{Error, runner::x, config::{a, b}};\n\
                // crate::commands\nfn f() { crate::history::seen(); } // crate::cli\n\
                #[cfg(test)]\nmod tests {\n    use crate::metrics;\n    fn g() {}\n}\nuse crate::page_name;\n";
    let rooms = rooms_named(&code(text));
    assert_eq!(
        rooms,
        [
            "ledger",
            "Error",
            "runner",
            "config",
            "history",
            "page_name"
        ]
    );
    assert_eq!(room_of("Error"), "error");
    let up = names_after("use super::{check, table::emit};\n", "super::");
    assert_eq!(up, ["check", "table"]);
}

/// The parts of a room (`upstream/paginate.rs` and `upstream/paginate/`
/// are the part `paginate`) each file of it names: by `crate::ROOM::PART`,
/// or by `super::PART` from a part's own file (`super::super::PART` from a
/// file a level down). The room's own file is its face, re-exporting its
/// parts, so it is no part.
fn parts_named(room: &str) -> Vec<(String, String)> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(room);
    let mut files = Vec::new();
    sources(&src, None, &mut files);
    let parts: Vec<String> = files.iter().map(|(p, _)| p.clone()).collect();
    let mut edges = Vec::new();
    for (part, path) in &files {
        let depth = path
            .strip_prefix(&src)
            .map_or(0, |p| p.components().count());
        let text = code(&std::fs::read_to_string(path).expect("a readable source file"));
        let up = format!("{}::", vec!["super"; depth].join("::"));
        for prefix in [format!("crate::{room}::"), up] {
            for (i, _) in text.match_indices(&prefix) {
                let name: String = text[i + prefix.len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if &name != part && parts.contains(&name) {
                    edges.push((part.clone(), name));
                }
            }
        }
    }
    edges.sort();
    edges.dedup();
    edges
}

/// A circle among `edges`, if any: the parts on it, in order.
fn circle(edges: &[(String, String)]) -> Option<Vec<String>> {
    fn visit(
        at: &str,
        edges: &[(String, String)],
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == at) {
            return Some(path[i..].to_vec());
        }
        if done.iter().any(|d| d == at) {
            return None;
        }
        path.push(at.to_string());
        for (_, to) in edges.iter().filter(|(from, _)| from == at) {
            if let Some(found) = visit(to, edges, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.push(at.to_string());
        None
    }
    let mut done = Vec::new();
    edges
        .iter()
        .find_map(|(from, _)| visit(from, edges, &mut Vec::new(), &mut done))
}

#[test]
fn the_wire_and_the_sinks_have_no_circle_among_their_parts() {
    for room in ["upstream", "sink"] {
        let edges = parts_named(room);
        assert!(!edges.is_empty() || room == "sink", "{room}: no use found");
        if let Some(found) = circle(&edges) {
            panic!("a circle in {room}: {}", found.join(" → "));
        }
    }
    let planted = [
        ("paginate".to_string(), "redirect".to_string()),
        ("redirect".to_string(), "paginate".to_string()),
    ];
    assert_eq!(
        circle(&planted),
        Some(vec!["paginate".to_string(), "redirect".to_string()])
    );
}

/// A room is one purpose: a file past 500 lines (its tests included) is
/// several, and is split.
#[test]
fn no_file_under_src_is_over_500_lines() {
    let long: Vec<String> = source_texts()
        .into_iter()
        .filter(|(_, text)| text.lines().count() > 500)
        .map(|(shown, text)| format!("src/{shown}: {} lines", text.lines().count()))
        .collect();
    assert!(long.is_empty(), "files to split:\n{}", long.join("\n"));
}

/// SQLite is two rooms' business: the embedded ledger's and the SQLite
/// output's. The run, the commands and the other outputs never name a
/// database type (a second sink then touches no file of theirs).
#[test]
fn only_the_embedded_store_and_the_sqlite_output_name_rusqlite() {
    const ALLOWED: &[(&str, &str)] = &[
        ("ledger/embedded", "the embedded store"),
        (
            "ledger/error.rs",
            "the store's error wraps the embedded store's",
        ),
        ("sink/sqlite", "the SQLite output"),
        (
            "atomic_file.rs",
            "the one place files are made: a database is opened only if it exists, and switched to WAL, here",
        ),
    ];
    let wrong: Vec<String> = source_texts()
        .into_iter()
        .filter(|(shown, _)| !ALLOWED.iter().any(|(p, _)| shown.starts_with(p)))
        .filter(|(shown, _)| shown != "layers.rs")
        .filter(|(_, text)| code(text).contains("rusqlite"))
        .map(|(shown, _)| format!("src/{shown}"))
        .collect();
    assert!(wrong.is_empty(), "rusqlite named in:\n{}", wrong.join("\n"));
}

/// The type names `code` defines (`struct`, `enum`, `type`, `trait`),
/// leaving out the associated types of `impl` and `trait` blocks
/// (`type Item = …`, `type Value;`): those name a trait's slot, not a type
/// of the crate.
fn types_defined(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    // Each open brace: whether it opened an `impl` or `trait` block.
    let (mut blocks, mut header) = (Vec::<bool>::new(), false);
    for line in code.lines() {
        // Past its visibility (`pub`, `pub(crate)`, `pub(in crate::x)`).
        let item = line.trim_start();
        let item = match item.strip_prefix("pub(") {
            Some(rest) => rest.split_once(')').map_or(rest, |(_, r)| r),
            None => item.strip_prefix("pub ").unwrap_or(item),
        };
        let words: Vec<&str> = item
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        let first = words.first().map(|w| (*w, words.get(1)));
        if let Some((kind @ ("struct" | "enum" | "type" | "trait"), Some(name))) = first {
            let in_impl = blocks.last() == Some(&true);
            if name.starts_with(|c: char| c.is_ascii_uppercase()) && !(kind == "type" && in_impl) {
                names.push(name.to_string());
            }
        }
        if matches!(first, Some(("impl" | "trait", _))) {
            header = true;
        }
        for ch in line.chars() {
            match ch {
                '{' => blocks.push(std::mem::take(&mut header)),
                '}' => {
                    blocks.pop();
                }
                _ => {}
            }
        }
        if line.trim_end().ends_with(';') {
            header = false;
        }
    }
    names
}

/// A type name means one thing in the crate: one defined twice in `src/`
/// (tests aside) makes a reader ask which one a file means.
#[test]
fn no_type_name_is_defined_twice_under_src() {
    let mut defined: Vec<(String, String)> = Vec::new();
    for (shown, text) in source_texts() {
        for name in types_defined(&code(&text)) {
            defined.push((name, shown.clone()));
        }
    }
    defined.sort();
    let mut twice = Vec::new();
    for pair in defined.windows(2) {
        let ((a, file_a), (b, file_b)) = (&pair[0], &pair[1]);
        if a == b {
            twice.push(format!("{a}: src/{file_a}, src/{file_b}"));
        }
    }
    assert!(
        twice.is_empty(),
        "type names defined twice:\n{}",
        twice.join("\n")
    );
}

#[test]
fn the_reading_finds_types_but_not_associated_ones() {
    let text = "pub struct A;\npub(in crate::x) enum B { X }\ntype C = u8;\ntrait D {\n    type E;\n}\n\
                impl<T> Iterator for F<T>\nwhere T: Copy,\n{\n    type Item = u8;\n}\n\
                fn g() {\n    enum H { Y }\n}\nlet struct_ = 1;\n";
    assert_eq!(types_defined(text), ["A", "B", "C", "D", "H"]);
}

/// The rooms of `commands/` that are no command: helpers every command may
/// use (and the face, `commands/mod.rs`, which dispatches to them all).
const COMMAND_HELPER_ROOMS: &[&str] = &["mod", "context", "table", "common"];

/// A command's room (`commands/plan/`, `commands/check.rs`) uses no other
/// command's: what two commands share lives in a helper room both use, so
/// one command can change without another breaking.
#[test]
fn no_command_uses_another_commands_room() {
    let commands = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/commands");
    let mut files = Vec::new();
    sources(&commands, None, &mut files);
    let rooms: Vec<&str> = files.iter().map(|(room, _)| room.as_str()).collect();
    let mut across = Vec::new();
    for (room, path) in &files {
        if room == "mod" {
            continue;
        }
        let under = path.strip_prefix(&commands).expect("a file of commands/");
        // The `super::`s that reach `commands` from this file (a `mod.rs`
        // is its folder's module).
        let mut depth = under.components().count();
        if under.file_name().is_some_and(|n| n == "mod.rs") {
            depth -= 1;
        }
        let up = format!("{}::", vec!["super"; depth].join("::"));
        let text = code(&std::fs::read_to_string(path).expect("a readable source file"));
        for prefix in ["crate::commands::", up.as_str()] {
            for named in names_after(&text, prefix) {
                if named != *room
                    && rooms.contains(&named.as_str())
                    && !COMMAND_HELPER_ROOMS.contains(&named.as_str())
                {
                    across.push(format!("src/commands/{}: {named}", under.display()));
                }
            }
        }
    }
    across.sort();
    across.dedup();
    assert!(
        across.is_empty(),
        "commands that use another command's room:\n{}",
        across.join("\n")
    );
}
