//! Request templates: strings with placeholders (`{region}`, `{secret}`,
//! `{job}`, `{step}`), checked when the configuration loads and filled in
//! for each request. `{{` and `}}` stand for literal braces.

use super::Secret;

/// What a placeholder stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placeholder {
    Region,
    Secret,
    Job,
    Step,
}

impl Placeholder {
    pub const ALL: [(&'static str, Placeholder); 4] = [
        ("region", Self::Region),
        ("secret", Self::Secret),
        ("job", Self::Job),
        ("step", Self::Step),
    ];
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
                                "unknown placeholder '{{{name}}}' (known: {{region}}, {{secret}}, {{job}}, {{step}}; write {{{{ for a literal brace)"
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

    /// The filled-in string.
    pub fn fill(&self, fill: &Fill<'_>) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Slot(Placeholder::Region) => out.push_str(fill.region),
                Part::Slot(Placeholder::Secret) => out.push_str(fill.secret.expose()),
                Part::Slot(Placeholder::Job) => out.push_str(fill.job),
                Part::Slot(Placeholder::Step) => out.push_str(&fill.step.to_string()),
            }
        }
        out
    }
}

/// Shows the template as written, placeholders and all (never a value).
impl std::fmt::Display for Template {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for part in &self.parts {
            match part {
                Part::Text(t) => f.write_str(&t.replace('{', "{{").replace('}', "}}"))?,
                Part::Slot(p) => {
                    let name = Placeholder::ALL
                        .iter()
                        .find(|(_, q)| q == p)
                        .map_or("?", |(n, _)| n);
                    write!(f, "{{{name}}}")?;
                }
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
        };
        assert_eq!(t.fill(&fill), "j/US?k=K&s=2&x={y}");
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
}
