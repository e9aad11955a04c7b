//! Pages no `serde_json::Value` could build cheaply, for the tests of how
//! `portion` reads and writes pages (`--large-page`, `--odd-ids`,
//! `--key-in-number`, `--key-in-exponent`, `--long-ids`): added to the text of
//! the `/ids` pages as they are sent, so the stand-in never builds them as
//! a tree either.

use crate::Options;

/// The text of an answer to `target`: `body` as JSON, and, for a 200 of
/// `/ids` (an object), the fields the options ask for first.
pub fn text(opts: &Options, target: &str, status: u16, body: &serde_json::Value) -> String {
    let text = body.to_string();
    let ids = target == "/ids" || target.starts_with("/ids?");
    // (the empty page that ends a walk stays as it is)
    if status != 200 || !ids || !text.starts_with('{') || text.contains("\"items\":[]") {
        return text;
    }
    let text = if opts.long_ids {
        // Ids no double holds as written, first among the items.
        let long = r#""items":[{"id":{"n":123456789012345678901234}},{"id":{"n":-0}},"#;
        text.replacen("\"items\":[", long, 1)
    } else {
        text
    };
    let mut out = String::with_capacity(text.len() + opts.large_page.unwrap_or(0) + 1024);
    out.push('{');
    if let Some(bytes) = opts.large_page {
        // An array of small numbers: about 32 bytes of tree a byte of page.
        out.push_str("\"filler\":[0");
        while out.len() + 3 < bytes {
            out.push_str(",0");
        }
        out.push_str("],");
    }
    if opts.key_in_number && opts.key.bytes().all(|b| b.is_ascii_digit()) && asked(opts, target) {
        // A count that happens to hold the (all-digit) key.
        out.push_str(&format!("\"views\":9{}99,", opts.key));
    }
    let k = &opts.key;
    if opts.key_in_exponent && k.len() >= 3 && k.bytes().all(|b| b.is_ascii_digit()) {
        // Its value, in an exponent's form: no digit run of the key shows.
        let (n, cut) = (k.len() - 1, k.len() - 2);
        out.push_str(&format!(
            "\"views\":{}.{}e{n},\"w\":{}.{}E2,",
            &k[..1],
            &k[1..],
            &k[..cut],
            &k[cut..]
        ));
    }
    if opts.odd_ids {
        // Nesting past serde_json's 128, and a string cut mid-emoji.
        out.push_str(&format!(
            "\"deep\":{}0{},",
            "[".repeat(200),
            "]".repeat(200)
        ));
        let items = text.find("\"items\":[").map(|i| i + "\"items\":[".len());
        if let Some(i) = items {
            out.push_str(&text[1..i]);
            out.push_str(r#"{"id":{"n":"cut \ud83d"}},"#);
            out.push_str(&text[i..]);
            return out;
        }
    }
    out.push_str(&text[1..]);
    out
}

/// Whether `target`'s query has every pair `--key-in-number-where` names
/// (when it names any).
fn asked(opts: &Options, target: &str) -> bool {
    let Some(wanted) = opts.key_in_number_where.as_deref() else {
        return true;
    };
    let have = crate::odd::form_pairs(target.split_once('?').map_or("", |(_, q)| q));
    crate::odd::form_pairs(wanted)
        .iter()
        .all(|p| have.contains(p))
}
