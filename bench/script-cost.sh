#!/usr/bin/env bash
# Server-side cost of the charge script (issue 14, part 5), as BENCHMARKS.md
# reports it: Redis's own time per call (INFO commandstats usec_per_call)
# and redis-benchmark's throughput, with redis-benchmark (a C client)
# driving each script alone at 50 clients against one fresh credential.
#
# Side by side, in rounds (the machine is shared: compare within a round):
#   - `return 1` (the floor), and a skeleton that makes only the four Redis
#     calls a charge needs (TIME, a state read, RPUSH, a state write);
#   - lua/charge.lua (with its prelude and parts: examples/lua_script.rs);
#   - the classic sorted-set limiter that keeps one member per unit
#     (ZREMRANGEBYSCORE, ZCARD and ZADD per window, in one script): the
#     reference issue 14 names;
# at cost 1 and cost 100, with one window (and the same charge on a
# credential with three shares, issue 28) (1 s: calls leave it all the
# time, so both designs do their sliding work) and with two (1 s and 1 h).
# Budgets never run out: every call is admitted.
#
#   bash bench/script-cost.sh [PORT] [ROUNDS]   (default 16399, 3; see bench/servers.sh)
#   CHARGE_LUA=FILE [CHARGE_LUA_BEFORE_A692141=1] bash bench/script-cost.sh   (another build's
#   script; the second for one built before a692141's shares layout)
#
# Every run FLUSHALLs that server: point it at a benchmark server only.
set -euo pipefail
port=${1:-16399}
rounds=${2:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
cli() { redis-cli -p "$port" "$@"; }

skeleton="local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local s = redis.call('HGET', KEYS[1], 'p')
local a, b = 0, 0
if s then a, b = struct.unpack('<dd', s) end
redis.call('RPUSH', KEYS[2], now, ARGV[8], ARGV[8], ARGV[2])
redis.call('HSET', KEYS[1], 'p', struct.pack('<ddddddd', now, b + 1, 1, 1, 1, 1, 1))
return {1, now, b, 0, 10000}"

# The sorted-set reference: KEYS one sorted set per window; ARGV[1] the
# cost, ARGV[2] a unique id, then per window its length (µs) and budget.
# Admitted: one member per unit, scored by the time, in every window's set.
sorted_set="local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cost = tonumber(ARGV[1])
for w = 1, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[w], '-inf', now - tonumber(ARGV[1 + 2 * w]))
  if redis.call('ZCARD', KEYS[w]) + cost > tonumber(ARGV[2 + 2 * w]) then return {0, now} end
end
local members = {}
for i = 1, cost do
  members[2 * i - 1], members[2 * i] = now, ARGV[2] .. ':' .. i
end
for w = 1, #KEYS do redis.call('ZADD', KEYS[w], unpack(members)) end
return {1, now}"

# charge.lua's arguments (see its header), into `args`: one pool, a random
# charge id, COST, then each window's length (µs) and budget.
charge_args() { # COST LENGTH BUDGET [LENGTH BUDGET]
    local cost=$1
    shift
    args=(3 'portion:{b}:state' 'portion:{b}:log:units' 'portion:{b}:index:units' '' __rand_int__ 0 60000000
        'tag:bench	bench' 0 1 'pool:units' "$cost" $(($# / 2)) "$@")
}
# The sorted set's arguments, into `args`: a set per window.
sorted_args() { # COST LENGTH BUDGET [LENGTH BUDGET]
    local cost=$1
    shift
    local keys=() w
    for ((w = 0; w < $# / 2; w++)); do keys+=("zs:{b}:$w"); done
    args=("${#keys[@]}" "${keys[@]}" "$cost" __rand_int__ "$@")
}

# The same charge on a credential with three shares (issue 28), a, b and
# c, each keeping 10 units: by a job without a share (BY unset: the pool,
# then each share's pool at cost 0, only read) or as share a (BY=a: the
# pool, a's pool charged too, then b's and c's, only read), flag 16.
charge_shares_args() { # COST LENGTH BUDGET
    local cost=$1 s keys=() names=() layout=() own=() rows=()
    shift
    if [ -n "${BY:-}" ]; then own=("/$BY"); fi
    local others=()
    for s in /a /b /c; do [ "$s" = "${own[0]:-}" ] || others+=("$s"); done
    local all=('' "${own[@]}" "${others[@]}") n=2
    for s in "${all[@]}"; do
        keys+=("portion:{b}:log:units$s")
        names+=("pool:units$s")
        if [ -z "$s" ] || [ "$s" = "${own[0]:-}" ]; then layout+=("$cost" 1 "$@"); else layout+=(0 1 "$@"); fi
    done
    for s in "${all[@]}"; do keys+=("portion:{b}:index:units$s"); done
    n=$((1 + ${#own[@]}))
    for ((s = n + 1; s <= ${#all[@]}; s++)); do rows+=("$s" 10); done
    args=($((1 + 2 * ${#all[@]})) 'portion:{b}:state' "${keys[@]}" '' __rand_int__ 16 60000000
        'tag:bench	bench' 0 ${#all[@]} "${names[@]}" "${layout[@]}" 1 "$n" -1 ${#others[@]} "${rows[@]}")
    # (a build before a692141 takes no count of the pools recorded)
    if [ -n "${CHARGE_LUA_BEFORE_A692141:-}" ]; then
        args=("${args[@]:0:$((${#args[@]} - ${#rows[@]} - 3))}" -1 ${#others[@]} "${rows[@]}")
    fi
}

# measure NAME SCRIPT ARGS...: prints NAME, µs a call in Redis, calls/s.
measure() {
    local name=$1 script=$2
    shift 2
    local sha rps us
    sha=$(cli script load "$script")
    cli flushall >/dev/null
    cli config resetstat >/dev/null
    rps=$(redis-benchmark -p "$port" -c 50 -n 50000 -r 100000000 -q \
        evalsha "$sha" "$@" | grep -o '[0-9.]* requests per second' | cut -d' ' -f1)
    us=$(cli info commandstats | grep '^cmdstat_evalsha:' | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/' | tr -d '\r')
    printf '%-44s %8s µs a call in Redis  %10s calls/s\n' "$name" "$us" "$rps"
}

one=(1000000 1000000000000)
two=(1000000 1000000000000 3600000000 1000000000000)
# (the charge as Redis receives it: its prelude and parts, built by
# src/ledger/redis/scripts.rs; CHARGE_LUA=FILE measures another build's)
charge=$(if [ -n "${CHARGE_LUA:-}" ]; then cat "$CHARGE_LUA"; else
    cd "$here" && cargo run -q --example lua_script -- charge; fi)
for round in $(seq "$rounds"); do
    echo "round $round"
    charge_args 1 "${one[@]}"
    measure "return 1 (the floor)" "return 1" "${args[@]}"
    measure "skeleton: 4 calls, no logic" "$skeleton" "${args[@]}"
    for cost in 1 100; do
        charge_args "$cost" "${one[@]}"
        measure "charge.lua, cost $cost, one window" "$charge" "${args[@]}"
        sorted_args "$cost" "${one[@]}"
        measure "sorted set, cost $cost, one window" "$sorted_set" "${args[@]}"
        BY= charge_shares_args "$cost" "${one[@]}"
        measure "charge.lua, cost $cost, one window, 3 shares" "$charge" "${args[@]}"
        BY=a charge_shares_args "$cost" "${one[@]}"
        measure "charge.lua, cost $cost, one window, as share a" "$charge" "${args[@]}"
        charge_args "$cost" "${two[@]}"
        measure "charge.lua, cost $cost, two windows" "$charge" "${args[@]}"
        sorted_args "$cost" "${two[@]}"
        measure "sorted set, cost $cost, two windows" "$sorted_set" "${args[@]}"
    done
done
cli flushall >/dev/null
