//! Output files: one JSON document per fetched page, written atomically
//! (hidden temporary file, fsync, a new name, fsync of the folder), so a run
//! killed at any moment leaves no partial file under a visible name, and
//! never over an existing file: a run is numbered after the highest run
//! whose pages are in the folder, and a page takes only a free name.
//!
//! Names are deterministic: `JOB.rRUN.REGION.sSTEP.pPAGE.json`, e.g.
//! `trending.r000042.US.s0.p000001.json` (no region part for a job without
//! regions; a region's characters other than letters, digits, `.`, `_`
//! and `-` percent-encoded, so `rust-lang/rust` is `rust-lang%2Frust`).
//! No job name has a part `.rDIGITS` (refused by validation), so a page's
//! name says which job's it is: the part before the first `.rDIGITS.`.
//! Temporary files are `.JOB~NAME~RANDOM.tmp`, created
//! exclusively (see [`crate::atomic_file`]); a later run of the same job,
//! holding the job's lock, removes any that a killed run left, and never
//! another job's. Pages are created 0640 (`PORTION_FILE_MODE`), less the umask.

use std::borrow::Cow;
use std::fs;
use std::path::Path;

use crate::atomic_file::is_temp_of;
use crate::config::{Masker, Secret};
pub use crate::page_name::PageName;

/// What [`prepare`] found in the output folder.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Prepared {
    /// Temporary files a killed run left, removed.
    pub removed: usize,
    /// The highest run number among the job's page files (0: none).
    pub highest_run: u64,
}

/// Create the output folder, find the highest run number of `job`'s pages,
/// so that a run whose cursor was lost (a new or reset store) is numbered
/// after them and never takes an existing page's name, and, when `clean`
/// (the run holds the job's lock, so no other run of it is writing), remove
/// the temporary files a killed run of `job` left there: its own only.
pub fn prepare(dir: &Path, job: &str, clean: bool) -> std::io::Result<Prepared> {
    crate::atomic_file::create_folder(dir)?;
    let mut found = Prepared::default();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if is_temp_of(&name, job) {
            if clean {
                fs::remove_file(entry.path())?;
                found.removed += 1;
            }
        } else if let Some(run) = page_run(&name, job) {
            found.highest_run = found.highest_run.max(run);
        }
    }
    Ok(found)
}

/// The run number of `name` if it is a page file of `job`
/// (`JOB.rRUN.….json`). Another job whose name starts with `JOB.r` followed
/// by digits could be counted too: that only makes the next run's number
/// higher, never one already used.
fn page_run(name: &str, job: &str) -> Option<u64> {
    let rest = name.strip_prefix(job)?.strip_prefix(".r")?;
    let digits = rest.find(|c: char| !c.is_ascii_digit())?;
    if digits == 0 || !rest[digits..].starts_with('.') || !name.ends_with(".json") {
        return None;
    }
    rest[..digits].parse().ok()
}

/// A page whose secret could not be masked: it holds it outside a JSON
/// string (inside a number: `"views": 91234567899` for the key
/// `12345678`, or a number written otherwise whose digits hold it:
/// `1.2345678e7`, see [`number_holds`]), where `***` would leave a file
/// that is not JSON.
#[derive(Debug, PartialEq, Eq)]
pub struct SecretOutsideStrings;

/// Whether a number outside the strings of `text` holds `digits` (an
/// all-digit secret) in the digits of its value written out in full, the
/// point left out: `1.2345678e7`, `123456.78E2`, `1234.5678` and
/// `0.12345678e8` all hold `12345678`, as `91234567899` does as written.
/// Zeros the exponent adds count up to the secret's length (more cannot
/// change whether it is there), so `1e999999999` costs no more than `1`.
fn number_holds(text: &str, digits: &str) -> bool {
    let bytes = text.as_bytes();
    let number = |b: u8| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-');
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let end = (i..bytes.len())
                    .find(|&j| !number(bytes[j]))
                    .unwrap_or(bytes.len());
                if written_out(&text[i..end], digits.len()).contains(digits) {
                    return true;
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    false
}

/// The digits of a JSON number's value written out without exponent or
/// point (`1.50e3` → `1500`, `0.012` → `0012`), at most `cap` zeros added
/// on either side.
fn written_out(number: &str, cap: usize) -> String {
    let number = number.trim_start_matches('-');
    let (mantissa, exp) = match number.find(['e', 'E']) {
        Some(at) => (&number[..at], &number[at + 1..]),
        None => (number, "0"),
    };
    let exp: i64 = exp.parse().unwrap_or(if exp.starts_with('-') {
        i64::MIN / 2
    } else {
        i64::MAX / 2
    });
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    // Significant digits only: `0.50` is `5`, the point after it.
    let all = format!("{int}{frac}");
    let lead = all.len() - all.trim_start_matches('0').len();
    let sig = all.trim_matches('0');
    let point = (int.len() as i64 - lead as i64).saturating_add(exp);
    let zeros = |n: i64| "0".repeat(n.clamp(0, cap as i64) as usize);
    if sig.is_empty() {
        "0".into()
    } else if point <= 0 {
        format!("0{}{sig}", zeros(-point))
    } else if point as usize >= sig.len() {
        format!("{sig}{}", zeros(point - sig.len() as i64))
    } else {
        sig.to_string()
    }
}

/// A page's text with every occurrence of the secret masked as `***`,
/// inside its strings only, so the page stays JSON; no copy when it holds
/// none. A string whose masked text would not be a JSON string (a match
/// that began inside an escape) is `***` whole. An occurrence anywhere
/// else (a number, across a string's quotes) refuses the page: it is not
/// written at all rather than written with the key or broken; so does an
/// all-digit secret in a number written otherwise ([`number_holds`]).
pub fn mask_page<'a>(text: &'a str, secret: &Secret) -> Result<Cow<'a, str>, SecretOutsideStrings> {
    let key = secret.expose();
    if !key.is_empty() && key.bytes().all(|b| b.is_ascii_digit()) && number_holds(text, key) {
        return Err(SecretOutsideStrings);
    }
    let masker = Masker::new(&[secret]);
    if let Cow::Borrowed(_) = masker.mask(text) {
        return Ok(Cow::Borrowed(text));
    }
    let bytes = text.as_bytes();
    let (mut out, mut copied, mut at) = (String::with_capacity(text.len()), 0, 0);
    loop {
        let open = (at..bytes.len()).find(|&i| bytes[i] == b'"');
        let between = &bytes[at..open.unwrap_or(bytes.len())];
        if masker.find(between, 0).is_some() {
            return Err(SecretOutsideStrings);
        }
        let Some(open) = open else { break };
        let mut close = open + 1;
        while close < bytes.len() && bytes[close] != b'"' {
            close += if bytes[close] == b'\\' { 2 } else { 1 };
        }
        let close = close.min(bytes.len());
        let inner = &text[open + 1..close];
        if let Cow::Owned(masked) = masker.mask(inner) {
            let quoted = format!("\"{masked}\"");
            let valid = serde_json::from_str::<serde::de::IgnoredAny>(&quoted).is_ok();
            out.push_str(&text[copied..=open]);
            out.push_str(if valid { &masked } else { "***" });
            copied = close;
        }
        at = close + 1;
    }
    out.push_str(&text[copied..]);
    // (an occurrence across a string's quotes is in none of the parts)
    if masker.find(out.as_bytes(), 0).is_some() {
        return Err(SecretOutsideStrings);
    }
    Ok(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::atomic_file::write_new;

    #[test]
    fn finds_the_highest_run_of_this_jobs_pages_only() {
        assert_eq!(
            page_run("feed.r000042.US.s0.p000001.json", "feed"),
            Some(42)
        );
        assert_eq!(
            page_run("feed.r1234567.s0.p000001.json", "feed"),
            Some(1_234_567)
        );
        assert_eq!(
            page_run("feed.reddit.r000009.US.s0.p000000.json", "feed"),
            None
        );
        assert_eq!(
            page_run("feed.r000009.US.s0.p000000.json.tmp", "feed"),
            None
        );
        assert_eq!(page_run("feed.r.US.s0.p000000.json", "feed"), None);
        assert_eq!(page_run("other.r000009.US.s0.p000000.json", "feed"), None);

        let dir = tempfile::tempdir().unwrap();
        for name in [
            "feed.r000003.US.s0.p000000.json",
            "feed.r000007.s0.p000000.json",
            "feed.reddit.r000099.US.s0.p000000.json",
            "notes.txt",
        ] {
            fs::write(dir.path().join(name), "{}").unwrap();
        }
        assert_eq!(prepare(dir.path(), "feed", true).unwrap().highest_run, 7);
        assert_eq!(
            prepare(dir.path(), "feed.reddit", true)
                .unwrap()
                .highest_run,
            99
        );
        assert_eq!(prepare(dir.path(), "new", true).unwrap().highest_run, 0);
    }

    #[test]
    fn cleans_only_this_jobs_leftovers_and_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let p = write_new(d, "j", "j.r000001.US.s0.p000000.json", b"{}", 0o640).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"{}");
        for leftover in [
            ".j~j.r000002.US.s0.p000000.json.tmp",
            ".j.r~j.r.r000002.US.s0.p000000.json.tmp",
            ".other~other.r000002.US.s0.p000000.json.tmp",
            ".j.r000002.US.s0.p000000.json.tmp",
        ] {
            fs::write(d.join(leftover), "{\"partial").unwrap();
        }
        let left = || {
            let mut v: Vec<_> = fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        // Without the lock: nothing removed.
        assert_eq!(prepare(d, "j", false).unwrap().removed, 0);
        assert_eq!(left().len(), 5);
        assert_eq!(prepare(d, "j", true).unwrap().removed, 1);
        assert_eq!(
            left(),
            [
                ".j.r000002.US.s0.p000000.json.tmp",
                ".j.r~j.r.r000002.US.s0.p000000.json.tmp",
                ".other~other.r000002.US.s0.p000000.json.tmp",
                "j.r000001.US.s0.p000000.json"
            ]
        );
    }

    #[test]
    fn a_secret_is_masked_inside_strings_only_and_the_page_stays_json() {
        let key = Secret::new("12345678".into());
        let page = r#"{"url":"/v?key=12345678&x=1","id":"a\n12345678","n":{"12345678":1}}"#;
        let masked = mask_page(page, &key).unwrap();
        assert_eq!(
            masked,
            r#"{"url":"/v?key=***&x=1","id":"a\n***","n":{"***":1}}"#
        );
        serde_json::from_str::<serde_json::Value>(&masked).unwrap();
        // A mask that would cut an escape in two makes the string *** whole.
        let odd = Secret::new("n1234567x".into());
        let masked = mask_page(r#"{"id":"a\n1234567x","k":"n1234567x"}"#, &odd).unwrap();
        assert_eq!(masked, r#"{"id":"***","k":"***"}"#);
        assert!(matches!(
            mask_page(r#"{"a":"b"}"#, &key),
            Ok(Cow::Borrowed(_))
        ));
        // In a number (or across quotes), no mask keeps it JSON: refused.
        for refused in [r#"{"views": 91234567899}"#, r#"{"v": [1, -123456789e3]}"#] {
            assert_eq!(
                mask_page(refused, &key),
                Err(SecretOutsideStrings),
                "{refused}"
            );
        }
        // Its value written otherwise, or its digits about a point: refused.
        for refused in [
            r#"{"views": 1.2345678e7}"#,
            r#"{"w": [0, 123456.78E2]}"#,
            r#"{"v": 0.12345678e+8}"#,
            r#"{"v": -1234.5678}"#,
            r#"{"v": 91.2345678E-3}"#,
            r#"{"v": 1.23456780000e10}"#,
        ] {
            assert_eq!(
                mask_page(refused, &key),
                Err(SecretOutsideStrings),
                "{refused}"
            );
        }
        for kept in [
            r#"{"v": 1.2345679e7, "w": 1.2345677e6, "s": "1.2345678e7"}"#,
            r#"{"v": 1e999999999, "w": -0.0, "x": 12345.6e-99999}"#,
        ] {
            assert_eq!(mask_page(kept, &key), Ok(Cow::Borrowed(kept)), "{kept}");
        }
        assert_eq!(written_out("1.50e3", 8), "1500");
        assert_eq!(written_out("-0.012", 8), "0012");
        assert_eq!(written_out("1e999999999", 3), "1000");
        assert_eq!(written_out("0.0", 3), "0");
        let across = Secret::new(r#"ab","cd"#.into());
        assert_eq!(
            mask_page(r#"["ab","cd"]"#, &across),
            Err(SecretOutsideStrings)
        );
    }
}
