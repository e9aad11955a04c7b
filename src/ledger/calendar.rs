//! Calendar windows (issue 13, part 7): a window with `aligned: ZONE` is a
//! fixed period that resets when the upstream's quota does (YouTube's at
//! midnight Pacific), not a sliding one. Its periods count elapsed time from
//! each local midnight in steps of `per` (which divides 24 h), and the last
//! of a day runs to the next midnight: a 24 h window is the local day, 23 h
//! or 25 h long across DST, and on those days the last period of a shorter
//! window is an hour shorter or longer. The store decides on its own clock: the client
//! sends the local midnights around its own reading ([`midnights`]) and the
//! script finds the period that holds the store's now ([`period_in`], the
//! same arithmetic as `lua/charge.lua`), so a host's skewed clock moves
//! nothing.

use chrono::{Days, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;

use super::Micros;

/// How many midnights [`midnights`] gives: the days from two before a
/// reading's to three after, so a store clock up to two days off the
/// host's still finds its day.
pub const MIDNIGHTS: usize = 6;

/// The instant local `date` starts in `tz`, µs since the epoch (a day that
/// starts inside a DST gap starts at the first instant after it).
pub fn midnight(tz: Tz, date: NaiveDate) -> Micros {
    let start = date.and_hms_opt(0, 0, 0).expect("midnight exists");
    for minutes in 0..24 * 60 {
        let local = start + chrono::Duration::minutes(minutes);
        if let Some(t) = tz.from_local_datetime(&local).earliest() {
            return t.timestamp_micros();
        }
    }
    unreachable!("a day of {tz} with no valid minute")
}

/// The local midnights starting the days from two before `t`'s to three
/// after, in order.
pub fn midnights(tz: Tz, t: Micros) -> [Micros; MIDNIGHTS] {
    let utc = chrono::DateTime::<Utc>::from_timestamp_micros(t).expect("a time in range");
    let today = utc.with_timezone(&tz).date_naive();
    let first = today - Days::new(2);
    std::array::from_fn(|k| midnight(tz, first + Days::new(k as u64)))
}

/// A day in µs (of UTC; a local day runs 23 to 25 hours).
pub const DAY_US: Micros = 86_400_000_000;
/// An hour in µs: the most a calendar period runs over its length (a
/// clock change).
pub const HOUR_US: Micros = 3_600_000_000;

/// The period of length `per` µs that holds `now`, `[start, end)`, given
/// the midnights around it; `None` when `now` is outside them.
pub fn period_in(midnights: &[Micros], per: Micros, now: Micros) -> Option<(Micros, Micros)> {
    let last = (DAY_US / per - 1).max(0);
    midnights.windows(2).find_map(|day| {
        let (from, to) = (day[0], day[1]);
        (from <= now && now < to).then(|| {
            let k = ((now - from) / per).min(last);
            let start = from + k * per;
            (start, if k == last { to } else { (start + per).min(to) })
        })
    })
}

/// The period of length `per` µs that holds `t` in `tz`.
pub fn period(tz: Tz, per: Micros, t: Micros) -> (Micros, Micros) {
    period_in(&midnights(tz, t), per, t).expect("t lies within its own days")
}

/// How long a period of length `per` µs can last: a day's last one can be
/// an hour longer (25 h days).
pub fn longest_period(per: Micros) -> Micros {
    per + HOUR_US
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Micros = 3_600_000_000;

    fn at(s: &str) -> Micros {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_micros()
    }

    #[test]
    fn a_day_is_the_local_day_dst_included() {
        let la: Tz = "America/Los_Angeles".parse().unwrap();
        // An ordinary day: midnight PST is 08:00 UTC.
        let (s, e) = period(la, 24 * H, at("2026-01-15T20:00:00Z"));
        assert_eq!(
            (s, e),
            (at("2026-01-15T08:00:00Z"), at("2026-01-16T08:00:00Z"))
        );
        // Spring forward (2026-03-08): a 23 h day.
        let (s, e) = period(la, 24 * H, at("2026-03-08T12:00:00Z"));
        assert_eq!(e - s, 23 * H);
        assert_eq!(s, at("2026-03-08T08:00:00Z"));
        // Fall back (2026-11-01): a 25 h day.
        let (s, e) = period(la, 24 * H, at("2026-11-01T12:00:00Z"));
        assert_eq!((s, e - s), (at("2026-11-01T07:00:00Z"), 25 * H));
        // The last instant of a day is in it; midnight starts the next.
        let (_, e) = period(la, 24 * H, at("2026-01-15T20:00:00Z"));
        assert_eq!(period(la, 24 * H, e - 1).1, e);
        assert_eq!(period(la, 24 * H, e).0, e);
    }

    #[test]
    fn shorter_periods_step_from_midnight_and_stop_at_the_next() {
        let utc: Tz = "UTC".parse().unwrap();
        let (s, e) = period(utc, 30_000_000, at("2026-01-15T10:00:45Z"));
        assert_eq!(
            (s, e),
            (at("2026-01-15T10:00:30Z"), at("2026-01-15T10:01:00Z"))
        );
        // 6 h periods on the 25 h day in Los Angeles: the last runs 7 h.
        let la: Tz = "America/Los_Angeles".parse().unwrap();
        let (s, e) = period(la, 6 * H, at("2026-11-02T06:30:00Z"));
        assert_eq!(
            (s, e),
            (at("2026-11-02T01:00:00Z"), at("2026-11-02T08:00:00Z"))
        );
        // And on the 23 h day, 5 h.
        let (s, e) = period(la, 6 * H, at("2026-03-09T06:30:00Z"));
        assert_eq!(
            (s, e),
            (at("2026-03-09T02:00:00Z"), at("2026-03-09T07:00:00Z"))
        );
    }

    #[test]
    fn a_store_clock_days_away_finds_its_day_or_none() {
        let utc: Tz = "UTC".parse().unwrap();
        let t = at("2026-01-15T10:00:00Z");
        let m = midnights(utc, t);
        assert_eq!(m[0], at("2026-01-13T00:00:00Z"));
        let skewed = t + 50 * H;
        assert_eq!(
            period_in(&m, 24 * H, skewed),
            Some((at("2026-01-17T00:00:00Z"), at("2026-01-18T00:00:00Z")))
        );
        assert_eq!(period_in(&m, 24 * H, t + 100 * H), None);
    }
}
