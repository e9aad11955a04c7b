//! How times and durations are shown: durations the way the configuration
//! writes them, local times the way an operator reads them, and RFC 3339 for
//! JSON. Store times are microseconds since the epoch ([`Micros`]).

use std::time::Duration;

use chrono::{DateTime, Local, TimeZone};

use crate::ledger::Micros;

/// A duration the way the configuration writes them: `24h`, `2h24m`,
/// `90s` → `1m30s`; rounded up to the second.
pub fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    if s == 0 {
        return "0s".into();
    }
    hms(s, 0)
}

/// A wait about to be slept: [`fmt_duration`] from a second up; under a
/// second, in milliseconds rounded up (`100ms`, `10ms`), never "1s".
pub fn fmt_wait(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_nanos().div_ceil(1_000_000))
    } else {
        fmt_duration(d)
    }
}

/// Below this, a wait until units free up is shown to the tenth of a
/// second, and its instant too ([`fmt_retry`], [`clock_time`]).
pub const PRECISE_BELOW: Duration = Duration::from_secs(10);

/// A wait until units free up (a refusal's): [`fmt_duration`] from
/// [`PRECISE_BELOW`] up; under it, to the tenth of a second, rounded up
/// (`0.4s`, `2.5s`, `3s`): "in 1s (at 19:48:55)" when 0.4 s are left and
/// the clock reads 19:48:55.55 reads as a clock gone wrong.
pub fn fmt_retry(d: Duration) -> String {
    if d >= PRECISE_BELOW {
        return fmt_duration(d);
    }
    let tenths = d.as_nanos().div_ceil(100_000_000);
    match (tenths / 10, tenths % 10) {
        (0, 0) => "0s".into(),
        (s, 0) => format!("{s}s"),
        (s, t) => format!("{s}.{t}s"),
    }
}

/// A local time of day, `HH:MM:SS`, with its tenth of a second when
/// `precise` (`19:48:55.9`, cut, not rounded: never a later second).
pub fn clock_time<Tz: TimeZone>(t: &DateTime<Tz>, precise: bool) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let secs = t.format("%H:%M:%S").to_string();
    if precise {
        format!("{secs}.{}", t.timestamp_subsec_millis() / 100)
    } else {
        secs
    }
}

/// A configured duration (a window's `per`) the way the configuration
/// writes it, exactly to the millisecond (rounded up below it): `1h`,
/// `1s500ms`, `250ms`. Never rounded to a different window.
pub fn fmt_window(d: Duration) -> String {
    let ms = d.as_nanos().div_ceil(1_000_000);
    let (s, ms) = (ms / 1000, ms % 1000);
    if s == 0 && ms == 0 {
        return "0s".into();
    }
    hms(u64::try_from(s).unwrap_or(u64::MAX), ms as u32)
}

fn hms(s: u64, ms: u32) -> String {
    let (h, m, s) = (s / 3600, s % 3600 / 60, s % 60);
    let mut out = String::new();
    for (n, unit) in [(h, "h"), (m, "m"), (s, "s"), (u64::from(ms), "ms")] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

/// `us` as local time: `HH:MM:SS` when on the same day as `now`, else with the date.
pub fn local_time(us: Micros, now: Micros) -> String {
    let (Some(t), Some(n)) = (to_local(us), to_local(now)) else {
        return us.to_string();
    };
    if t.date_naive() == n.date_naive() {
        t.format("%H:%M:%S").to_string()
    } else {
        t.format("%b %d %H:%M").to_string()
    }
}

/// `us` as a full local date and time with its zone.
pub fn local_datetime(us: Micros) -> String {
    to_local(us)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S %Z").to_string())
        .unwrap_or_else(|| us.to_string())
}

fn to_local(us: Micros) -> Option<DateTime<Local>> {
    DateTime::from_timestamp_micros(us).map(|t| Local.from_utc_datetime(&t.naive_utc()))
}

/// "in 2h10m (11:25:00)", or "now".
pub fn when(us: Micros, now: Micros) -> String {
    if us <= now {
        return "now".into();
    }
    let d = Duration::from_micros((us - now) as u64);
    format!("in {} ({})", fmt_duration(d), local_time(us, now))
}

/// `us` as RFC 3339 in UTC, to the second.
pub fn rfc3339(us: Micros) -> String {
    DateTime::from_timestamp_micros(us)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

/// An RFC 3339 time as [`Micros`] (0 when it does not parse).
pub fn from_rfc3339(rfc: &str) -> Micros {
    DateTime::parse_from_rfc3339(rfc).map_or(0, |t| t.timestamp_micros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_wait_for_units_is_shown_to_the_tenth_of_a_second() {
        let ms = Duration::from_millis;
        assert_eq!(fmt_retry(ms(400)), "0.4s");
        assert_eq!(fmt_retry(ms(450)), "0.5s");
        assert_eq!(fmt_retry(ms(2_000)), "2s");
        assert_eq!(fmt_retry(ms(9_910)), "10s");
        assert_eq!(fmt_retry(Duration::from_micros(1)), "0.1s");
        assert_eq!(fmt_retry(Duration::ZERO), "0s");
        assert_eq!(fmt_retry(ms(10_400)), "11s");
        let t = DateTime::from_timestamp_micros(71_335_950_000).unwrap(); // 19:48:55.95 UTC
        assert_eq!(clock_time(&t, true), "19:48:55.9");
        assert_eq!(clock_time(&t, false), "19:48:55");
    }

    #[test]
    fn windows_are_shown_exactly() {
        let ms = Duration::from_millis;
        assert_eq!(fmt_window(ms(1500)), "1s500ms");
        assert_eq!(fmt_window(ms(500)), "500ms");
        assert_eq!(fmt_window(ms(3_600_000)), "1h");
        assert_eq!(fmt_window(ms(90_000)), "1m30s");
        assert_eq!(fmt_window(Duration::ZERO), "0s");
    }

    #[test]
    fn short_waits_are_shown_in_milliseconds() {
        let ms = Duration::from_millis;
        assert_eq!(fmt_wait(ms(100)), "100ms");
        assert_eq!(fmt_wait(ms(10)), "10ms");
        assert_eq!(fmt_wait(Duration::from_micros(1)), "1ms");
        assert_eq!(fmt_wait(Duration::ZERO), "0ms");
        assert_eq!(fmt_wait(ms(1500)), "2s");
        assert_eq!(fmt_wait(ms(60_000)), "1m");
    }
}
