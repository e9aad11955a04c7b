//! A request URL filled in: each placeholder's value is percent-encoded for
//! the part of the URL it lands in, which the template's own text decides
//! (never the value), so no value can move the request to another host,
//! user, path, query or fragment. A value pasted in raw could: a key
//! `tok@evil:1/x?` in `http://u:{secret}@host/` sent the request (and the
//! key) to `evil`, a region `../../admin` or a batch value `a#` changed the
//! path or cut it.

use std::borrow::Cow;
use std::ops::Range;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::{Fill, InputFields, Part, Placeholder, Template, input_text};

/// Everything but RFC 3986's unreserved characters (`A-Z a-z 0-9 - . _ ~`):
/// safe in a userinfo, a path segment, a query component and a fragment,
/// and what every server decodes back to the value.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Where in a URL a placeholder sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Component {
    /// Refused: a value there would choose where the request goes.
    Scheme,
    /// `{region}` only, as host name labels (`https://{region}.api.example.com/`:
    /// the operator's own list, never a value an upstream sent); else refused.
    Host,
    Userinfo,
    Path,
    Query,
    Fragment,
}

/// The reading of a template's text so far.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TemplateReading {
    Scheme,
    /// After `scheme:`, and after `scheme:/`.
    Colon,
    Slash,
    Authority,
    Path,
    Query,
    Fragment,
}

impl Template {
    /// The filled-in URL, each value encoded for its part of the URL (see
    /// the module's text). `{region}` in the path keeps its `/` as segment
    /// separators (`repos/{region}/issues` with `rust-lang/rust`); any other
    /// value is one segment. Errors, which never show a value: a
    /// placeholder in the scheme or (but `{region}` as host labels) the
    /// host, and a value that makes a path
    /// segment `.` or `..` (it would move the request to another path).
    pub fn fill_url(&self, fill: &Fill<'_>) -> Result<String, String> {
        self.fill_url_with(fill, fill.input)
    }

    /// [`Template::fill_url`] with an input record's fields for
    /// `{input.NAME}` (each one segment in the path, as `{batch}` is;
    /// `{key}` is treated as `{region}`).
    pub fn fill_url_with(
        &self,
        fill: &Fill<'_>,
        input: Option<&InputFields>,
    ) -> Result<String, String> {
        self.refuse_breaks()?;
        let mut out = String::new();
        let mut in_path: Vec<(Cow<'_, str>, Range<usize>)> = Vec::new();
        for (part, at) in self.parts.iter().zip(self.components()) {
            // (its name, for errors: never its value)
            let (name, value, is_key) = match part {
                Part::Text(t) => {
                    out.push_str(t);
                    continue;
                }
                Part::Slot(p) => (
                    Cow::Borrowed(p.name()),
                    fill.value(*p),
                    matches!(p, Placeholder::Region | Placeholder::Key),
                ),
                Part::Input(n) => (
                    Cow::Owned(format!("input.{n}")),
                    input_text(input, n),
                    false,
                ),
            };
            let start = out.len();
            put_value(&mut out, at, &name, &value, is_key)?;
            if at == Component::Path {
                in_path.push((name, start..out.len()));
            }
        }
        refuse_dot_segments(&out, &in_path)?;
        out.truncate(out.trim_end_matches(['\n', '\r']).len());
        Ok(out)
    }

    /// Whether `{key}` (or `{region}`) stands in the URL's host: the work
    /// key then chooses where the request goes.
    pub fn key_in_host(&self) -> bool {
        (self.parts.iter().zip(self.components())).any(|(part, at)| {
            at == Component::Host
                && matches!(part, Part::Slot(Placeholder::Region | Placeholder::Key))
        })
    }

    /// URL parsers drop tabs and line breaks wherever they are, which
    /// would move the parts the placeholders were put in (but the line
    /// break a YAML block scalar ends with is dropped, not refused).
    fn refuse_breaks(&self) -> Result<(), String> {
        let last = self.parts.len().saturating_sub(1);
        let breaks = self.parts.iter().enumerate().any(|(i, p)| match p {
            Part::Text(t) if i == last => t
                .trim_end_matches(['\n', '\r'])
                .contains(['\t', '\n', '\r']),
            Part::Text(t) => t.contains(['\t', '\n', '\r']),
            Part::Slot(_) | Part::Input(_) => false,
        });
        if breaks {
            return Err("the URL holds a tab or a line break, which URL parsers drop".into());
        }
        Ok(())
    }

    /// The part of the URL each placeholder sits in, in order (one per
    /// part: text is ignored). Placeholders count as ordinary characters:
    /// the parts are where the template's text puts them.
    fn components(&self) -> Vec<Component> {
        let mut state = TemplateReading::Scheme;
        let mut out = Vec::with_capacity(self.parts.len());
        // Placeholders in the authority, with the `@`s seen before each:
        // one with an `@` after it is in the userinfo (the last `@` ends it).
        let (mut authority, mut ats) = (Vec::new(), 0);
        for part in &self.parts {
            let t = match part {
                Part::Text(t) => t,
                Part::Slot(_) | Part::Input(_) => {
                    out.push(match state {
                        TemplateReading::Scheme => Component::Scheme,
                        // (after `http:` and any slashes, the host begins)
                        TemplateReading::Colon
                        | TemplateReading::Slash
                        | TemplateReading::Authority => {
                            // (the slashes before the host are behind it now)
                            state = TemplateReading::Authority;
                            authority.push((out.len(), ats));
                            Component::Host
                        }
                        TemplateReading::Path => Component::Path,
                        TemplateReading::Query => Component::Query,
                        TemplateReading::Fragment => Component::Fragment,
                    });
                    continue;
                }
            };
            out.push(Component::Path); // text: ignored
            for c in t.chars() {
                // As URL parsers read http(s) URLs (the WHATWG rule, the url
                // crate's): after `scheme:`, any run of `/` and `\` (none
                // too) comes before the host.
                if matches!(state, TemplateReading::Colon | TemplateReading::Slash) {
                    if matches!(c, '/' | '\\') {
                        state = TemplateReading::Slash;
                        continue;
                    }
                    state = TemplateReading::Authority;
                }
                state = match (state, c) {
                    (TemplateReading::Scheme, ':') => TemplateReading::Colon,
                    (TemplateReading::Authority, '@') => {
                        ats += 1;
                        TemplateReading::Authority
                    }
                    (TemplateReading::Fragment, _) => TemplateReading::Fragment,
                    (_, '#') => TemplateReading::Fragment,
                    (TemplateReading::Query, _) => TemplateReading::Query,
                    (_, '?') => TemplateReading::Query,
                    (TemplateReading::Authority, '/' | '\\') => TemplateReading::Path,
                    (TemplateReading::Authority, _) => TemplateReading::Authority,
                    (TemplateReading::Scheme, '/') => TemplateReading::Path,
                    (s, _) => s,
                };
            }
        }
        for (i, seen) in authority {
            if seen < ats {
                out[i] = Component::Userinfo;
            }
        }
        out
    }
}

/// Host name labels: letters, digits and `-`, joined by single dots (no
/// empty label, so nothing that ends or widens the host).
fn is_host_labels(value: &str) -> bool {
    !value.is_empty()
        && value
            .split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

/// `.` or `..`, any of its dots percent-encoded (URL parsers read `%2e` as
/// a dot there too).
fn is_dot_segment(segment: &str) -> bool {
    matches!(
        segment.to_ascii_lowercase().replace("%2e", ".").as_str(),
        "." | ".."
    )
}

/// Put `value` (of the placeholder `name`) into `out` as URL component
/// `at` takes it, or say why it cannot stand there.
fn put_value(
    out: &mut String,
    at: Component,
    name: &str,
    value: &str,
    is_key: bool,
) -> Result<(), String> {
    match at {
        // (not in the port: after a `:` of the authority)
        Component::Host
            if is_key
                && is_host_labels(value)
                && !out[out.rfind(['@', '/']).map_or(0, |i| i + 1)..].contains(':') =>
        {
            out.push_str(value);
        }
        Component::Host => {
            return Err(format!(
                "{{{name}}} is in the URL's host, where a value would choose where the request (and the key) goes: only {{region}} or {{key}} may stand there, as host name labels (letters, digits, '-', separated by '.')"
            ));
        }
        Component::Scheme => {
            return Err(format!(
                "{{{name}}} is in the URL's scheme, where a value would choose where the request (and the key) goes: placeholders may stand in the userinfo, path, query and fragment (and {{region}} or {{key}} in the host)"
            ));
        }
        Component::Path if is_key => {
            for (i, segment) in value.split('/').enumerate() {
                if i > 0 {
                    out.push('/');
                }
                out.extend(utf8_percent_encode(segment, COMPONENT));
            }
        }
        _ => out.extend(utf8_percent_encode(value, COMPONENT)),
    }
    Ok(())
}

/// A value in the path must not make a segment `.` or `..` with the text
/// around it: that would move the request to another path.
fn refuse_dot_segments(out: &str, in_path: &[(Cow<'_, str>, Range<usize>)]) -> Result<(), String> {
    for (name, range) in in_path {
        // The segments the value is part of, with the text around it.
        // (`\` separates path segments too, in http(s) URLs)
        let from = out[..range.start].rfind(['/', '\\']).map_or(0, |i| i + 1);
        let to = out[range.end..]
            .find(['/', '\\', '?', '#'])
            .map_or(out.len(), |i| range.end + i);
        if out[from..to].split(['/', '\\']).any(is_dot_segment) {
            return Err(format!(
                "after substitution, {{{name}}} makes a path segment '.' or '..', which would move the request to another path"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    fn fill_url(template: &str, region: &str, secret: &str, batch: &str) -> Result<String, String> {
        let secret = Secret::new(secret.into());
        let fill = Fill {
            region,
            secret: &secret,
            job: "j",
            step: 0,
            page: 0,
            batch,
            input: None,
        };
        Template::parse(template).unwrap().fill_url(&fill)
    }

    #[test]
    fn a_value_stays_in_the_part_of_the_url_it_was_put_in() {
        let url = |t, secret| fill_url(t, "US", secret, "").unwrap();
        // Userinfo: the key cannot end it and name another host.
        assert_eq!(
            url("http://api:{secret}@h:1/echo", "tok@127.0.0.1:9/steal?"),
            "http://api:tok%40127.0.0.1%3A9%2Fsteal%3F@h:1/echo"
        );
        assert_eq!(
            url("http://{secret}:x@h/", "AbC9x/Yz+Q="),
            "http://AbC9x%2FYz%2BQ%3D:x@h/"
        );
        // Path, query, fragment: `/`, `?`, `#`, `&`, `=`, `+`, `%`, `\`.
        assert_eq!(
            url(
                "http://h/k/{secret}/v?a={secret}#{secret}",
                "a/b?c#d&e=f+g%h\\ i"
            ),
            "http://h/k/a%2Fb%3Fc%23d%26e%3Df%2Bg%25h%5C%20i/v?a=a%2Fb%3Fc%23d%26e%3Df%2Bg%25h%5C%20i#a%2Fb%3Fc%23d%26e%3Df%2Bg%25h%5C%20i"
        );
        // An `@` in the path or query is not a userinfo's end.
        assert_eq!(url("http://h/{secret}@x", "a:b"), "http://h/a%3Ab@x");
        assert_eq!(url("http://u@h/?q={secret}", "@"), "http://u@h/?q=%40");
    }

    #[test]
    fn a_region_keeps_its_slashes_in_the_path_and_nothing_else() {
        let region = |r| fill_url("http://h/repos/{region}/issues?r={region}", r, "k", "");
        assert_eq!(
            region("rust-lang/rust").unwrap(),
            "http://h/repos/rust-lang/rust/issues?r=rust-lang%2Frust"
        );
        assert_eq!(
            region("a?admin=1").unwrap(),
            "http://h/repos/a%3Fadmin%3D1/issues?r=a%3Fadmin%3D1"
        );
        assert_eq!(
            region("b#c").unwrap(),
            "http://h/repos/b%23c/issues?r=b%23c"
        );
        assert_eq!(
            region("x.y/..z").unwrap(),
            "http://h/repos/x.y/..z/issues?r=x.y%2F..z"
        );
        // A batch value is one segment: its `/` is encoded.
        assert_eq!(
            fill_url("http://h/v/{batch}", "US", "k", "../../ok#").unwrap(),
            "http://h/v/..%2F..%2Fok%23"
        );
        assert_eq!(
            fill_url(
                "http://h/v/{batch}?id={batch}",
                "US",
                "k",
                "c\\d,p&q=1#frag"
            )
            .unwrap(),
            "http://h/v/c%5Cd%2Cp%26q%3D1%23frag?id=c%5Cd%2Cp%26q%3D1%23frag"
        );
    }

    #[test]
    fn dot_segments_and_placeholders_in_the_scheme_or_host_are_refused() {
        // (but {region} may name host labels: the operator's own list)
        assert_eq!(
            fill_url("https://{region}.api.example.com/x", "euw1", "k", "").unwrap(),
            "https://euw1.api.example.com/x"
        );
        assert_eq!(
            fill_url("http://u:{secret}@{region}/", "eu-1.h", "k@x", "").unwrap(),
            "http://u:k%40x@eu-1.h/"
        );
        for (template, region) in [
            ("https://{region}.api.example.com/", "evil.com/x"),
            ("https://{region}.api.example.com/", "a..b"),
            ("https://{region}.api.example.com/", "evil.com:1@x"),
            ("http://h:{region}/", "80"),
            ("http://{batch}.h/", "US"),
            ("http://{secret}.h/", "US"),
        ] {
            let err = fill_url(template, region, "secret1", "b").unwrap_err();
            assert!(err.contains("host"), "{template} {region}: {err}");
        }
        for (template, region, batch) in [
            ("http://h/repos/{region}/issues", "../../admin", ""),
            ("http://h/repos/{region}/issues", "a/./b", ""),
            ("http://h/repos/{region}", "..", ""),
            ("http://h/repos/.{region}/x", ".", ""),
            ("http://h/v/{batch}", "US", ".."),
            ("http://h/v/{batch}?x", "US", "."),
        ] {
            let err = fill_url(template, region, "k", batch).unwrap_err();
            assert!(
                err.contains("path segment '.' or '..'"),
                "{template}: {err}"
            );
        }
        // Dots that are no dot segment are kept.
        assert!(fill_url("http://h/{region}/x", "...", "k", "").is_ok());
        assert!(fill_url("http://h/{region}?q=..", "v1.2", "k", "").is_ok());
        // However the slashes after `https:` are written, what follows them
        // is the host, as URL parsers read it.
        for template in [
            "https:///{batch}/v1",
            "https://\\{batch}/v1",
            "https:\\\\{batch}/",
            "https:/\\{batch}/",
            "https:x{batch}.example.com/",
        ] {
            let err = fill_url(template, "US", "k", "evil.example").unwrap_err();
            assert!(err.contains("host"), "{template}: {err}");
        }
        // A host placeholder, then the path: the next placeholder is in the
        // path, and an `@` there is no userinfo's.
        assert_eq!(
            fill_url("https://{region}/{batch}", "eu-1", "k", "a/b").unwrap(),
            "https://eu-1/a%2Fb"
        );
        let t = Template::parse("https://{region}/@me/{batch}").unwrap();
        use Component::{Host, Path};
        assert_eq!(t.components(), [Path, Host, Path, Path]);
        // A YAML block scalar's final line break is no tab or line break inside.
        assert_eq!(
            fill_url("https://h/{batch}\n", "US", "k", "b").unwrap(),
            "https://h/b"
        );
        let err = fill_url("https:/\t/h/{batch}", "US", "k", "b").unwrap_err();
        assert!(err.contains("tab or a line break"), "{err}");
        // A backslash separates path segments too.
        let err = fill_url("https://h/a\\{region}\\b", "..", "k", "").unwrap_err();
        assert!(err.contains("path segment '.' or '..'"), "{err}");
        for template in ["{region}://h/", "ht{region}://h/"] {
            let err = fill_url(template, "US", "k", "").unwrap_err();
            assert!(err.contains("scheme"), "{template}: {err}");
        }
    }

    #[test]
    fn key_is_treated_as_region_and_input_fields_as_one_segment() {
        let secret = Secret::new("k".into());
        let fill = |key| Fill {
            region: key,
            secret: &secret,
            job: "j",
            step: 0,
            page: 0,
            batch: "",
            input: None,
        };
        let rec: InputFields = [("id".to_string(), crate::config::JsonText::string("a/b?c#"))]
            .into_iter()
            .collect();
        let url = |t: &str, key| {
            Template::parse(t)
                .unwrap()
                .fill_url_with(&fill(key), Some(&rec))
        };
        // {key}: its `/` kept in the path, host labels allowed, as {region}.
        let err = url("https://{key}.h/", "rust-lang/rust").unwrap_err();
        assert!(err.starts_with("{key} is in the URL's host"), "{err}");
        assert_eq!(
            url("https://{key}.h/repos/{key}?k={key}", "eu-1").unwrap(),
            "https://eu-1.h/repos/eu-1?k=eu-1"
        );
        assert_eq!(
            url("https://h/repos/{key}/x", "rust-lang/rust").unwrap(),
            "https://h/repos/rust-lang/rust/x"
        );
        let err = url("https://h/repos/{key}/x", "../admin").unwrap_err();
        assert!(err.contains("{key} makes a path segment"), "{err}");
        // {input.NAME}: one segment, encoded; never in the host.
        assert_eq!(
            url("https://h/v/{input.id}?q={input.id}", "x").unwrap(),
            "https://h/v/a%2Fb%3Fc%23?q=a%2Fb%3Fc%23"
        );
        let err = url("https://{input.id}.h/", "x").unwrap_err();
        assert!(err.contains("{input.id} is in the URL's host"), "{err}");
        assert!(!err.contains("a/b"), "never the value: {err}");
    }
}
