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
#
# Each script gets its own server on port 16400 (started and stopped here),
# warm-up calls (WARM, default CALLS), then CALLS counted ones from one
# client. Under valgrind a call takes about a millisecond: a 1 s window
# holds about a thousand calls, so its front lies within a settle's reach
# and charge.lua reads it from the log; at the timing run's 40,000 calls a
# second it holds 40,000 and the front is kept. The 8 s window (warmed up
# past it) is that case here.
set -euo pipefail
calls=${1:-2000}
port=16400
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
# (the scripts and their arguments, as bench/script-cost.sh defines them)
# shellcheck source=/dev/null
eval "$(sed -n '/^skeleton=/,/^return {1, now}"$/p' "$here/bench/script-cost.sh")"
eval "$(sed -n '/^charge_args()/,/^}$/p;/^sorted_args()/,/^}$/p' "$here/bench/script-cost.sh")"

# count NAME SCRIPT ARGS...: prints NAME and instructions a call.
count() {
    local name=$1 script=$2
    shift 2
    valgrind --tool=callgrind --callgrind-out-file="$work/out.%p" --instr-atstart=no \
        redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
    local vg=$! sha total
    until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.2; done
    sha=$(redis-cli -p "$port" script load "$script")
    redis-benchmark -p "$port" -c 1 -n "${WARM:-$calls}" -r 100000000 -q evalsha "$sha" "$@" >/dev/null
    callgrind_control -i on "$vg" >/dev/null 2>&1
    redis-benchmark -p "$port" -c 1 -n "$calls" -r 100000000 -q evalsha "$sha" "$@" >/dev/null
    callgrind_control -i off "$vg" >/dev/null 2>&1
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    wait "$vg" || true
    total=$(callgrind_annotate "$work"/out.* 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    rm -f "$work"/out.*
    printf '%-44s %8d instructions a call\n' "$name" $((total / calls))
}

one=(1000000 1000000000000)
two=(1000000 1000000000000 3600000000 1000000000000)
day=(86400000000 1000000000000)
charge=$(cat "$here/lua/charge.lua")
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
eight=(8000000 1000000000000)
charge_args 1 "${eight[@]}"
WARM=12000 count "charge.lua, cost 1, an 8 s window, front kept" "$charge" "${args[@]}"
charge_args 1 "${day[@]}"
count "charge.lua, cost 1, a 24 h window (no slide)" "$charge" "${args[@]}"
