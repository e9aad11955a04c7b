//! The largest numbers a configuration may hold. Units are counted in the
//! Redis store by Lua, whose numbers are doubles: exact up to 2^53, so no
//! limit, headroom or cost may pass 2^53 - 1, and a sum of a few of them
//! still fits in a u64. A window (and a schedule) is at most about ten
//! years: no real quota is longer, and its length in microseconds stays
//! far below both 2^53 and i64's range, whatever is added to it.

use std::time::Duration;

/// The most units a limit, a headroom or a cost may be: 2^53 - 1.
pub const MAX_UNITS: u64 = (1 << 53) - 1;

/// The longest window `per` (and `schedule`): 3650 days, 87600h.
pub const MAX_WINDOW: Duration = Duration::from_secs(3650 * 86_400);

/// What a refused number of units is told.
pub fn units_too_large(n: impl std::fmt::Display) -> String {
    format!(
        "{n} is above the largest number of units, {MAX_UNITS} (2^53 - 1, what the Redis store counts exactly)"
    )
}
