//! The ledger's Lua scripts, each built at load time as a prelude plus its
//! body: Redis loads a script alone (`EVALSHA` has no include), so what the
//! scripts share is put in front of each here, once per process.
//!
//! The prelude holds the layout's constants, formatted from the Rust values
//! below (no constant is written in Lua), then `lua/shared/layout.lua` (the
//! packed formats), then for the scripts that read the clock,
//! `lua/shared/clock.lua` (for the charge, after its fast path's function).
//! `lua/charge.lua` is long: its body is the parts of `lua/charge/`, in
//! [`CHARGE_PARTS`] order.

use std::sync::LazyLock;

use super::keys::LOG_SEGMENT;
use crate::ledger::{RESERVED, SETTLE_REACH};

/// Calls per block of a pool's log: the index keeps one record per block.
pub const BLOCK: u64 = 128;
/// Items per log entry (time µs, cost, tag id, charge id).
pub const ENTRY: u64 = 4;
/// A minute in µs: every key outlives its newest entry's window by this.
pub const MINUTE_US: u64 = 60_000_000;
/// The largest sum a double counts by ones (2^53 - 1): no stored sum
/// passes it (`EXACT` in the scripts; the bound of every budget,
/// `config::bounds::MAX_UNITS`).
pub const EXACT: u64 = (1 << 53) - 1;
/// An hour in µs: the most a calendar period runs over its length (a
/// clock change).
pub const HOUR_US: u64 = 3_600_000_000;
/// A day in µs (calendar windows).
pub const DAY_US: u64 = 86_400_000_000;

/// What the scripts share, in front of every script: the constants, then
/// the packed formats.
const LAYOUT_LUA: &str = include_str!("../../../lua/shared/layout.lua");
/// The clock's opening, for the scripts that read it.
const CLOCK_LUA: &str = include_str!("../../../lua/shared/clock.lua");

/// `lua/charge.lua`'s body: its header and the parts of `lua/charge/`, in
/// the order they run; the clock comes after the first [`CHARGE_HEAD`].
pub const CHARGE_PARTS: [&str; 8] = [
    include_str!("../../../lua/charge.lua"),
    include_str!("../../../lua/charge/fast.lua"),
    include_str!("../../../lua/charge/open.lua"),
    include_str!("../../../lua/charge/log.lua"),
    include_str!("../../../lua/charge/pools.lua"),
    include_str!("../../../lua/charge/save.lua"),
    include_str!("../../../lua/charge/decide.lua"),
    include_str!("../../../lua/charge/record.lua"),
];

/// How many of [`CHARGE_PARTS`] come before the clock (the header and the
/// fast path's function).
const CHARGE_HEAD: usize = 2;

/// Every script, built once.
pub struct Sources {
    pub charge: String,
    pub block: String,
    pub read: String,
    pub read_log: String,
    pub settle: String,
    pub lock: String,
    pub unblock: String,
}

/// The scripts as Redis receives them.
pub static SOURCES: LazyLock<Sources> = LazyLock::new(|| Sources {
    // (the clock after the fast path's function: that function reads no
    // local of the clock's, so it captures none, see lua/charge/fast.lua)
    charge: build(
        Some(1),
        &CHARGE_PARTS[..CHARGE_HEAD].concat(),
        &CHARGE_PARTS[CHARGE_HEAD..].concat(),
    ),
    block: build(Some(1), "", include_str!("../../../lua/block.lua")),
    read: build(Some(1), "", include_str!("../../../lua/read.lua")),
    read_log: build(None, "", include_str!("../../../lua/read_log.lua")),
    settle: build(Some(7), "", include_str!("../../../lua/settle.lua")),
    lock: build(None, "", include_str!("../../../lua/lock.lua")),
    unblock: build(None, "", include_str!("../../../lua/unblock.lua")),
});

/// The script named `name` (a file name of `lua/` without `.lua`), as
/// Redis receives it: for tests and `examples/lua_script.rs`.
pub fn source(name: &str) -> Option<&'static str> {
    let s = &*SOURCES;
    Some(match name {
        "charge" => &s.charge,
        "block" => &s.block,
        "read" => &s.read,
        "read_log" => &s.read_log,
        "settle" => &s.settle,
        "lock" => &s.lock,
        "unblock" => &s.unblock,
        _ => return None,
    })
}

/// The constants' lines, from the Rust values.
pub fn constants() -> String {
    format!(
        "-- (the layout's constants, from src/ledger/redis/scripts.rs)\n\
         local BLOCK, SEG, IXSEG, ENTRY = {BLOCK}, {LOG_SEGMENT}, {ixseg}, {ENTRY}\n\
         local REACH, RESERVED, EXACT = {SETTLE_REACH}, {RESERVED}, {EXACT}\n\
         local MINUTE, HOUR, DAY = {MINUTE_US}, {HOUR_US}, {DAY_US}\n",
        ixseg = LOG_SEGMENT / BLOCK,
    )
}

/// `head` then `body` after the prelude; with `clock`, the clock read from
/// that argument (`ARGV[clock]`, "" for the server's `TIME`) into `now`
/// between them.
fn build(clock: Option<usize>, head: &str, body: &str) -> String {
    let mut s = constants();
    s.push_str(LAYOUT_LUA);
    s.push_str(head);
    if let Some(arg) = clock {
        s.push_str(&format!("local CLOCK = {arg}\n"));
        s.push_str(CLOCK_LUA);
    }
    s.push_str(body);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each constant the scripts use comes from its Rust value, and is
    /// written in no script's own text.
    #[test]
    fn the_prelude_carries_the_rust_values_and_no_script_restates_them() {
        let c = constants();
        assert!(
            c.contains("local BLOCK, SEG, IXSEG, ENTRY = 128, 65536, 512, 4\n"),
            "{c}"
        );
        assert!(
            c.contains(&format!(
                "local REACH, RESERVED, EXACT = {SETTLE_REACH}, {RESERVED}, 9007199254740991\n"
            )),
            "{c}"
        );
        assert!(
            c.contains("local MINUTE, HOUR, DAY = 60000000, 3600000000, 86400000000\n"),
            "{c}"
        );
        assert_eq!(EXACT, crate::config::MAX_UNITS);
        let bodies = [
            CHARGE_PARTS.concat(),
            include_str!("../../../lua/block.lua").into(),
            include_str!("../../../lua/read.lua").into(),
            include_str!("../../../lua/read_log.lua").into(),
            include_str!("../../../lua/settle.lua").into(),
            include_str!("../../../lua/unblock.lua").into(),
            LAYOUT_LUA.into(),
            CLOCK_LUA.into(),
        ];
        for body in &bodies {
            let code = body.lines().filter(|l| !l.trim_start().starts_with("--"));
            for line in code {
                for literal in [
                    "65536",
                    "4096",
                    "60000000",
                    "3600000000",
                    "86400000000",
                    "2 ^ 53",
                ] {
                    assert!(!line.contains(literal), "{literal} written in Lua: {line}");
                }
                for name in [
                    "BLOCK", "SEG", "REACH", "ENTRY", "EXACT", "MINUTE", "HOUR", "DAY", "RESERVED",
                ] {
                    assert!(
                        !line.contains(&format!("local {name},"))
                            && !line.contains(&format!("local {name} =")),
                        "{name} defined again: {line}"
                    );
                }
            }
        }
        // (each part of the charge one can read alone: none over ~300 lines)
        for part in CHARGE_PARTS {
            let head = part.lines().next().unwrap_or_default();
            assert!(part.lines().count() <= 300, "{head}");
        }
        for name in [
            "charge", "block", "read", "read_log", "settle", "lock", "unblock",
        ] {
            assert!(source(name).unwrap().starts_with(&c), "{name}");
        }
    }
}
