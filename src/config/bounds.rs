//! The largest numbers a configuration may hold. Units are counted in the
//! Redis store by Lua, whose numbers are doubles: exact up to 2^53, so no
//! limit, headroom or cost may pass 2^53 - 1, and a sum of a few of them
//! still fits in a u64.
//!
//! Why a window's sum stays exact too (issue 23): an allowed charge fits
//! every budget, so enforce mode alone keeps each sum at most a budget,
//! below 2^53. Only two things record past a budget: a settle above its
//! estimate, which records at most the pool's largest budget plus one
//! (`Receipt::recordable`: an actual above every budget says only "over",
//! and the cap keeps the call over every budget until it leaves, as the
//! actual would), and observe mode, which records calls that do not fit.
//! Each call thus adds at most 2^53 units to a window, and the sum passes
//! 2^53 - 1 only after 2^53 units in one window: about 8,000 calls past a
//! budget of 2^40 units, 2^46 past a budget of 100. The number of calls a
//! window holds has no bound, so the Redis scripts check before any sum
//! grows past it: such a pool counts as spent until its longest window has
//! passed (every call it held has left every window by then), its log
//! started afresh, as for a lost log (`lua/charge.lua`, `EXACT`), and an
//! index total that would pass it starts a new origin. No decision is ever
//! made on a rounded sum. The embedded store counts in i64, exactly (its
//! running totals span a pool's whole life: past 2^63 units, after about
//! a thousand windows spent at a budget near 2^53, SQLite would make them
//! reals: not handled yet). A window (and a schedule) is at most about ten
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
