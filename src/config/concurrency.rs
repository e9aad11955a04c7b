//! A job's `concurrency` key: how many of a run's requests may be in flight
//! at once: one small rule with its own bounds, in its own room.

use serde_yaml::Value;

/// The most requests of one run in flight at once.
pub const MAX: u64 = 64;

/// A job's `concurrency` (`at` is the job's field path): a whole number
/// from 1 to [`MAX`], 1 when left out. The error is the field and why.
pub(super) fn concurrency(at: &str, raw: Option<&Value>) -> Result<usize, (String, String)> {
    let Some(value) = raw else { return Ok(1) };
    match value.as_u64() {
        Some(n @ 1..=MAX) => Ok(n as usize),
        _ => Err((
            format!("{at}.concurrency"),
            format!(
                "{}: expected a whole number of requests in flight at once, from 1 to {MAX}",
                shown(value)
            ),
        )),
    }
}

fn shown(value: &Value) -> String {
    serde_yaml::to_string(value)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "this value".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(yaml: &str) -> Result<usize, (String, String)> {
        let v: Value = serde_yaml::from_str(yaml).unwrap();
        concurrency("jobs.j", Some(&v))
    }

    #[test]
    fn whole_numbers_from_1_to_64_and_1_when_left_out() {
        assert_eq!(concurrency("jobs.j", None), Ok(1));
        assert_eq!(of("1"), Ok(1));
        assert_eq!(of("64"), Ok(64));
        for bad in ["0", "65", "-1", "1.5", "four", "[2]"] {
            let (field, message) = of(bad).unwrap_err();
            assert_eq!(field, "jobs.j.concurrency");
            assert!(message.contains("from 1 to 64"), "{bad}: {message}");
        }
    }
}
