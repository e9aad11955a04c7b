//! A request body: JSON whose strings are templates, filled value by value
//! and serialized afterwards, so a region or secret with a quote or a
//! backslash stays one JSON string.

use super::{Fill, InputFields, Placeholder, Template};

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
        self.any(&|t| t.uses(p))
    }

    /// Whether any string in it depends on the work key
    /// ([`Template::uses_key`]).
    pub fn uses_key(&self) -> bool {
        self.any(&Template::uses_key)
    }

    /// The `{input.NAME}` names its strings use, in order.
    pub fn input_names(&self) -> Vec<&str> {
        match self {
            Self::Plain(_) => Vec::new(),
            Self::Text(t) => t.input_names().collect(),
            Self::List(items) => items.iter().flat_map(Self::input_names).collect(),
            Self::Object(fields) => fields.iter().flat_map(|(_, v)| v.input_names()).collect(),
        }
    }

    fn any(&self, f: &dyn Fn(&Template) -> bool) -> bool {
        match self {
            Self::Plain(_) => false,
            Self::Text(t) => f(t),
            Self::List(items) => items.iter().any(|i| i.any(f)),
            Self::Object(fields) => fields.iter().any(|(_, v)| v.any(f)),
        }
    }

    /// The filled-in JSON text, object keys in the order written (a
    /// `serde_json::Map` would sort them).
    pub fn fill(&self, fill: &Fill<'_>) -> String {
        self.fill_with(fill, fill.input)
    }

    /// [`JsonTemplate::fill`] with an input record's fields: a string that
    /// is one `{input.NAME}` and nothing else takes the field's JSON value
    /// (a number stays a number, an object an object); inside a longer
    /// string the field goes in as text ([`Template::fill_with`]).
    pub fn fill_with(&self, fill: &Fill<'_>, input: Option<&InputFields>) -> String {
        let mut out = String::new();
        self.write(fill, input, &mut out);
        out
    }

    fn write(&self, fill: &Fill<'_>, input: Option<&InputFields>, out: &mut String) {
        let json = |v: &serde_json::Value| serde_json::to_string(v).expect("JSON serializes");
        match self {
            Self::Plain(v) => out.push_str(&json(v)),
            Self::Text(t) => match (t.whole_input(), input) {
                (Some(name), Some(fields)) if fields.contains_key(name) => {
                    out.push_str(fields[name].json());
                }
                _ => out.push_str(&json(&t.fill_with(fill, input).into())),
            },
            Self::List(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(fill, input, out);
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
                    v.write(fill, input, out);
                }
                out.push('}');
            }
        }
    }
}
