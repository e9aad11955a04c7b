//! The `Link` header (RFC 8288), read for its `next` link: a pagination
//! of its own (`paginate: { link: next }`, GitHub's), apart from the rest
//! of [`paginate`](super) because reading it is a small parser that is
//! tested on its own.

/// The target of the first link in a `Link` header (RFC 8288) whose
/// relation types include `next`: comma-separated links `<URI>` with
/// `; name=value` parameters, a value a token or a quoted string (which
/// may hold commas, semicolons and backslash escapes); `rel` a
/// space-separated, case-insensitive list, its first occurrence the one
/// that counts. `Ok(None)` when no link is `next`; `Err` (why) when the
/// header is malformed before one is: a link is read whole or not at all,
/// so a `<` left open is never taken for a URL that runs into the next.
///
/// Hand-written rather than a crate's: nom-rfc8288 reads a `&str` (the
/// bytes past ASCII stay ours to encode) and refuses a whole header that
/// has a flaw anywhere, losing a good next link before it;
/// parse_link_header matches with a regex into one link per `rel` and
/// pulls in http 0.2.
pub fn link_next(header: &str) -> Result<Option<String>, &'static str> {
    let mut rest = header;
    loop {
        rest = rest.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
        if rest.is_empty() {
            return Ok(None);
        }
        let r = rest
            .strip_prefix('<')
            .ok_or("a link does not start with <")?;
        let end = r.find('>').ok_or("a < is never closed")?;
        let target = &r[..end];
        // (no URI holds `<` or `"`: a `<` left open ran into the next link)
        if target.contains(['<', '"']) {
            return Err("a < is left open before the next link");
        }
        rest = &r[end + 1..];
        let mut rel: Option<String> = None;
        loop {
            rest = rest.trim_start();
            let Some(r) = rest.strip_prefix(';') else {
                break;
            };
            let (name, value, after) =
                link_param(r.trim_start()).ok_or("a quoted parameter is never closed")?;
            rest = after;
            if name.eq_ignore_ascii_case("rel") && rel.is_none() {
                rel = Some(value);
            }
        }
        let is_next = rel.is_some_and(|r| {
            r.split_ascii_whitespace()
                .any(|t| t.eq_ignore_ascii_case("next"))
        });
        if is_next {
            return Ok(Some(target.to_string()));
        }
        match rest.trim_start() {
            "" => return Ok(None),
            r if r.starts_with(',') => {}
            _ => return Err("text after a link's parameters"),
        }
    }
}

/// One `name[=value]` link parameter: its name, value (unquoted) and the
/// text after it.
fn link_param(s: &str) -> Option<(&str, String, &str)> {
    let end = s
        .find(|c: char| matches!(c, '=' | ';' | ',') || c.is_whitespace())
        .unwrap_or(s.len());
    let (name, mut rest) = (&s[..end], s[end..].trim_start());
    let Some(r) = rest.strip_prefix('=') else {
        return Some((name, String::new(), rest));
    };
    rest = r.trim_start();
    let mut value = String::new();
    if let Some(quoted) = rest.strip_prefix('"') {
        let mut chars = quoted.char_indices();
        loop {
            match chars.next()? {
                (_, '\\') => value.push(chars.next()?.1),
                (i, '"') => return Some((name, value, &quoted[i + 1..])),
                (_, c) => value.push(c),
            }
        }
    }
    let end = rest.find([';', ',']).unwrap_or(rest.len());
    value.push_str(rest[..end].trim());
    Some((name, value, &rest[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::origin::visible;

    #[test]
    fn the_next_link_is_found_among_others() {
        let link_next = |h: &str| link_next(h).unwrap();
        let gh = r#"<https://api.github.com/repositories/1/issues?page=2>; rel="next", <https://api.github.com/repositories/1/issues?page=9>; rel="last""#;
        assert_eq!(
            link_next(gh).as_deref(),
            Some("https://api.github.com/repositories/1/issues?page=2")
        );
        // Order, case, several relation types, quoted commas and semicolons.
        let h = r#"</a?x=1>; title="a, b; c"; rel="prev", </b?x=2>; rel="last NEXT"; title=x"#;
        assert_eq!(link_next(h).as_deref(), Some("/b?x=2"));
        assert_eq!(link_next(r#"</c>; rel=next"#).as_deref(), Some("/c"));
        // Only the first rel counts; `next-page` is another relation.
        assert_eq!(link_next(r#"</d>; rel="prev"; rel="next""#), None);
        assert_eq!(link_next(r#"</e>; rel="next-page""#), None);
        assert_eq!(
            link_next(r#"</f>; title="\"q\"", </g>; rel=next"#).as_deref(),
            Some("/g")
        );
        assert_eq!(link_next(""), None);
        assert_eq!(link_next(r#"</j>; rel="last""#), None);
    }

    #[test]
    fn a_malformed_link_header_is_an_error_not_a_silent_end() {
        for bad in [
            "garbage",
            r#"</h; rel="next""#,
            r#"</i>; rel="next"#,
            r#"</k>; rel="next"; title="open"#,
            r#"</l> junk; rel="next""#,
        ] {
            assert!(link_next(bad).is_err(), "{bad}");
        }
        // A `<` left open is not read through to the next link's `>`:
        // `/stray; rel="prev", </real` is no URL to follow.
        let open = r#"</stray; rel="prev", </real?page=2>; rel="next""#;
        assert_eq!(
            link_next(open),
            Err("a < is left open before the next link")
        );
        // A next link before the malformed part is still found.
        assert_eq!(
            link_next(r#"</n>; rel=next, </o; rel=last"#),
            Ok(Some("/n".into()))
        );
    }

    #[test]
    fn bytes_past_ascii_in_a_link_are_percent_encoded_as_browsers_do() {
        let raw = "</p?q=café&page=2>; rel=\"next\"".as_bytes();
        let text = visible(raw);
        assert_eq!(text, r#"</p?q=caf%C3%A9&page=2>; rel="next""#);
        assert_eq!(link_next(&text), Ok(Some("/p?q=caf%C3%A9&page=2".into())));
        // Latin-1, not UTF-8: each byte on its own.
        assert_eq!(visible(b"</\xE9>"), "</%E9>");
    }
}
