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
//!
//! The fields of a pool's packed state are named in the scripts' text as
//! `$NAME` tokens ([`POOL_FIELDS`]), replaced here by their numbers: a name
//! then costs nothing when the script runs, where a local of the prelude
//! would be an upvalue of every function that reads it (~450 instructions
//! a call each, BENCHMARKS.md).

use std::sync::LazyLock;

use super::keys::LOG_SEGMENT;
use crate::ledger::calendar::{DAY_US, HOUR_US};
use crate::ledger::{RESERVED, SAME_PERIOD_US, SETTLE_REACH};

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
/// Numbers in a block record of the index, before its (tag id, cost)
/// pairs (`lua/charge.lua`; `RECORD` in the scripts).
pub const RECORD_FIELDS: usize = 7;

/// The fields of a pool's state (`pool:P`, described in `lua/charge.lua`)
/// as the scripts index it unpacked (an array from 1), by the names the
/// scripts write as `$NAME`. Window w's fields start at `WIN * w` (its
/// length there, then `SUM`, `PTR`, `OLDEST` past it); the pool's own
/// after the last window at `WIN * m` plus `EXPIRES` .. `OTHERS_UNTIL`:
/// `FIXED + WIN * m` numbers packed in all.
pub const POOL_FIELDS: [(&str, u64); 17] = [
    // the log's head and tail call numbers, the number of windows m
    ("HEAD", 1),
    ("TAIL", 2),
    ("M", 3),
    // numbers a window
    ("WIN", 4),
    // past a window's start (its length)
    ("SUM", 1),
    ("PTR", 2),
    ("OLDEST", 3),
    // past WIN * m
    ("EXPIRES", 4),
    ("LOST", 5),
    ("DEAD", 6),
    ("OTHERS", 7),
    ("OTHERS_UNTIL", 8),
    // the numbers besides the windows'
    ("FIXED", 8),
    // unpacked only, past WIN * m, the fast path's: the charge's cost,
    // then window w's budget at BUDGET + w
    ("COST", 9),
    ("BUDGET", 9),
    // a scratch window at WIN * m + SCRATCH (charge/record.lua's trim
    // count; over others' two fields, which the general path keeps by
    // name and writes back as it saves)
    ("SCRATCH", 7),
    // the numbers of meta (lua/shared/layout.lua: META)
    ("META_FIELDS", 5),
];

/// The value of the token `$name`: a field's number, or a packed format
/// (little-endian doubles): `FORMAT1` a pool state of one window,
/// `META_FORMAT` meta, `RECORD_FORMAT` an index record's numbers.
fn token(name: &str) -> Option<String> {
    let doubles = |n: u64| format!("<{}", "d".repeat(n as usize));
    match name {
        "FORMAT1" => return Some(doubles(field("FIXED") + field("WIN"))),
        "META_FORMAT" => return Some(doubles(field("META_FIELDS"))),
        "RECORD_FORMAT" => return Some(doubles(RECORD_FIELDS as u64)),
        _ => {}
    }
    let (_, v) = POOL_FIELDS.iter().find(|(n, _)| *n == name)?;
    Some(v.to_string())
}

/// A field's number, by name.
fn field(name: &str) -> u64 {
    POOL_FIELDS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |f| f.1)
}

/// `text` with every `$NAME` token replaced by its value. A name it does
/// not know panics: a script that would not compile (Lua has no `$`).
fn expand(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 1..];
        let len = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..len];
        let value = token(name).unwrap_or_else(|| panic!("a script names ${name}: no such field"));
        out.push_str(&value);
        rest = &tail[len..];
    }
    out.push_str(rest);
    out
}

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
         local MINUTE, HOUR, DAY = {MINUTE_US}, {HOUR_US}, {DAY_US}\n\
         local SAME_PERIOD = {SAME_PERIOD_US}\n",
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
    expand(&s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The named fields tile the packed state as `lua/charge.lua`
    /// describes it, and a token becomes its number.
    #[test]
    fn the_pool_fields_tile_the_state() {
        let f = field;
        // (window 1 starts right after the count of windows, a window's
        // fields fit in it, the pool's own follow the last window's)
        assert_eq!(f("M") + 1, f("WIN"));
        assert!(f("SUM") < f("PTR") && f("PTR") < f("OLDEST") && f("OLDEST") < f("WIN"));
        assert_eq!(f("EXPIRES"), f("WIN"));
        assert_eq!(f("OTHERS_UNTIL"), f("FIXED"));
        assert_eq!(f("COST"), f("FIXED") + 1);
        assert_eq!(expand("pv[$WIN * w + $SUM]"), "pv[4 * w + 1]");
        assert_eq!(expand("'$FORMAT1', $M"), "'<dddddddddddd', 3");
        for name in [
            "charge", "block", "read", "read_log", "settle", "lock", "unblock",
        ] {
            assert!(!source(name).unwrap().contains('$'), "{name}");
        }
    }

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
                    // (the packed formats of a one-window state and of
                    // an index record: tokens, from POOL_FIELDS and
                    // RECORD_FIELDS)
                    "'<dddddddddddd'",
                    "'<ddddddd'",
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
