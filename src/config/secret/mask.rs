//! Masking secrets: every occurrence of a secret in a text, in every
//! encoding a request or an echo of it may use, replaced by `***` before the
//! text is logged, shown or stored.

use super::Secret;

/// Replace every occurrence of each secret in `text` with `***`, in every
/// encoding a request or an echo of it may use: as is, percent-encoded
/// (upper or lower case hex, once or twice, any mix), form-encoded (`+` for
/// a space), JSON-escaped (`\/`, `\u0041`), and base64 (standard or URL
/// alphabet, at any alignment: `user:KEY` in a Basic `Authorization`). Used
/// on anything that came back from the network or from an HTTP library, and
/// on URLs, before it is logged, shown or stored.
pub fn redact(text: &str, secrets: &[&Secret]) -> String {
    mask(text, secrets).into_owned()
}

/// [`redact`] that copies nothing when there is nothing to mask (a page of
/// tens of megabytes, say).
pub fn mask<'a>(text: &'a str, secrets: &[&Secret]) -> std::borrow::Cow<'a, str> {
    Masker::new(secrets).mask(text)
}

/// What [`mask`] looks for, made once for many texts (the strings of a
/// page, one by one).
pub struct Masker {
    needles: Vec<Vec<u8>>,
    /// The bytes a match can start with: a needle's first byte as is, or
    /// the start of one of its encodings. Most of a text is skipped on one
    /// table look-up a byte.
    starts: [bool; 256],
}

impl Masker {
    pub fn new(secrets: &[&Secret]) -> Self {
        let mut needles: Vec<Vec<u8>> = Vec::new();
        for secret in secrets {
            let raw = secret.expose().as_bytes();
            if raw.is_empty() {
                continue;
            }
            needles.push(raw.to_vec());
            // Hex, as an upstream's debug echo or a hash-like field may
            // write the bytes (either case: letters match in any case).
            needles.push(
                raw.iter()
                    .flat_map(|b| format!("{b:02x}").into_bytes())
                    .collect(),
            );
            needles.extend(base64_cores(raw));
        }
        let mut starts = [false; 256];
        for n in &needles {
            starts[usize::from(n[0].to_ascii_lowercase())] = true;
            starts[usize::from(n[0].to_ascii_uppercase())] = true;
            if n[0] == b' ' {
                starts[usize::from(b'+')] = true;
            }
        }
        starts[usize::from(b'%')] = true;
        starts[usize::from(b'\\')] = true;
        starts[usize::from(b'&')] = true;
        Self { needles, starts }
    }

    /// The first occurrence in `bytes` at or after `from`, in any encoding:
    /// its offset and length.
    pub fn find(&self, bytes: &[u8], from: usize) -> Option<(usize, usize)> {
        (from..bytes.len()).find_map(|i| {
            if !self.starts[usize::from(bytes[i])] {
                return None;
            }
            self.needles
                .iter()
                .find_map(|n| match_encoded(&bytes[i..], n))
                .map(|len| (i, len))
        })
    }

    /// `text` with every occurrence `***` (see [`redact`]).
    pub fn mask<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        let bytes = text.as_bytes();
        let Some(mut next) = self.find(bytes, 0) else {
            return std::borrow::Cow::Borrowed(text);
        };
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        loop {
            let (at, len) = next;
            out.extend_from_slice(&bytes[i..at]);
            out.extend_from_slice(b"***");
            // A match that starts inside this one widens it: a reading that
            // runs into the next occurrence (`%` read as the `%25` that starts
            // it) must not leave the rest of that one shown.
            let mut end = at + len;
            let mut after = self.find(bytes, at + 1);
            while let Some((a, l)) = after.filter(|&(a, _)| a < end) {
                end = end.max(a + l);
                after = self.find(bytes, a + 1);
            }
            i = end;
            match after {
                Some(n) => next = n,
                None => break,
            }
        }
        out.extend_from_slice(&bytes[i..]);
        // Matches start and end on character boundaries (a needle is UTF-8, its
        // encodings ASCII), so this is UTF-8; lossy all the same, never a panic.
        std::borrow::Cow::Owned(
            String::from_utf8(out)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
        )
    }
}

/// The length of the longest text at the start of `text` that encodes
/// `needle`, each byte of it as is or in one of the encodings [`redact`]
/// knows. A byte can be read more than one way (a `%` in the secret is the
/// `%` of `%25` as is, or all of `%25` encoded), so every reading is
/// followed, as a set of offsets reached so far: bounded by the secret's
/// length, never the text's, and no reading is tried twice from one offset.
fn match_encoded(text: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let mut reached: Vec<usize> = match_byte(text, first).into_iter().flatten().collect();
    if reached.is_empty() {
        return None;
    }
    let mut next = Vec::new();
    for &b in rest {
        next.clear();
        for &at in &reached {
            for len in match_byte(&text[at..], b).into_iter().flatten() {
                if !next.contains(&(at + len)) {
                    next.push(at + len);
                }
            }
        }
        if next.is_empty() {
            return None;
        }
        std::mem::swap(&mut reached, &mut next);
    }
    reached.into_iter().max()
}

/// How many bytes at the start of `text` may stand for the byte `b`: as is
/// (an ASCII letter in either case: an upstream may lower-case what it
/// echoes), and each encoding that fits (at most three readings: a `%` as
/// is, as `%25`, as `%2525`; an `&` as is or as an HTML entity).
fn match_byte(text: &[u8], b: u8) -> [Option<usize>; 3] {
    let hex = |t: &[u8]| -> Option<u8> {
        let h = std::str::from_utf8(t.get(..2)?).ok()?;
        u8::from_str_radix(h, 16).ok()
    };
    let Some(&first) = text.first() else {
        return [None; 3];
    };
    let as_is = first.eq_ignore_ascii_case(&b).then_some(1);
    match first {
        b'&' => [as_is, html_entity(text, b), None],
        b'+' if b == b' ' => [Some(1), None, None],
        b'%' => [
            as_is,
            (hex(&text[1..]) == Some(b)).then_some(3),
            // Percent-encoded twice: `%25` is the `%`.
            (text[1..].starts_with(b"25") && hex(&text[3..]) == Some(b)).then_some(5),
        ],
        b'\\' => {
            let escaped = match text.get(1) {
                Some(c) if *c == b && matches!(b, b'/' | b'"' | b'\\') => Some(2),
                Some(b'u')
                    if b.is_ascii()
                        && text.get(2..4) == Some(b"00")
                        && hex(&text[4..]) == Some(b) =>
                {
                    Some(6)
                }
                _ => None,
            };
            [as_is, escaped, None]
        }
        _ => [as_is, None, None],
    }
}

/// The length of the HTML character reference at the start of `text` that
/// stands for the byte `b` (`&amp;`, `&#38;`, `&#x26;`: how an HTML error
/// page echoes the URL it was asked for), if it is one.
fn html_entity(text: &[u8], b: u8) -> Option<usize> {
    let end = text.iter().take(12).position(|&c| c == b';')?;
    let name = std::str::from_utf8(&text[1..end]).ok()?;
    let value = match name.as_bytes() {
        [b'#', b'x' | b'X', hex @ ..] => {
            u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
        }
        [b'#', dec @ ..] => std::str::from_utf8(dec).ok()?.parse::<u8>().ok(),
        _ => match name {
            "amp" => Some(b'&'),
            "lt" => Some(b'<'),
            "gt" => Some(b'>'),
            "quot" => Some(b'"'),
            "apos" => Some(b'\''),
            "sol" => Some(b'/'),
            "equals" => Some(b'='),
            "plus" => Some(b'+'),
            _ => None,
        },
    };
    (value == Some(b) && b.is_ascii()).then_some(end + 1)
}

/// The runs of base64 characters that only `raw` decides, whatever comes
/// before it (0, 1 or 2 bytes mod 3), in the standard and the URL alphabet;
/// runs shorter than 6 characters would mask innocent text, and are left out.
fn base64_cores(raw: &[u8]) -> Vec<Vec<u8>> {
    const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut cores = Vec::new();
    for offset in 0..3usize {
        let mut input = vec![0u8; offset];
        input.extend_from_slice(raw);
        let bits = input.len() * 8;
        // Characters wholly inside the secret's bits: from the first that
        // starts at or after bit 8·offset to the last that ends by the end.
        let first = (8 * offset).div_ceil(6);
        let last = bits / 6;
        if last < first + 6 {
            continue;
        }
        let core: Vec<u8> = (first..last)
            .map(|i| {
                let bit = 6 * i;
                let (byte, shift) = (bit / 8, bit % 8);
                let pair =
                    u16::from(input[byte]) << 8 | u16::from(*input.get(byte + 1).unwrap_or(&0));
                STANDARD[usize::from((pair >> (10 - shift)) & 0x3f)]
            })
            .collect();
        let url: Vec<u8> = core
            .iter()
            .map(|&c| match c {
                b'+' => b'-',
                b'/' => b'_',
                c => c,
            })
            .collect();
        if url != core {
            cores.push(url);
        }
        cores.push(core);
    }
    cores
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_plain_and_url_encoded_forms() {
        let s = Secret::new("k+y/1".into());
        let text = "url=https://x/?key=k%2By%2F1 raw=k+y/1 lower=k%2by%2f1";
        assert_eq!(
            redact(text, &[&s]),
            "url=https://x/?key=*** raw=*** lower=***"
        );
    }

    #[test]
    fn redacts_every_encoding_a_request_uses() {
        let s = Secret::new("tilde~space Key/77é".into());
        let mut url = reqwest::Url::parse("http://u:p@h/a").unwrap();
        url.set_path(&format!("/v/{}/x", s.expose()));
        url.set_password(Some(s.expose())).unwrap();
        url.query_pairs_mut().append_pair("key", s.expose());
        let shown = redact(url.as_str(), &[&s]);
        assert_eq!(shown, "http://u:***@h/v/***/x?key=***", "{url}");
        for text in [
            "tilde%7Espace+Key%2F77%C3%A9",        // form
            "tilde~space%20Key/77%c3%a9",          // path, lower-case hex
            "tilde%257Espace%2520Key/77%C3%A9",    // encoded twice
            r#"{"k":"tilde~space Key\u002f77é"}"#, // JSON, `/` as \u002f
            r#"{"k":"tilde~space Key\/77é"}"#,     // JSON, `/` as \/
        ] {
            let out = redact(text, &[&s]);
            assert!(!out.contains("space"), "{text} → {out}");
        }
    }

    #[test]
    fn a_percent_in_the_secret_is_masked_in_every_encoding() {
        for key in ["zz%41yy", "%", "k%2B", "%%", "a\\b%", "50%off"] {
            let s = Secret::new(key.into());
            let once: String = key.bytes().map(|b| format!("%{b:02X}")).collect();
            let twice = once.replace('%', "%25");
            let mut url = reqwest::Url::parse("http://h/a").unwrap();
            url.query_pairs_mut().append_pair("key", key);
            for text in [
                url.to_string(),
                format!("k={key};"),
                format!("k={once};"),
                format!("k={twice};"),
                format!("k={};", key.replace('%', "%25")),
                format!("k={};", key.replace('%', "%2525")),
            ] {
                let out = redact(&text, &[&s]);
                assert!(
                    out.ends_with("=***") || out.ends_with("=***;"),
                    "{key}: {text} → {out}"
                );
            }
        }
    }

    #[test]
    fn hex_html_entities_and_a_lower_cased_echo_are_masked() {
        let key = "S3cr+t/K=y&Z9 w~xQ";
        let s = Secret::new(key.into());
        let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
        let once: String = key.bytes().map(|b| format!("%{b:02X}")).collect();
        for text in [
            format!("k={hex};"),
            format!("k={};", hex.to_uppercase()),
            "k=S3cr+t/K=y&amp;Z9 w~xQ;".to_string(),
            "k=S3cr+t&#x2F;K&#61;y&#38;Z9 w~xQ;".to_string(),
            format!("k={};", once.to_lowercase()),
            format!("k={};", key.to_lowercase()),
        ] {
            assert_eq!(redact(&text, &[&s]), "k=***;", "{text}");
        }
        assert_eq!(redact("a &amp; b", &[&s]), "a &amp; b");
    }

    #[test]
    fn occurrences_side_by_side_are_all_masked() {
        // (a reading of the first that runs into the second must not leave
        // the rest of the second shown)
        for (key, text) in [
            ("25abcdef%", "k=25abcdef%25abcdef%;"),
            ("\\abc\\", "k=\\abc\\\\abc\\;"),
            ("abcabc", "k=abcabcabcabc;"),
        ] {
            let out = redact(text, &[&Secret::new(key.into())]);
            assert_eq!(out, "k=***;", "{key}: {text}");
        }
    }

    #[test]
    fn redacts_base64_at_every_alignment() {
        let s = Secret::new("AIzaSyD-distinctive-7f3c9e21".into());
        // Basic auth of `user:KEY`, `u:KEY`, `KEY:x`: three alignments.
        for basic in [
            "dXNlcjpBSXphU3lELWRpc3RpbmN0aXZlLTdmM2M5ZTIx",
            "dTpBSXphU3lELWRpc3RpbmN0aXZlLTdmM2M5ZTIx",
            "QUl6YVN5RC1kaXN0aW5jdGl2ZS03ZjNjOWUyMTp4",
        ] {
            let out = redact(&format!("Authorization: Basic {basic}"), &[&s]);
            let (before, after) = out.split_once("***").expect(&out);
            // Left: what encodes `user:`/`u:` (and one character it shares
            // with the key) and what encodes `:x`.
            assert!(
                before.len() <= 21 + 8 && after.len() <= 3,
                "{basic} → {out}"
            );
        }
        assert_eq!(redact("nothing here", &[&s]), "nothing here");
    }
}
