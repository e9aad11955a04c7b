//! Lending a share's reserve (issue 28, `lend_after`): from a point of a
//! calendar period on, what a reserve still holds shrinks at the reserve's
//! own pace, and a refused call is told when enough has opened. Exact
//! integer arithmetic, as lua/charge/decide.lua's, so both stores agree.

/// When a calendar period [start, stop) starts lending: `lend` hundredths
/// of a percent of its length on, rounded down, exactly (as
/// lua/charge/decide.lua computes it in doubles; none: never).
pub(crate) fn lend_at(start: i64, stop: i64, lend: i64) -> Option<i64> {
    (lend >= 0).then(|| start + (i128::from(stop - start) * i128::from(lend) / 10_000) as i64)
}

/// One other share's reserve in a window: the reserve, and what of it is
/// unused (the reserve less what the share used of the window).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reserve {
    pub reserve: u64,
    pub unused: u64,
}

/// What a calendar window still holds of `r` at `t` in its period `[start,
/// stop)`, lending from `lend_at`: before it, the whole unused reserve;
/// after, no more than the reserve times the part of the period left
/// after `t`, rounded down (what the share would still need at its
/// reserve's own pace stays kept, and its last unit opens once less than
/// a unit's share of the period is left, not at the period's last
/// instant, which no timer hits: nothing is wasted). Exact, as
/// lua/charge/decide.lua's.
pub(crate) fn held(r: Reserve, (start, stop): (i64, i64), lend_at: Option<i64>, t: i64) -> u64 {
    match lend_at {
        Some(from) if t >= from => {
            let left = (stop - 1 - t).max(0) as u128;
            let len = (stop - start).max(1) as u128;
            let pace = u128::from(r.reserve) * left / len;
            r.unused.min(pace as u64)
        }
        _ => r.unused,
    }
}

/// What `rows` hold together at `t`, and the one that holds most (the
/// first of the largest): (sum, index, its units).
pub(crate) fn held_all(
    rows: &[Reserve],
    period: (i64, i64),
    lend_at: Option<i64>,
    t: i64,
) -> (u64, usize, u64) {
    let mut out = (0, 0, 0);
    for (j, r) in rows.iter().enumerate() {
        let h = held(*r, period, lend_at, t);
        out.0 += h;
        if h > out.2 {
            (out.1, out.2) = (j, h);
        }
    }
    out
}

/// The first instant after `now` at which what `rows` hold in a calendar
/// period fits in `room` units, if no one charges first: nothing is held
/// at the period's end (when it lends at all), so at the latest then. A
/// binary search over the instants, as lua/charge/decide.lua's.
pub(crate) fn opens_at(
    rows: &[Reserve],
    period: (i64, i64),
    lend_at: Option<i64>,
    room: u64,
    now: i64,
) -> i64 {
    let stop = period.1;
    // (held at `lo` is more than the room; at `hi`, it fits)
    let mut lo = match lend_at {
        None => stop - 1,
        Some(from) if from > now => (from - 1).min(stop - 1),
        Some(_) => now,
    };
    let mut hi = stop;
    while hi - lo > 1 {
        let mid = (lo + hi).div_euclid(2);
        if held_all(rows, period, lend_at, mid).0 <= room {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lending_starts_at_its_part_of_the_period() {
        assert_eq!(lend_at(1_000, 2_000, 8_000), Some(1_800));
        assert_eq!(lend_at(1_000, 2_000, -1), None);
        // A month in µs: the product (2.7e16) is past 2^53; in doubles the
        // point came out a µs late.
        let month = 31 * 86_400_000_000_i64 + 1;
        let start = 1_790_000_000_000_000;
        assert_eq!(
            lend_at(start, start + month, 9_999),
            Some(start + 2_678_132_160_000)
        );
    }

    #[test]
    fn a_reserve_opens_at_its_own_pace_after_the_lending_point() {
        let (start, stop) = (0, 60_000_000);
        let r = Reserve {
            reserve: 360,
            unused: 300,
        };
        let lend = lend_at(start, stop, 8_000);
        // Before the point: all of it unused; at 90%, 10% of 360 rounded
        // down (35: the instants left after now are one short of 10%).
        assert_eq!(held(r, (start, stop), lend, 47_999_999), 300);
        assert_eq!(held(r, (start, stop), lend, 54_000_000), 35);
        assert_eq!(held(r, (start, stop), lend, stop - 1), 0);
        assert_eq!(held(r, (start, stop), None, stop - 1), 300);
        // Units near 2^53 and a long period: exact, rounded down.
        let big = Reserve {
            reserve: (1 << 53) - 1,
            unused: 1 << 53,
        };
        let len = 31 * 86_400_000_000_i64;
        let t = len - 1 - len / 3;
        let exact = u128::from(big.reserve) * (len / 3) as u128 / len as u128;
        assert_eq!(held(big, (0, len), Some(0), t), exact as u64);
    }

    /// The whole reserve is open before the period ends (issue 36): 10
    /// units over 20 s keep their last unit only while 2 s or more are
    /// left, so a timer that ticks before the period's last instant takes
    /// it (rounded up, it opened at that instant only: one unit a period
    /// wasted).
    #[test]
    fn the_whole_reserve_is_open_before_the_period_ends() {
        let r = Reserve {
            reserve: 10,
            unused: 10,
        };
        let period = (0, 20_000_000);
        let lend = lend_at(0, 20_000_000, 5_000);
        assert_eq!(held(r, period, lend, 20_000_000 - 1 - 2_000_000), 1);
        assert_eq!(held(r, period, lend, 20_000_000 - 1 - 1_999_999), 0);
        assert_eq!(opens_at(&[r], period, lend, 0, 10_000_000), 18_000_000);
    }

    #[test]
    fn a_refused_call_is_told_when_enough_has_opened() {
        let period = (0, 60_000_000);
        let rows = [Reserve {
            reserve: 60,
            unused: 60,
        }];
        let lend = lend_at(0, 60_000_000, 8_000);
        // Before the point, 60 held: with room for 12, not until 48 s,
        // where 60 x (12 s - 1 µs) / 60 s rounds down to 11.
        assert_eq!(opens_at(&rows, period, lend, 12, 1), 48_000_000);
        // Room for 6: where less than 7 s are left after the instant.
        assert_eq!(opens_at(&rows, period, lend, 6, 50_000_000), 53_000_000);
        // No room: where less than 1 s (a unit's part) is left, before the
        // period's last instant; not lending: its end.
        assert_eq!(opens_at(&rows, period, lend, 0, 50_000_000), 59_000_000);
        assert_eq!(opens_at(&rows, period, None, 30, 1), 60_000_000);
    }
}
