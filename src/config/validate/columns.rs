//! A table's typed columns (`columns:` of `output.sqlite`, and of any
//! other sink of rows): each name a column SQL takes, none named like
//! one of the row model's or a database's own, each pointer one value,
//! each type one of [`ColumnKind::ALL`]. Apart from the sink's other
//! fields because every sink of rows reads `columns` alike.

use super::output::sql_name;
use super::*;
use crate::config::{Column, ColumnKind, MAX_COLUMN_NAME, RESERVED_COLUMNS};

impl Validator<'_> {
    /// `raw` (`at`: its field, `….columns`) as the table's typed columns,
    /// in the order the file writes them.
    pub(super) fn columns(&self, at: &str, raw: Option<Value>) -> Result<Vec<Column>> {
        let map = match raw {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::Mapping(map)) => map,
            Some(_) => {
                return Err(self.err(
                    at,
                    "expected a map of columns: { NAME: /pointer, NAME: { from: /pointer, type: TYPE } }",
                ));
            }
        };
        let mut columns: Vec<Column> = Vec::new();
        for (name, spec) in map {
            let Value::String(name) = name else {
                return Err(self.err(
                    at,
                    format!("a column's name is text, not {}", yaml_text(&name)),
                ));
            };
            let field = format!("{at}.{name}");
            self.column_name(&field, &name)?;
            if let Some(c) = columns.iter().find(|c| c.name.eq_ignore_ascii_case(&name)) {
                return Err(self.err(
                    field,
                    format!(
                        "'{name}' is column '{}' again (names are one in any case)",
                        c.name
                    ),
                ));
            }
            let (pointer, kind) = self.column_spec(&field, spec)?;
            columns.push(Column {
                name,
                pointer,
                kind,
            });
        }
        Ok(columns)
    }

    /// A column's name: one SQL takes, not too long, not reserved.
    fn column_name(&self, field: &str, name: &str) -> Result<()> {
        if !sql_name(name) || name.len() > MAX_COLUMN_NAME {
            return Err(self.err(
                field,
                format!(
                    "'{name}': a column's name is letters, digits and _, not starting with a digit, \
                     at most {MAX_COLUMN_NAME} characters"
                ),
            ));
        }
        if RESERVED_COLUMNS
            .iter()
            .any(|r| r.eq_ignore_ascii_case(name))
        {
            return Err(self.err(
                field,
                format!(
                    "'{name}' is a name the table keeps for itself ({}, in any case): name the column otherwise",
                    RESERVED_COLUMNS.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// A column's pointer and type: `/pointer` (text), or `{ from, type }`.
    fn column_spec(&self, field: &str, spec: Value) -> Result<(String, ColumnKind)> {
        let (from, kind, at) = match spec {
            Value::String(p) => (p, ColumnKind::Text, field.to_string()),
            Value::Mapping(m) => {
                let mut from = None;
                let mut kind = ColumnKind::Text;
                for (k, v) in m {
                    match (k.as_str(), v) {
                        (Some("from"), Value::String(p)) => from = Some(p),
                        (Some("type"), Value::String(t)) => {
                            kind = ColumnKind::named(&t).ok_or_else(|| {
                                let all: Vec<&str> =
                                    ColumnKind::ALL.iter().map(|k| k.name()).collect();
                                self.err(
                                    format!("{field}.type"),
                                    format!("'{t}' is no column type: one of {}", all.join(", ")),
                                )
                            })?;
                        }
                        (Some(k @ ("from" | "type")), v) => {
                            return Err(self.err(
                                format!("{field}.{k}"),
                                format!("expected text, not {}", yaml_text(&v)),
                            ));
                        }
                        (_, _) => {
                            return Err(self.err(
                                field,
                                format!(
                                    "unknown field {}: a column is {{ from: /pointer, type: TYPE }}",
                                    yaml_text(&k)
                                ),
                            ));
                        }
                    }
                }
                let from = from.ok_or_else(|| {
                    self.err(
                        format!("{field}.from"),
                        "missing: the pointer inside the row the column's value is at",
                    )
                })?;
                (from, kind, format!("{field}.from"))
            }
            other => {
                return Err(self.err(
                    field,
                    format!(
                        "expected /pointer or {{ from: /pointer, type: TYPE }}, not {}",
                        yaml_text(&other)
                    ),
                ));
            }
        };
        self.pointer(&at, &from)?;
        if from.split('/').any(|p| p == "*") {
            return Err(self.err(
                at,
                format!("'{from}': a column holds one value: no `*` in its pointer"),
            ));
        }
        Ok((from, kind))
    }
}

/// A YAML value as an error shows it, briefly.
fn yaml_text(v: &Value) -> String {
    serde_yaml::to_string(v)
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "a value".into())
}
