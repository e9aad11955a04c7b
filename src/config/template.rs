//! Request templates: strings with placeholders (`{region}`, `{secret}`,
//! `{job}`, `{step}`, `{page}`, and `{batch}` in a fan-out step), checked when the configuration loads and
//! filled in for each request. `{{` and `}}` stand for literal braces.
//! A request body is a [`JsonTemplate`]: JSON whose strings are templates,
//! filled value by value and serialized afterwards, so a region or secret
//! with a quote or a backslash stays one JSON string. A request URL is
//! filled by [`Template::fill_url`] (in `template/url.rs`), which encodes
//! each value for its part of the URL.

mod url;

use std::borrow::Cow;

use super::Secret;

/// What a placeholder stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placeholder {
    Region,
    Secret,
    Job,
    Step,
    Page,
    /// A fan-out step's batch of values, joined.
    Batch,
}

impl Placeholder {
    pub const ALL: [(&'static str, Placeholder); 6] = [
        ("region", Self::Region),
        ("secret", Self::Secret),
        ("job", Self::Job),
        ("step", Self::Step),
        ("page", Self::Page),
        ("batch", Self::Batch),
    ];

    /// Its name, as written between braces.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, p)| *p == self)
            .map_or("?", |(n, _)| n)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Slot(Placeholder),
}

/// A parsed template string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

/// The values a template is filled with.
pub struct Fill<'a> {
    pub region: &'a str,
    pub secret: &'a Secret,
    pub job: &'a str,
    pub step: usize,
    /// The page's index in its walk, from 0 (a fan-out step's: its batch's).
    pub page: u32,
    /// A fan-out step's batch of values, joined (empty in other steps).
    pub batch: &'a str,
}

impl Template {
    /// Parse `s`; an unknown or unclosed placeholder is an error.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut chars = s.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    text.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    text.push('}');
                }
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => name.push(c),
                            None => {
                                return Err(format!("unclosed placeholder '{{{name}' in {s:?}"));
                            }
                        }
                    }
                    let slot = Placeholder::ALL
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, p)| *p)
                        .ok_or_else(|| {
                            format!(
                                "unknown placeholder '{{{name}}}' (known: {{region}}, {{secret}}, {{job}}, {{step}}, {{page}}, {{batch}}; write {{{{ for a literal brace)"
                            )
                        })?;
                    if !text.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut text)));
                    }
                    parts.push(Part::Slot(slot));
                }
                '}' => {
                    return Err(format!(
                        "unmatched '}}' in {s:?} (write }}}} for a literal brace)"
                    ));
                }
                c => text.push(c),
            }
        }
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        Ok(Self { parts })
    }

    pub fn uses(&self, p: Placeholder) -> bool {
        self.parts.contains(&Part::Slot(p))
    }

    /// The filled-in string, values as they are (for a request URL:
    /// [`Template::fill_url`]).
    pub fn fill(&self, fill: &Fill<'_>) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Slot(p) => out.push_str(&fill.value(*p)),
            }
        }
        out
    }
}

impl Fill<'_> {
    /// What `p` stands for.
    fn value(&self, p: Placeholder) -> Cow<'_, str> {
        match p {
            Placeholder::Region => self.region.into(),
            Placeholder::Secret => self.secret.expose().into(),
            Placeholder::Job => self.job.into(),
            Placeholder::Step => self.step.to_string().into(),
            Placeholder::Page => self.page.to_string().into(),
            Placeholder::Batch => self.batch.into(),
        }
    }
}

/// A JSON request body whose strings (keys stay as written) are templates.
#[derive(Clone, Debug, PartialEq)]
pub enum JsonTemplate {
    /// null, a boolean or a number: sent as written.
    Plain(serde_json::Value),
    Text(Template),
    List(Vec<JsonTemplate>),
    Object(Vec<(String, JsonTemplate)>),
}

impl JsonTemplate {
    /// From the YAML value of `body:`; the error names the path inside it.
    pub fn parse(v: &serde_yaml::Value) -> Result<Self, (String, String)> {
        use serde_yaml::Value as Y;
        Ok(match v {
            Y::Null => Self::Plain(serde_json::Value::Null),
            Y::Bool(b) => Self::Plain((*b).into()),
            Y::Number(n) => {
                Self::Plain(serde_json::to_value(n).map_err(|e| (String::new(), e.to_string()))?)
            }
            Y::String(s) => Self::Text(Template::parse(s).map_err(|m| (String::new(), m))?),
            Y::Sequence(items) => Self::List(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| Self::parse(v).map_err(|(p, m)| (format!("[{i}]{p}"), m)))
                    .collect::<Result<_, _>>()?,
            ),
            Y::Mapping(m) => {
                let mut fields = Vec::new();
                for (k, v) in m {
                    let key = match k {
                        Y::String(s) => s.clone(),
                        Y::Number(n) => n.to_string(),
                        Y::Bool(b) => b.to_string(),
                        _ => return Err((String::new(), "object keys are strings".into())),
                    };
                    let value = Self::parse(v).map_err(|(p, m)| (format!(".{key}{p}"), m))?;
                    fields.push((key, value));
                }
                Self::Object(fields)
            }
            Y::Tagged(_) => return Err((String::new(), "YAML tags have no JSON form".into())),
        })
    }

    /// Whether any string in it uses `p`.
    pub fn uses(&self, p: Placeholder) -> bool {
        match self {
            Self::Plain(_) => false,
            Self::Text(t) => t.uses(p),
            Self::List(items) => items.iter().any(|i| i.uses(p)),
            Self::Object(fields) => fields.iter().any(|(_, v)| v.uses(p)),
        }
    }

    /// The filled-in JSON text, object keys in the order written (a
    /// `serde_json::Map` would sort them).
    pub fn fill(&self, fill: &Fill<'_>) -> String {
        let mut out = String::new();
        self.write(fill, &mut out);
        out
    }

    fn write(&self, fill: &Fill<'_>, out: &mut String) {
        let json = |v: &serde_json::Value| serde_json::to_string(v).expect("JSON serializes");
        match self {
            Self::Plain(v) => out.push_str(&json(v)),
            Self::Text(t) => out.push_str(&json(&t.fill(fill).into())),
            Self::List(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(fill, out);
                }
                out.push(']');
            }
            Self::Object(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&json(&k.as_str().into()));
                    out.push(':');
                    v.write(fill, out);
                }
                out.push('}');
            }
        }
    }
}

/// Shows the template as written, placeholders and all (never a value).
impl std::fmt::Display for Template {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for part in &self.parts {
            match part {
                Part::Text(t) => f.write_str(&t.replace('{', "{{").replace('}', "}}"))?,
                Part::Slot(p) => write!(f, "{{{}}}", p.name())?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_placeholders_and_literal_braces() {
        let t = Template::parse("{job}/{region}?k={secret}&s={step}&x={{y}}").unwrap();
        let secret = Secret::new("K".into());
        let fill = Fill {
            region: "US",
            secret: &secret,
            job: "j",
            step: 2,
            page: 4,
            batch: "a,b",
        };
        assert_eq!(t.fill(&fill), "j/US?k=K&s=2&x={y}");
        assert_eq!(Template::parse("p{page}").unwrap().fill(&fill), "p4");
        assert_eq!(Template::parse("id={batch}").unwrap().fill(&fill), "id=a,b");
        assert!(t.uses(Placeholder::Secret));
    }

    #[test]
    fn unknown_and_unclosed_placeholders_are_errors() {
        assert!(
            Template::parse("{regoin}")
                .unwrap_err()
                .contains("unknown placeholder '{regoin}'")
        );
        assert!(Template::parse("{region").unwrap_err().contains("unclosed"));
        assert!(Template::parse("a}b").unwrap_err().contains("unmatched"));
    }

    #[test]
    fn json_bodies_are_filled_value_by_value_and_escaped() {
        let yaml: serde_yaml::Value = serde_yaml::from_str(
            "{ model: m, n: 2, ok: true, messages: [ { role: user, content: \"about {region}\" } ], key: \"{secret}\" }",
        )
        .unwrap();
        let t = JsonTemplate::parse(&yaml).unwrap();
        assert!(t.uses(Placeholder::Secret));
        let secret = Secret::new("s\"e\\c".into());
        let fill = Fill {
            region: "a\"b",
            secret: &secret,
            job: "j",
            step: 0,
            page: 0,
            batch: "",
        };
        let text = t.fill(&fill);
        serde_json::from_str::<serde_json::Value>(&text).unwrap();
        assert_eq!(
            text,
            r#"{"model":"m","n":2,"ok":true,"messages":[{"role":"user","content":"about a\"b"}],"key":"s\"e\\c"}"#
        );
        let bad: serde_yaml::Value = serde_yaml::from_str("{ a: [ x, \"{nope}\" ] }").unwrap();
        let (at, why) = JsonTemplate::parse(&bad).unwrap_err();
        assert_eq!(at, ".a[1]");
        assert!(why.contains("unknown placeholder"), "{why}");
    }
}
