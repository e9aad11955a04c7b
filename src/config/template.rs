//! Request templates: strings with placeholders (`{region}`, `{key}`,
//! `{secret}`, `{job}`, `{step}`, `{page}`, `{batch}` in a fan-out step and
//! `{input.NAME}` in a job with `inputs`), checked when the configuration
//! loads and filled in for each request. `{{` and `}}` stand for literal braces.
//! A request body is a [`JsonTemplate`] (in `template/json.rs`): JSON whose
//! strings are templates, filled value by value and serialized afterwards,
//! so a region or secret with a quote or a backslash stays one JSON string.
//! A request URL is filled by [`Template::fill_url`] (in `template/url.rs`),
//! which encodes each value for its part of the URL.

mod json;
mod url;

use std::borrow::Cow;

pub use self::json::JsonTemplate;
use super::Secret;

/// What a placeholder stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placeholder {
    Region,
    /// The current work key: a region, or an input's key. Treated as
    /// `{region}` is, URL rules included.
    Key,
    Secret,
    Job,
    Step,
    Page,
    /// A fan-out step's batch of values, joined.
    Batch,
}

impl Placeholder {
    pub const ALL: [(&'static str, Placeholder); 7] = [
        ("region", Self::Region),
        ("key", Self::Key),
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
    /// `{input.NAME}`: a field of the current input record, by its name as
    /// written (a dotted path, or a CSV column).
    Input(String),
}

/// The fields of an input record that the templates use, by their name as
/// written after `input.` (see [`crate::inputs`]).
/// Each a field's JSON text as the file writes it (a number exact).
pub type InputFields = std::collections::BTreeMap<String, super::JsonText>;

/// The text a field is put in a string as: a string as it is, any other
/// value as its JSON (`7`, `true`, `null`, `{"a":1}`).
fn field_text(v: &super::JsonText) -> Cow<'_, str> {
    v.text()
}

/// A parsed template string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

/// The values a template is filled with.
pub struct Fill<'a> {
    /// The current work key: a region, or an input's key (`{region}` and
    /// `{key}` both stand for it).
    pub region: &'a str,
    pub secret: &'a Secret,
    pub job: &'a str,
    pub step: usize,
    /// The page's index in its walk, from 0 (a fan-out step's: its batch's).
    pub page: u32,
    /// A fan-out step's batch of values, joined (empty in other steps).
    pub batch: &'a str,
    /// The current input's fields, for `{input.NAME}` (a job of inputs).
    pub input: Option<&'a InputFields>,
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
                    let slot = slot(&name)?;
                    if !text.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut text)));
                    }
                    parts.push(slot);
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

    /// Whether it depends on the work key: `{region}`, `{key}` or an
    /// `{input.NAME}`.
    pub fn uses_key(&self) -> bool {
        self.parts.iter().any(|p| {
            matches!(
                p,
                Part::Slot(Placeholder::Region | Placeholder::Key) | Part::Input(_)
            )
        })
    }

    /// The `{input.NAME}` names it uses, in order (repeats kept).
    pub fn input_names(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Input(name) => Some(name.as_str()),
            _ => None,
        })
    }

    /// The filled-in string, values as they are (for a request URL:
    /// [`Template::fill_url`]).
    pub fn fill(&self, fill: &Fill<'_>) -> String {
        self.fill_with(fill, fill.input)
    }

    /// [`Template::fill`] with an input record's fields for `{input.NAME}`
    /// (a field not there, or no record: empty; validation and the reader
    /// see that neither happens).
    pub fn fill_with(&self, fill: &Fill<'_>, input: Option<&InputFields>) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Slot(p) => out.push_str(&fill.value(*p)),
                Part::Input(name) => out.push_str(&input_text(input, name)),
            }
        }
        out
    }

    /// The one `{input.NAME}` the template is made of, nothing around it:
    /// in a JSON body, such a string takes the field's JSON value.
    fn whole_input(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [Part::Input(name)] => Some(name),
            _ => None,
        }
    }
}

/// A placeholder's name (between the braces) read.
fn slot(name: &str) -> Result<Part, String> {
    if let Some(field) = name.strip_prefix("input.") {
        let ok = !field.is_empty() && field.split('.').all(|s| !s.is_empty());
        return if ok {
            Ok(Part::Input(field.to_string()))
        } else {
            Err(format!(
                "'{{{name}}}': write {{input.NAME}}, NAME a field of the input record (a.b for a nested one, or a CSV column)"
            ))
        };
    }
    Placeholder::ALL
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| Part::Slot(*p))
        .ok_or_else(|| {
            format!(
                "unknown placeholder '{{{name}}}' (known: {{region}}, {{key}}, {{secret}}, {{job}}, {{step}}, {{page}}, {{batch}}, {{input.NAME}}; write {{{{ for a literal brace)"
            )
        })
}

/// A field's text, for `{input.NAME}` inside a string.
fn input_text<'a>(input: Option<&'a InputFields>, name: &str) -> Cow<'a, str> {
    input
        .and_then(|f| f.get(name))
        .map_or(Cow::Borrowed(""), field_text)
}

impl Fill<'_> {
    /// What `p` stands for.
    fn value(&self, p: Placeholder) -> Cow<'_, str> {
        match p {
            Placeholder::Region | Placeholder::Key => self.region.into(),
            Placeholder::Secret => self.secret.expose().into(),
            Placeholder::Job => self.job.into(),
            Placeholder::Step => self.step.to_string().into(),
            Placeholder::Page => self.page.to_string().into(),
            Placeholder::Batch => self.batch.into(),
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
                Part::Input(name) => write!(f, "{{input.{name}}}")?,
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
            input: None,
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
            input: None,
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

    fn record() -> InputFields {
        let v: serde_json::Value = serde_json::json!({
            "prompt": "say \"hi\"",
            "n": 7,
            "meta.tags": ["a", "b"],
            "obj": {"k": [1, 2]},
            "none": null,
        });
        (v.as_object().unwrap().iter())
            .map(|(k, v)| (k.clone(), super::super::JsonText::of_raw(&v.to_string())))
            .collect()
    }

    #[test]
    fn key_and_input_fields_are_filled_as_text() {
        let t = Template::parse("{key}/{input.prompt}:{input.n}:{input.obj}:{input.none}").unwrap();
        assert!(t.uses(Placeholder::Key) && t.uses_key());
        assert_eq!(
            t.input_names().collect::<Vec<_>>(),
            ["prompt", "n", "obj", "none"]
        );
        let secret = Secret::new("K".into());
        let fill = Fill {
            region: "id-1",
            secret: &secret,
            job: "j",
            step: 0,
            page: 0,
            batch: "",
            input: None,
        };
        let rec = record();
        assert_eq!(
            t.fill_with(&fill, Some(&rec)),
            r#"id-1/say "hi":7:{"k":[1,2]}:null"#
        );
        // Shown as written, never a value.
        assert_eq!(
            t.to_string(),
            "{key}/{input.prompt}:{input.n}:{input.obj}:{input.none}"
        );
        assert!(!Template::parse("{job}").unwrap().uses_key());
        for bad in ["{input.}", "{input}", "{input.a..b}", "{input..a}"] {
            let err = Template::parse(bad).unwrap_err();
            assert!(err.contains("{input.NAME}"), "{bad}: {err}");
        }
        assert!(Template::parse("{input.a.b}").is_ok());
    }

    #[test]
    fn a_whole_string_field_in_a_body_is_its_json_value() {
        let yaml: serde_yaml::Value = serde_yaml::from_str(
            r#"{ n: "{input.n}", o: "{input.obj}", z: "{input.none}", s: "{input.prompt}", in: "n={input.n} {input.obj}", k: "{key}", l: ["{input.meta.tags}"] }"#,
        )
        .unwrap();
        let t = JsonTemplate::parse(&yaml).unwrap();
        assert!(t.uses_key() && t.uses(Placeholder::Key));
        let secret = Secret::new("K".into());
        let fill = Fill {
            region: "id\"1",
            secret: &secret,
            job: "j",
            step: 0,
            page: 0,
            batch: "",
            input: None,
        };
        let rec = record();
        let text = t.fill_with(&fill, Some(&rec));
        assert_eq!(
            text,
            r#"{"n":7,"o":{"k":[1,2]},"z":null,"s":"say \"hi\"","in":"n=7 {\"k\":[1,2]}","k":"id\"1","l":[["a","b"]]}"#
        );
        serde_json::from_str::<serde_json::Value>(&text).unwrap();
        // A number past 64 bits goes as the file writes it, whole or in text.
        let mut rec = rec;
        let big = "123456789012345678901234";
        rec.insert("n".into(), super::super::JsonText::of_raw(big));
        let text = t.fill_with(&fill, Some(&rec));
        assert!(
            text.starts_with(&format!(r#"{{"n":{big},"#)) && text.contains(&format!("n={big} ")),
            "{text}"
        );
    }
}
