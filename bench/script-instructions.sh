#!/usr/bin/env bash
# Instructions a call inside Redis (issue 14, part 5), as BENCHMARKS.md
# reports them: the scripts of bench/script-cost.sh, each run by a
# redis-server under valgrind's callgrind, which counts every instruction
# the server executes for a call (network, parsing, the script, the reply).
# Unlike µs on a shared machine, the count is the same from run to run, so
# two builds of a script compare exactly; it does not see cache misses,
# which cost the sorted set more than the list (see BENCHMARKS.md).
#
#   bash bench/script-instructions.sh [CALLS]   (default 2000; needs valgrind)
#   REDIS_SERVER=/path/to/redis-server BREAKDOWN=1 bash bench/script-instructions.sh
#   SHARES=1 [CHARGE_LUA=FILE [CHARGE_LUA_BEFORE_A692141=1]] bash bench/script-instructions.sh
#
# BREAKDOWN=1 adds, under each row, where a call's instructions go inside
# the server (inclusive counts of its functions). That needs a redis-server
# with its symbols: Debian's is stripped. One built from the same release's
# source will do (from a clone of github.com/redis/redis:
# `git archive 7.0.15 | tar -x -C DIR && make -C DIR -j2`, a few minutes;
# REDIS_SERVER=DIR/src/redis-server).
#
# Each script gets its own server on port 16400 (PORT=..., started and stopped here),
# warm-up calls (WARM, default CALLS), then CALLS counted ones from one
# client, all at valgrind's pace (the count is zeroed between them). Under
# valgrind a call takes about a millisecond: a 1 s window holds about a
# thousand calls, so its front lies within a settle's reach and charge.lua
# reads it from the log; at the timing run's 40,000 calls a second it holds
# 40,000 and the front is kept. The last two rows give the charge its clock
# (5,000 calls a second, one leaving per call once the window is full),
# without and with calls leaving: that case, at a steady rate.
set -euo pipefail
calls=${1:-2000}
port=${PORT:-16400}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
# (the scripts and their arguments, as bench/script-cost.sh defines them)
# shellcheck source=/dev/null
eval "$(sed -n '/^skeleton=/,/^return {1, now}"$/p' "$here/bench/script-cost.sh")"
eval "$(sed -n '/^charge_args()/,/^}$/p;/^sorted_args()/,/^}$/p;/^charge_shares_args()/,/^}$/p' "$here/bench/script-cost.sh")"

# drive SHA FROM N ARGS...: N calls, from one client (redis-benchmark).
drive() {
    local sha=$1 n=$3
    shift 3
    redis-benchmark -p "$port" -c 1 -n "$n" -r 100000000 -q evalsha "$sha" "$@" >/dev/null
}
# drive_clock SHA FROM N ARGS...: calls FROM to FROM + N - 1 with the
# charge's clock given (ARGV[1]) STEP µs apart: with the window holding
# more than a settle's reach, one call leaves it per call, as at a steady
# rate, whatever valgrind's pace. (The arguments after the numbers of keys
# and of the charge's id are those of charge_args.)
drive_clock() {
    local sha=$1 from=$2 n=$3
    shift 3
    local rest=("${@:7}")
    awk -v sha="$sha" -v from="$from" -v n="$n" -v step="$STEP" -v rest="${rest[*]}" 'BEGIN {
        for (i = from; i < from + n; i++)
            printf "EVALSHA %s 3 portion:{b}:state portion:{b}:log:units portion:{b}:index:units %.0f %d %s\n",
                sha, 1790000000000000 + i * step, i + 1, rest
    }' | redis-cli -p "$port" >/dev/null
}

# count NAME SCRIPT ARGS...: prints NAME and instructions a call.
count() {
    local name=$1 script=$2
    shift 2
    valgrind --tool=callgrind --callgrind-out-file="$work/out.%p" \
        "${REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
    local vg=$! sha total
    until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.2; done
    sha=$(redis-cli -p "$port" script load "$script")
    ${DRIVE:-drive} "$sha" 0 "${WARM:-$calls}" "$@"
    callgrind_control --zero "$vg" >/dev/null 2>&1
    ${DRIVE:-drive} "$sha" "${WARM:-$calls}" "$calls" "$@"
    callgrind_control --dump "$vg" >/dev/null 2>&1
    # (FRONT=1: check that the window's front was kept, not read each call)
    local front=''
    if [ -n "${FRONT:-}" ]; then
        front="  (front kept: $(redis-cli -p "$port" hstrlen 'portion:{b}:state' 'front:pool:units') bytes)"
    fi
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    wait "$vg" || true
    total=$(callgrind_annotate "$work"/out.*.1 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    printf '%-44s %8d instructions a call%s\n' "$name" $((total / calls)) "$front"
    [ -n "${BREAKDOWN:-}" ] && breakdown "$work"/out.*.1
    rm -f "$work"/out.*
}

# breakdown FILE: a call's instructions by what the server was doing,
# inclusive (a row counts the rows it calls), in thousands.
breakdown() {
    callgrind_annotate --threshold=100 --inclusive=yes "$1" 2>/dev/null | awk -v calls="$calls" '
        BEGIN {
            n = split("processMultibulkBuffer luaCreateArray lua_pcall luaRedisGenericCommand scriptCall " \
                "luaC_step b_pack b_unpack luaO_str2d luaReplyToRedisReply", order, " ")
            name["processMultibulkBuffer"] = "parse the request"
            name["luaCreateArray"] = "KEYS and ARGV made"
            name["lua_pcall"] = "the script"
            name["luaRedisGenericCommand"] = "  redis.call"
            name["scriptCall"] = "    the commands themselves"
            name["luaC_step"] = "  garbage collection"
            name["b_pack"] = "  struct.pack"
            name["b_unpack"] = "  struct.unpack"
            name["luaO_str2d"] = "  text to number"
            name["luaReplyToRedisReply"] = "the reply"
        }
        {
            gsub(",", "", $1)
            for (i = 1; i <= n; i++) if ($0 ~ (":" order[i] " ") && !(order[i] in seen)) { seen[order[i]] = $1 }
        }
        END {
            if (!("lua_pcall" in seen)) { print "    (no symbols: see BREAKDOWN above)"; exit }
            for (i = 1; i <= n; i++) printf "    %-32s %6.1fk\n", name[order[i]], seen[order[i]] / calls / 1000
        }'
}

one=(1000000 1000000000000)
two=(1000000 1000000000000 3600000000 1000000000000)
day=(86400000000 1000000000000)
# (the charge as Redis receives it: its prelude and parts, built by
# src/ledger/redis/scripts.rs; CHARGE_LUA=FILE measures another build's)
charge=$(if [ -n "${CHARGE_LUA:-}" ]; then cat "$CHARGE_LUA"; else
    cd "$here" && cargo run -q --example lua_script -- charge; fi)
# (SHARES=1: only a charge of cost 1 in one window without shares, then
# on a credential with three shares by a job without one and as share a:
# issue 28, bench/script-cost.sh)
if [ -n "${SHARES:-}" ]; then
    charge_args 1 "${one[@]}"
    count "charge.lua, cost 1, one window" "$charge" "${args[@]}"
    BY= charge_shares_args 1 "${one[@]}"
    count "charge.lua, cost 1, one window, 3 shares" "$charge" "${args[@]}"
    BY=a charge_shares_args 1 "${one[@]}"
    count "charge.lua, cost 1, one window, as share a" "$charge" "${args[@]}"
    exit 0
fi
charge_args 1 "${one[@]}"
count "return 1 (the floor)" "return 1" "${args[@]}"
count "skeleton: 4 calls, no logic" "$skeleton" "${args[@]}"
for cost in 1 100; do
    charge_args "$cost" "${one[@]}"
    count "charge.lua, cost $cost, one window" "$charge" "${args[@]}"
    sorted_args "$cost" "${one[@]}"
    count "sorted set, cost $cost, one window" "$sorted_set" "${args[@]}"
    charge_args "$cost" "${two[@]}"
    count "charge.lua, cost $cost, two windows" "$charge" "${args[@]}"
    sorted_args "$cost" "${two[@]}"
    count "sorted set, cost $cost, two windows" "$sorted_set" "${args[@]}"
done
charge_args 1 "${day[@]}"
count "charge.lua, cost 1, a 24 h window (no slide)" "$charge" "${args[@]}"
# (the charge's clock given: no TIME; a tag without a tab, for redis-cli)
fixed() { # COST LENGTH BUDGET
    args=(3 'portion:{b}:state' 'portion:{b}:log:units' 'portion:{b}:index:units' 0 0 0 60000000
        tag:bench 0 1 pool:units "$1" 1 "$2" "$3")
}
fixed 1 86400000000 1000000000000
STEP=200 DRIVE=drive_clock count "charge.lua, clock given, 24 h (no slide)" "$charge" "${args[@]}"
fixed 1 1000000 1000000000000
STEP=200 DRIVE=drive_clock FRONT=1 WARM=6000 count "charge.lua, clock given, 1 s, one call leaves" \
    "$charge" "${args[@]}"
