//! The values every section shares: names, regions, durations, sizes.
//! Apart from [`super`] so the sections read as what they check, not how.

use super::*;

impl Validator<'_> {
    /// A size: bytes (`1048576`) or a number with a unit (`500kB`, `32MiB`,
    /// `1GB`), between 1 KiB and 4 GiB.
    pub(super) fn max_body(&self, field: &str, v: &Value) -> Result<u64> {
        let bytes = match v {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => parse_size(s),
            _ => None,
        }
        .ok_or_else(|| {
            self.err(
                field,
                format!(
                    "{} is not a size: write bytes (1048576) or a number with a unit (500kB, 32MiB, 1GB)",
                    serde_yaml::to_string(v).unwrap_or_default().trim()
                ),
            )
        })?;
        if !(1 << 10..=4 << 30).contains(&bytes) {
            return Err(self.err(
                field,
                format!("{bytes} bytes is out of range: 1KiB to 4GiB"),
            ));
        }
        Ok(bytes)
    }

    pub(super) fn name(&self, field: &str, name: &str) -> Result<()> {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if ok {
            Ok(())
        } else {
            Err(self.err(
                field,
                format!(
                    "'{name}' is not a valid name: use 1 to 64 letters, digits, '.', '_' or '-'"
                ),
            ))
        }
    }

    /// A region is any key (a country code, `owner/repo`, an account): not
    /// empty, no control characters, and short enough that its
    /// percent-encoded form fits in a page file's name.
    pub(super) fn region(&self, field: &str, r: &str) -> Result<()> {
        let why = if r.is_empty() {
            "a region must not be empty"
        } else if r.chars().any(crate::logging::is_hidden) {
            "a region must not hold control characters (line breaks, tabs, …) or bidirectional ones (U+202E …)"
        } else if crate::page_name::encode_region(r).len() > 150 {
            "too long: a region takes at most 150 bytes once percent-encoded for file names"
        } else {
            return Ok(());
        };
        Err(self.err(field, why))
    }

    pub(super) fn duration(&self, field: &str, s: &str) -> Result<Duration> {
        humantime::parse_duration(s.trim()).map_err(|e| {
            self.err(
                field,
                format!("'{s}' is not a duration ({e}); write e.g. 90s, 10m, 1h, 24h"),
            )
        })
    }

    /// A window's `per` or a job's `schedule` longer than [`MAX_WINDOW`]
    /// is refused: its microseconds would overflow what the ledger adds
    /// to them (see [`crate::config::bounds`]).
    pub(super) fn at_most_max_window(&self, field: &str, s: &str, d: Duration) -> Result<()> {
        if d > MAX_WINDOW {
            return Err(self.err(
                field,
                format!(
                    "'{}' is longer than the longest window, {} (3650 days, about ten years)",
                    s.trim(),
                    fmt_duration(MAX_WINDOW)
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn positive_duration(&self, field: &str, s: &str) -> Result<Duration> {
        let d = self.duration(field, s)?;
        if d.is_zero() {
            return Err(self.err(field, "must be positive"));
        }
        Ok(d)
    }
}

/// `500kB`, `32 MiB`, `1GB`, `2048`, `2048B`: bytes (k, M, G are powers of
/// 1000; Ki, Mi, Gi of 1024).
pub(super) fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let factor: u64 = match unit.trim() {
        "" | "B" => 1,
        "k" | "kB" | "K" | "KB" => 1000,
        "Ki" | "KiB" => 1 << 10,
        "M" | "MB" => 1_000_000,
        "Mi" | "MiB" => 1 << 20,
        "G" | "GB" => 1_000_000_000,
        "Gi" | "GiB" => 1 << 30,
        _ => return None,
    };
    let n: f64 = number.parse().ok()?;
    let bytes = n * factor as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64 && bytes.fract() == 0.0)
        .then_some(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_take_decimal_and_binary_units() {
        assert_eq!(parse_size("2048"), Some(2048));
        assert_eq!(parse_size("500kB"), Some(500_000));
        assert_eq!(parse_size("32MiB"), Some(32 << 20));
        assert_eq!(parse_size("1.5 MB"), Some(1_500_000));
        assert_eq!(parse_size("1GiB"), Some(1 << 30));
        for bad in ["", "MB", "12 parsecs", "-1MB", "0.5B"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }
}
