//! `upstream_reset`: the time of day, in a named time zone, when the
//! upstream's own quota resets (YouTube: midnight Pacific). DST-aware.

use chrono::{DateTime, Days, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamReset {
    pub time: NaiveTime,
    pub tz: Tz,
}

impl UpstreamReset {
    /// Parse `"HH:MM Area/City"` (or `"HH:MM UTC"`).
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut parts = s.split_whitespace();
        let (Some(time), Some(tz), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!(
                "'{s}': expected \"HH:MM Area/City\", e.g. \"00:00 America/Los_Angeles\""
            ));
        };
        let time = NaiveTime::parse_from_str(time, "%H:%M")
            .map_err(|_| format!("'{time}' is not a time of day (HH:MM)"))?;
        let tz: Tz = tz.parse().map_err(|_| {
            format!("'{tz}' is not a time zone of the IANA database (e.g. America/Los_Angeles)")
        })?;
        Ok(Self { time, tz })
    }

    /// The first reset strictly after `now`. On a day when the clock skips
    /// the reset time (spring forward), the reset is at the first instant
    /// after the gap; when it repeats (fall back), at its first occurrence.
    pub fn next_after(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        let today = now.with_timezone(&self.tz).date_naive();
        for days in 0..3 {
            let date = today + Days::new(days);
            let mut local = date.and_time(self.time);
            let mut instant = None;
            // A DST gap is at most a few hours long: step past it.
            for _ in 0..24 {
                if let Some(t) = self.tz.from_local_datetime(&local).earliest() {
                    instant = Some(t.with_timezone(&Utc));
                    break;
                }
                local += chrono::Duration::minutes(15);
            }
            if let Some(t) = instant.filter(|t| *t > now) {
                return t;
            }
        }
        // Unreachable for real zones; a day from now is a safe answer.
        now + chrono::Duration::days(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn next_midnight_pacific_follows_dst() {
        let r = UpstreamReset::parse("00:00 America/Los_Angeles").unwrap();
        // Summer: PDT is UTC-7.
        assert_eq!(
            r.next_after(utc("2026-07-01T12:00:00Z")),
            utc("2026-07-02T07:00:00Z")
        );
        // Winter: PST is UTC-8.
        assert_eq!(
            r.next_after(utc("2026-12-01T12:00:00Z")),
            utc("2026-12-02T08:00:00Z")
        );
        // Exactly at a reset: the next one, a day later.
        assert_eq!(
            r.next_after(utc("2026-12-02T08:00:00Z")),
            utc("2026-12-03T08:00:00Z")
        );
    }

    #[test]
    fn a_reset_inside_the_spring_gap_happens_after_it() {
        // 2026-03-08 02:30 does not exist in Los Angeles (02:00 → 03:00 PDT).
        let r = UpstreamReset::parse("02:30 America/Los_Angeles").unwrap();
        assert_eq!(
            r.next_after(utc("2026-03-08T09:00:00Z")),
            utc("2026-03-08T10:00:00Z")
        );
    }

    #[test]
    fn bad_resets_are_refused() {
        assert!(UpstreamReset::parse("midnight").is_err());
        assert!(UpstreamReset::parse("25:00 UTC").is_err());
        assert!(
            UpstreamReset::parse("00:00 Mars/Olympus")
                .unwrap_err()
                .contains("time zone")
        );
    }
}
