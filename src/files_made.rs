//! Every file and folder portion makes is made by [`crate::atomic_file`],
//! checked: its modes (`PORTION_FILE_MODE`, folders never the umask's 0777)
//! hold only if no other path makes one. A database made by SQLite itself
//! (`Connection::open`, or flags with `SQLITE_OPEN_CREATE`) would be 0644
//! whatever the mode, its missing folders the umask's: so those are
//! refused here too. Reads the text of `src/` as `layers.rs` does (tests
//! and comments left out: a test may make what it likes).

use crate::layers::{code, source_texts};

/// What makes a file or a folder, as the source spells it.
const MAKERS: &[&str] = &[
    "create_dir",
    "DirBuilder",
    "File::create",
    "File::options",
    "OpenOptions",
    "fs::write(",
    "fs::copy(",
    "fs::hard_link(",
    "os::unix::fs::symlink",
    "Connection::open(",
    "OpenFlags::default",
    "SQLITE_OPEN_CREATE",
    "tempfile::",
];

/// The one file that may make files and folders.
const THE_ONE_PLACE: &str = "atomic_file.rs";

/// `(file, maker)` for each maker `text` uses.
fn makers_in(text: &str) -> Vec<&'static str> {
    let code = code(text);
    MAKERS
        .iter()
        .copied()
        .filter(|m| code.contains(m))
        .collect()
}

#[test]
fn every_file_and_folder_is_made_in_one_place() {
    let mut elsewhere = Vec::new();
    for (shown, text) in source_texts() {
        let name = shown.rsplit('/').next().unwrap_or("");
        // (this file and the layers' name the makers as text; a `tests.rs`
        // is a `#[cfg(test)] mod tests;`)
        if shown == THE_ONE_PLACE || ["files_made.rs", "layers.rs", "tests.rs"].contains(&name) {
            continue;
        }
        for maker in makers_in(&text) {
            elsewhere.push(format!("src/{shown}: {maker}"));
        }
    }
    elsewhere.sort();
    assert!(
        elsewhere.is_empty(),
        "files or folders made outside src/{THE_ONE_PLACE} (make them there, with its modes):\n{}",
        elsewhere.join("\n")
    );
}

#[test]
fn the_reading_finds_makers_but_not_in_comments_or_tests() {
    let text = "fn f() { std::fs::create_dir_all(d)?; } // File::create\n\
                fn g() { let c = Connection::open(p)?; }\n\
                #[cfg(test)]\nmod tests {\n    fn h() { std::fs::write(p, b\"\").unwrap(); }\n}\n";
    assert_eq!(makers_in(text), ["create_dir", "Connection::open("]);
}
