//! What a row's field becomes in a typed column (`columns:`), the same for
//! every sink of rows: the JSON value at the column's pointer in the item
//! (its raw text, as the streaming reader hands it) read as the column's
//! [`ColumnKind`], into a [`Typed`] value; a value that does not fit its
//! type is [`Unfit`] (written NULL and counted, never a failed page); a
//! value not there, or `null`, is NULL and not counted.
//!
//! The rules, the README's "Typed columns":
//! - text: a string as its text; a number, `true`/`false`, an object or an
//!   array as its JSON text (numbers as written, no whitespace between
//!   tokens). Only a string that is not text (a lone surrogate escape)
//!   does not fit.
//! - integer: a whole number within 64 bits (`3`, and `3.0` or `1e3`,
//!   which are whole), or a string holding one (`"123"`: ids sent as
//!   strings). `3.5`, `true`, `"abc"`, `1e30` do not fit.
//! - real: a number (a double's nearest), or a string holding a JSON
//!   number (`"12.5"`). A number past a double's range does not fit.
//! - boolean: `true`/`false`, or the strings `"true"`/`"false"`; 1 and 0
//!   are numbers, and do not fit.
//! - timestamp: a string in RFC 3339 / ISO 8601 (`2024-05-01T12:00:00Z`,
//!   an offset `+02:00` or `+0200`, a space for the `T`, fractions of a
//!   second; without an offset it is UTC; a date alone is its midnight
//!   UTC), or a number: seconds since 1970 (UTC), fractions kept to the
//!   microsecond. Years 0000 to 9999 (so milliseconds since 1970, years
//!   past 50000, do not fit rather than land in the wrong millennium).
//!
//! Each sink maps the kinds to its types: SQLite TEXT, INTEGER, REAL, 0/1
//! and ISO 8601 UTC text ([`Typed::timestamp_text`], which its date
//! functions read and which sorts as time does); PostgreSQL text, bigint,
//! double precision, boolean, timestamptz.

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};

use crate::config::{Column, ColumnKind};
use crate::page_scan;

/// A typed column's value, as its kind reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum Typed {
    Text(String),
    Integer(i64),
    Real(f64),
    Boolean(bool),
    Timestamp(DateTime<Utc>),
}

/// A value that does not fit its column's type: written NULL, counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unfit;

/// Values that did not fit their column's type, written NULL: each
/// column that had some and how many, in the order first met (a page's:
/// the configuration's).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UnfitCounts(pub Vec<(String, u64)>);

impl UnfitCounts {
    /// `other`'s counts added, column by column.
    pub fn add(&mut self, other: &UnfitCounts) {
        for (column, n) in &other.0 {
            match self.0.iter_mut().find(|(c, _)| c == column) {
                Some((_, total)) => *total += n,
                None => self.0.push((column.clone(), *n)),
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `stars 2, created 1`.
impl std::fmt::Display for UnfitCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (column, n)) in self.0.iter().enumerate() {
            write!(f, "{}{column} {n}", if i == 0 { "" } else { ", " })?;
        }
        Ok(())
    }
}

impl Typed {
    /// A timestamp as ISO 8601 UTC text of fixed width,
    /// `YYYY-MM-DDTHH:MM:SS.ffffffZ`: sorted as text, it is sorted in time.
    pub fn timestamp_text(t: &DateTime<Utc>) -> String {
        t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
    }
}

/// Column `column`'s value in `item` (one row's JSON text): none for a
/// value not there or `null`.
pub fn value_of(column: &Column, item: &str) -> Result<Option<Typed>, Unfit> {
    typed(column.kind, page_scan::raw_at(item, &column.pointer))
}

/// `raw` (one JSON value's text, if there is one) as `kind` reads it.
pub fn typed(kind: ColumnKind, raw: Option<&str>) -> Result<Option<Typed>, Unfit> {
    let Some(raw) = raw.map(str::trim) else {
        return Ok(None);
    };
    if raw == "null" {
        return Ok(None);
    }
    let string = || serde_json::from_str::<String>(raw).map_err(|_| Unfit);
    let is_string = raw.starts_with('"');
    let value = match kind {
        ColumnKind::Text if is_string => Typed::Text(string()?),
        ColumnKind::Text => Typed::Text(page_scan::compact(raw)),
        ColumnKind::Integer if is_string => Typed::Integer(integer(&string()?)?),
        ColumnKind::Integer => Typed::Integer(integer(raw)?),
        ColumnKind::Real if is_string => Typed::Real(real(&string()?)?),
        ColumnKind::Real => Typed::Real(real(raw)?),
        ColumnKind::Boolean => {
            let text = if is_string {
                string()?
            } else {
                raw.to_string()
            };
            match text.as_str() {
                "true" => Typed::Boolean(true),
                "false" => Typed::Boolean(false),
                _ => return Err(Unfit),
            }
        }
        ColumnKind::Timestamp if is_string => Typed::Timestamp(timestamp(&string()?)?),
        ColumnKind::Timestamp => Typed::Timestamp(epoch_seconds(real(raw)?)?),
    };
    Ok(Some(value))
}

/// A JSON number's text (`text` is only that: no sign but `-`, no
/// whitespace) as a double.
fn real(text: &str) -> Result<f64, Unfit> {
    let number = text.starts_with(['-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'])
        && text == text.trim();
    if !number {
        return Err(Unfit);
    }
    // (serde_json reads the JSON grammar only: no `inf`, `NaN`, `.5`, `1.`)
    match serde_json::from_str::<f64>(text) {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(Unfit),
    }
}

/// A JSON number's text as a whole number of 64 bits: digits as they are,
/// else a number whose value is whole and exact in a double.
fn integer(text: &str) -> Result<i64, Unfit> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse::<i64>().map_err(|_| Unfit);
    }
    let v = real(text)?;
    // (2^53: past it a double is no longer every whole number)
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if v.fract() == 0.0 && v.abs() <= EXACT {
        Ok(v as i64)
    } else {
        Err(Unfit)
    }
}

/// The years a timestamp may fall in: four digits, as its text has.
fn in_years(t: DateTime<Utc>) -> Result<DateTime<Utc>, Unfit> {
    use chrono::Datelike;
    if (0..=9999).contains(&t.year()) {
        Ok(t)
    } else {
        Err(Unfit)
    }
}

/// Seconds since 1970-01-01T00:00:00Z, to the microsecond.
fn epoch_seconds(s: f64) -> Result<DateTime<Utc>, Unfit> {
    let micros = (s * 1e6).round();
    // (past ±2^62 µs, far outside the years a timestamp may have)
    if micros.abs() > 4.6e18 {
        return Err(Unfit);
    }
    in_years(DateTime::from_timestamp_micros(micros as i64).ok_or(Unfit)?)
}

/// An RFC 3339 / ISO 8601 time: with an offset (`Z`, `+02:00`, `+0200`),
/// without one (UTC), or a date alone (its midnight UTC); `T` or a space
/// between date and time. Cut to the microsecond.
fn timestamp(text: &str) -> Result<DateTime<Utc>, Unfit> {
    let with_offset = ["%Y-%m-%dT%H:%M:%S%.f%:z", "%Y-%m-%dT%H:%M:%S%.f%z"];
    let without = ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M"];
    let text = text.replacen(' ', "T", 1);
    let t = if let Some(utc) = text.strip_suffix(['Z', 'z']) {
        (without.iter())
            .find_map(|f| NaiveDateTime::parse_from_str(utc, f).ok())
            .map(|t| t.and_utc())
    } else {
        (with_offset.iter())
            .find_map(|f| DateTime::parse_from_str(&text, f).ok())
            .map(|t| t.with_timezone(&Utc))
            .or_else(|| {
                (without.iter())
                    .find_map(|f| NaiveDateTime::parse_from_str(&text, f).ok())
                    .map(|t| t.and_utc())
            })
            .or_else(|| {
                NaiveDate::parse_from_str(&text, "%Y-%m-%d")
                    .ok()
                    .and_then(|d| d.and_hms_opt(0, 0, 0))
                    .map(|t| t.and_utc())
            })
    };
    let t = t.ok_or(Unfit)?;
    let cut = DateTime::from_timestamp_micros(t.timestamp_micros()).ok_or(Unfit)?;
    in_years(cut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ColumnKind::*;

    fn of(kind: ColumnKind, raw: &str) -> Result<Option<Typed>, Unfit> {
        typed(kind, Some(raw))
    }

    fn text(t: &str) -> Result<Option<Typed>, Unfit> {
        Ok(Some(Typed::Text(t.into())))
    }

    fn at(t: &str) -> String {
        match of(Timestamp, t) {
            Ok(Some(Typed::Timestamp(t))) => Typed::timestamp_text(&t),
            other => panic!("{t}: {other:?}"),
        }
    }

    #[test]
    fn missing_and_null_are_null_of_every_kind_and_not_unfit() {
        for kind in ColumnKind::ALL {
            assert_eq!(typed(kind, None), Ok(None), "{kind:?}");
            assert_eq!(of(kind, "null"), Ok(None), "{kind:?}");
        }
        let column = Column {
            name: "stars".into(),
            pointer: "/a/b".into(),
            kind: Integer,
        };
        assert_eq!(
            value_of(&column, r#"{"a":{"b":7}}"#),
            Ok(Some(Typed::Integer(7)))
        );
        assert_eq!(value_of(&column, r#"{"a":{}}"#), Ok(None));
        assert_eq!(value_of(&column, r#"{"a":1}"#), Ok(None));
    }

    #[test]
    fn text_takes_strings_as_text_and_the_rest_as_json() {
        assert_eq!(of(Text, r#""a \"b\" \u00e9""#), text("a \"b\" é"));
        assert_eq!(of(Text, "1.50"), text("1.50"));
        assert_eq!(
            of(Text, "123456789012345678901234"),
            text("123456789012345678901234")
        );
        assert_eq!(of(Text, "true"), text("true"));
        assert_eq!(of(Text, r#"{ "a": [1, 2] }"#), text(r#"{"a":[1,2]}"#));
        assert_eq!(of(Text, r#""\ud800""#), Err(Unfit));
    }

    #[test]
    fn integer_takes_whole_numbers_and_strings_of_them() {
        let int = |v: i64| Ok(Some(Typed::Integer(v)));
        assert_eq!(of(Integer, "42"), int(42));
        assert_eq!(of(Integer, "-7"), int(-7));
        assert_eq!(of(Integer, "3.0"), int(3));
        assert_eq!(of(Integer, "1e3"), int(1000));
        assert_eq!(of(Integer, r#""123""#), int(123));
        assert_eq!(of(Integer, "9223372036854775807"), int(i64::MAX));
        for unfit in [
            "3.5",
            "9223372036854775808",
            "1e30",
            "true",
            r#""abc""#,
            r#""12 ""#,
            r#""""#,
            "[1]",
            "{}",
        ] {
            assert_eq!(of(Integer, unfit), Err(Unfit), "{unfit}");
        }
    }

    #[test]
    fn real_takes_numbers_and_strings_of_them() {
        let real = |v: f64| Ok(Some(Typed::Real(v)));
        assert_eq!(of(Real, "1.5"), real(1.5));
        assert_eq!(of(Real, "-2"), real(-2.0));
        assert_eq!(of(Real, "1E3"), real(1000.0));
        assert_eq!(of(Real, r#""12.5""#), real(12.5));
        for unfit in ["1e400", r#""NaN""#, r#""inf""#, r#"".5""#, "false", "[]"] {
            assert_eq!(of(Real, unfit), Err(Unfit), "{unfit}");
        }
    }

    #[test]
    fn boolean_takes_true_and_false_only() {
        assert_eq!(of(Boolean, "true"), Ok(Some(Typed::Boolean(true))));
        assert_eq!(of(Boolean, r#""false""#), Ok(Some(Typed::Boolean(false))));
        for unfit in ["1", "0", r#""yes""#, r#""TRUE""#, "{}"] {
            assert_eq!(of(Boolean, unfit), Err(Unfit), "{unfit}");
        }
    }

    #[test]
    fn timestamps_are_utc_text_of_fixed_width() {
        let want = "2024-05-01T12:00:00.000000Z";
        assert_eq!(at(r#""2024-05-01T12:00:00Z""#), want);
        assert_eq!(at(r#""2024-05-01T14:00:00+02:00""#), want);
        assert_eq!(at(r#""2024-05-01T14:00:00+0200""#), want);
        assert_eq!(at(r#""2024-05-01 12:00:00""#), want);
        assert_eq!(at(r#""2024-05-01T12:00""#), want);
        assert_eq!(
            at(r#""2024-05-01T12:00:00.1234567Z""#),
            "2024-05-01T12:00:00.123456Z"
        );
        assert_eq!(at(r#""2024-05-01""#), "2024-05-01T00:00:00.000000Z");
        assert_eq!(at("1714564800"), want);
        assert_eq!(at("1714564800.25"), "2024-05-01T12:00:00.250000Z");
        assert_eq!(at("-1"), "1969-12-31T23:59:59.000000Z");
        for unfit in [
            r#""yesterday""#,
            r#""2024-13-01""#,
            r#""2024-05-01T25:00:00Z""#,
            r#""1714564800""#,
            "1714564800000",
            "true",
            "{}",
        ] {
            assert_eq!(of(Timestamp, unfit), Err(Unfit), "{unfit}");
        }
        // (sorted as text, sorted in time)
        let mut texts = vec![at("1e9"), at("-1e9"), at("1714564800"), at("0")];
        let sorted = texts.clone();
        texts.sort();
        assert_eq!(texts[0], sorted[1]);
        assert_eq!(texts[3], sorted[2]);
    }
}
