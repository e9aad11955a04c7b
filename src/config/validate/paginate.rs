//! A step's `paginate`: which of the kinds (a body token, a `Link` header,
//! a next URL, page or offset numbers) and its bounds. Apart from
//! [`super`] because every kind has its own keys to check.

use super::*;

impl Validator<'_> {
    /// Which pagination kind `p` names (exactly one), with the keys that
    /// kind takes and no others.
    fn paginate_kind(&self, at: &str, p: &RawPaginate) -> Result<&'static str> {
        let named: Vec<&str> = [
            ("token", p.token.is_some()),
            ("link", p.link.is_some()),
            ("next_url", p.next_url.is_some()),
            ("page", p.page.is_some()),
            ("offset", p.offset.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect();
        let [kind] = named[..] else {
            return Err(self.err(
                at,
                format!(
                    "name exactly one kind of pagination: token, link, next_url, page or offset (found {})",
                    if named.is_empty() { "none".into() } else { named.join(", ") }
                ),
            ));
        };
        let takes: &[&str] = match kind {
            "token" => &["param"],
            "page" => &["start", "until_empty"],
            "offset" => &["size", "until_empty"],
            _ => &[],
        };
        for (key, set) in [
            ("param", p.param.is_some()),
            ("start", p.start.is_some()),
            ("size", p.size.is_some()),
            ("until_empty", p.until_empty.is_some()),
        ] {
            if set && !takes.contains(&key) {
                return Err(self.err(
                    format!("{at}.{key}"),
                    format!(
                        "not a key of {kind} pagination (it takes: {})",
                        takes.join(", ")
                    ),
                ));
            }
        }
        Ok(kind)
    }

    /// One pagination kind, checked.
    pub(super) fn paginate(&self, at: &str, p: RawPaginate) -> Result<Paginate> {
        let kind = self.paginate_kind(at, &p)?;
        let field = |k: &str| format!("{at}.{k}");
        let pointer = |k: &str, v: Option<String>| -> Result<String> {
            let v = v.ok_or_else(|| self.err(field(k), format!("{kind} pagination needs {k}")))?;
            if !v.starts_with('/') {
                return Err(self.err(
                    field(k),
                    format!("'{v}' is not a JSON pointer (e.g. /items)"),
                ));
            }
            Ok(v)
        };
        let name = |k: &str, v: Option<String>| -> Result<String> {
            match v {
                Some(v) if !v.is_empty() => Ok(v),
                Some(_) => Err(self.err(field(k), "must not be empty")),
                None => Err(self.err(field(k), format!("{kind} pagination needs {k}"))),
            }
        };
        let kind = match kind {
            "token" => PageKind::Token {
                pointer: pointer("token", p.token)?,
                param: name("param", p.param)?,
            },
            "link" => match p.link.as_deref() {
                Some("next") => PageKind::Link,
                Some(other) => {
                    return Err(self.err(
                        field("link"),
                        format!("'{other}': the only relation followed is next (link: next)"),
                    ));
                }
                None => unreachable!("named above"),
            },
            "next_url" => PageKind::NextUrl {
                pointer: pointer("next_url", p.next_url)?,
            },
            "page" => PageKind::Page {
                param: name("page", p.page)?,
                start: match p.start {
                    None => 1,
                    Some(n) if n >= 0 => n as u64,
                    Some(n) => return Err(self.err(field("start"), format!("{n} is negative"))),
                },
                until_empty: pointer("until_empty", p.until_empty)?,
            },
            _ => PageKind::Offset {
                param: name("offset", p.offset)?,
                size: match p.size {
                    Some(n) if n > 0 => n as u64,
                    Some(n) => return Err(self.err(field("size"), format!("{n} is not positive"))),
                    None => return Err(self.err(field("size"), "offset pagination needs size")),
                },
                until_empty: pointer("until_empty", p.until_empty)?,
            },
        };
        if !(1..=10_000).contains(&p.max_pages) {
            return Err(self.err(
                field("max_pages"),
                format!("{} is out of range: 1 to 10000", p.max_pages),
            ));
        }
        Ok(Paginate {
            kind,
            max_pages: p.max_pages as u32,
        })
    }
}
