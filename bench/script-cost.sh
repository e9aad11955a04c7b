#!/usr/bin/env bash
# Server-side cost of the charge script, as BENCHMARKS.md reports it: Redis's
# own time per call (INFO commandstats usec_per_call) and redis-benchmark's
# throughput, with redis-benchmark (a C client) driving each script alone at
# 50 clients against one fresh credential. Compares the charge with the
# trivial `return 1` and with a skeleton that makes only the four Redis calls
# a charge needs (TIME, a state read, RPUSH, a state write) and no logic.
#
#   bash bench/script-cost.sh [PORT]     (default 16399, see bench/servers.sh)
#
# Every run FLUSHALLs that server: point it at a benchmark server only.
set -euo pipefail
port=${1:-16399}
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

# One pool ("units"), one 24-hour window with a budget that never runs out,
# a random charge id per call: the admitted path, as `quota bench` measures.
charge_args=(3 'quota:{b}:state' 'quota:{b}:log:units' 'quota:{b}:index:units' '' __rand_int__ 0 60000000
    'tag:bench	bench' 0 1 'pool:units' 1 1 86400000000 1000000000)

measure() {
    local name=$1 script=$2
    local sha
    sha=$(cli script load "$script")
    cli flushall >/dev/null
    cli config resetstat >/dev/null
    local rps
    rps=$(redis-benchmark -p "$port" -c 50 -n 100000 -r 100000000 -q \
        evalsha "$sha" "${charge_args[@]}" | grep -o '[0-9.]* requests per second' | cut -d' ' -f1)
    local us
    us=$(cli info commandstats | grep '^cmdstat_evalsha:' | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/' | tr -d '\r')
    printf '%-34s %8s µs a call in Redis  %10s calls/s\n' "$name" "$us" "$rps"
}

measure "return 1 (the floor)" "return 1"
measure "skeleton: 4 calls, no logic" "$skeleton"
measure "charge (lua/charge.lua)" "$(cat "$here/lua/charge.lua")"
cli flushall >/dev/null
