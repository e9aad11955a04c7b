//! An incremental step's value: the largest its walk saw at its pointer,
//! kept per key and sent as its parameter. A value is kept only if it can
//! be sent back (at most [`MAX_SINCE`] bytes, of the key's one [`ValueKind`]).

use std::cmp::Ordering;

use tracing::warn;

use super::super::Position;
use super::Conditional;
use super::records::since_field;
use crate::config::Step;

impl Conditional<'_> {
    /// The value an incremental step's requests of `key` carry: the
    /// largest its last complete walk saw, or the step's `initial`.
    pub(in crate::runner::job_run) fn since(
        &self,
        step: &Step,
        key: &str,
        at_step: usize,
    ) -> Option<(String, String)> {
        let inc = step.incremental.as_ref()?;
        let kept = self.kept.borrow();
        let value = kept
            .since
            .get(&since_field(key, at_step))
            .map(|s| s.value.clone())
            .or_else(|| inc.initial.clone())?;
        Some((inc.param.clone(), value))
    }

    /// A page of an incremental step written: the largest value at its
    /// pointer, kept for the end of the walk. A value is kept only if it
    /// can be sent back: at most [`MAX_SINCE`] bytes, of the key's one kind
    /// (a time, a number or text: the kind of the value kept first, else
    /// of `initial`, else of the first value seen); others are ignored
    /// with a warning, so one odd value never pins the parameter for good.
    pub(in crate::runner::job_run) fn saw(
        &self,
        step: &Step,
        at: &Position<'_>,
        page: u32,
        body: &[u8],
    ) {
        let Some(inc) = &step.incremental else { return };
        let Ok((values, _)) = crate::page_scan::values(body, &inc.from) else {
            return;
        };
        let masker = crate::config::Masker::new(&[self.secret]);
        let field = since_field(at.key, at.step);
        let mut kind = {
            let kept = self.kept.borrow();
            kept.since
                .get(&field)
                .map(|s| s.value.as_str())
                .or(kept.seen.get(&field).map(String::as_str))
                .or(inc.initial.as_deref())
                .map(ValueKind::of)
        };
        // (no kind kept yet: the page's best, a time over a number over
        // text, so that one "N/A" first among times does not set it)
        if kind.is_none() {
            kind = values
                .iter()
                .filter(|v| !v.is_empty() && v.len() <= MAX_SINCE)
                .map(|v| ValueKind::of(v))
                .min_by_key(|k| *k as u8);
        }
        let (mut long, mut other) = (0u64, Vec::new());
        let mut largest: Option<String> = None;
        for v in values {
            if v.is_empty() || masker.find(v.as_bytes(), 0).is_some() {
                continue;
            }
            if v.len() > MAX_SINCE {
                long += 1;
                continue;
            }
            let of = ValueKind::of(&v);
            if of != *kind.get_or_insert(of) {
                other.push(v);
                continue;
            }
            if largest
                .as_ref()
                .is_none_or(|l| compare(&v, l) == Ordering::Greater)
            {
                largest = Some(v);
            }
        }
        let here = at.describe(page);
        if long > 0 {
            warn!(
                job = self.job.name,
                "{here}: {long} value(s) at the incremental pointer {} are longer than {MAX_SINCE} bytes: ignored, never kept (a request cannot carry them)",
                inc.from
            );
        }
        if let (Some(first), Some(k)) = (other.first(), kind) {
            warn!(
                job = self.job.name,
                "{here}: {} value(s) at the incremental pointer {} are not {}, the kind of the key's values (\"{}\", say): ignored",
                other.len(),
                inc.from,
                k.name(),
                crate::logging::cut(&crate::logging::printable(first), 40)
            );
        }
        let Some(largest) = largest else { return };
        let mut kept = self.kept.borrow_mut();
        let seen = kept.seen.entry(field).or_default();
        if seen.is_empty() || compare(&largest, seen) == Ordering::Greater {
            *seen = largest;
        }
    }

    /// The largest value the walk of `at`'s key and step has seen so far,
    /// kept with its cursor: a walk resumed by a later run starts from it,
    /// so the value the walk completes with is the walk's largest, not
    /// only its last run's.
    pub(in crate::runner::job_run) fn walk_largest(&self, at: &Position<'_>) -> Option<String> {
        self.kept
            .borrow()
            .seen
            .get(&since_field(at.key, at.step))
            .cloned()
    }

    /// A walk of `at`'s key and step starts: at its first page, nothing
    /// seen (`None`); resumed, what its cursor kept.
    pub(in crate::runner::job_run) fn walk_starts(
        &self,
        at: &Position<'_>,
        largest: Option<String>,
    ) {
        let field = since_field(at.key, at.step);
        let mut kept = self.kept.borrow_mut();
        match largest.filter(|v| v.len() <= MAX_SINCE) {
            Some(v) => kept.seen.insert(field, v),
            None => kept.seen.remove(&field),
        };
    }
}

/// The longest incremental value kept, in bytes: a longer one (a page
/// with a 70,000-character `updated_at`) would make every later request
/// too long to send.
pub(in crate::runner::job_run) const MAX_SINCE: usize = 256;

/// The kind of an incremental value: one kind per key, as [`compare`]
/// orders values of one kind only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ValueKind {
    Time,
    Number,
    Text,
}

impl ValueKind {
    fn of(v: &str) -> Self {
        if chrono::DateTime::parse_from_rfc3339(v).is_ok() {
            ValueKind::Time
        } else if v.parse::<i128>().is_ok() || v.parse::<f64>().is_ok_and(f64::is_finite) {
            ValueKind::Number
        } else {
            ValueKind::Text
        }
    }

    fn name(self) -> &'static str {
        match self {
            ValueKind::Time => "a time",
            ValueKind::Number => "a number",
            ValueKind::Text => "text",
        }
    }
}

/// Two values at an incremental pointer: as times when both are RFC 3339,
/// as numbers when both are numbers, else as text.
pub(super) fn compare(a: &str, b: &str) -> Ordering {
    use chrono::DateTime;
    if let (Ok(x), Ok(y)) = (
        DateTime::parse_from_rfc3339(a),
        DateTime::parse_from_rfc3339(b),
    ) {
        return x.cmp(&y);
    }
    if let (Ok(x), Ok(y)) = (a.parse::<i128>(), b.parse::<i128>()) {
        return x.cmp(&y);
    }
    if let (Ok(x), Ok(y)) = (a.parse::<f64>(), b.parse::<f64>())
        && x.is_finite()
        && y.is_finite()
    {
        return x.partial_cmp(&y).unwrap_or(Ordering::Equal);
    }
    a.cmp(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_compare_as_times_numbers_or_text() {
        // (as text "2024-05-01T10:00:00+02:00" > "2024-05-01T09:30:00Z"; as times it is earlier)
        assert_eq!(
            compare("2024-05-01T10:00:00+02:00", "2024-05-01T09:30:00Z"),
            Ordering::Less
        );
        assert_eq!(compare("9", "10"), Ordering::Less);
        assert_eq!(compare("2.5", "10"), Ordering::Less);
        assert_eq!(compare("b", "a"), Ordering::Greater);
    }

    #[test]
    fn values_have_one_kind_each() {
        assert_eq!(ValueKind::of("2024-03-02T12:00:00-05:00"), ValueKind::Time);
        assert_eq!(ValueKind::of("12"), ValueKind::Number);
        assert_eq!(ValueKind::of("1.5e3"), ValueKind::Number);
        assert_eq!(ValueKind::of("N/A"), ValueKind::Text);
        assert_eq!(ValueKind::of("inf"), ValueKind::Text);
    }
}
