#!/usr/bin/env bash
# The ledger at scale (issue 11, part 4): for each log size N, a credential
# whose pool logged N calls of cost 1 within 25 s (a 30 s window), then
#
#   redis:    bytes per logged call (MEMORY USAGE of the log, its index and
#             the state); the slowest script while the N calls were charged;
#             the wall time of `portion status` and the slowest script it ran
#             (SLOWLOG); the time inside Redis of a charge when half the calls
#             have left the window, and of the first charge 32 s after the
#             burst, when all N have;
#   embedded: the wall time of `portion status` and of a one-call `portion run`
#             (charge + one request to the stand-in) on a store holding the
#             same N calls, beside the same run on an empty store.
#
#   bash bench/scale.sh [N ...]        # default: 10000 100000 1000000
#   SCALE_SHARES=3 bash bench/scale.sh N   # the same, on a credential with
#       three shares (issue 28: a, b and c, 10 units each kept), every call
#       charged as share a: its pool and a's logged, b's and c's read
#
# Needs redis-server, redis-cli, python3 and a release build (it runs
# `cargo build --release`). Uses port 16398 and a folder under /tmp; removes
# both when done. The charges are sent with the KEYS and ARGV layout
# documented at the top of lua/charge.lua: keep the two in step.
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10000 100000 1000000)

cargo build --release --quiet
portion=$PWD/target/release/portion
standin=$PWD/target/release/portion-standin
work=$(mktemp -d "${TMPDIR:-/tmp}/portion-scale.XXXXXX")
port=16398
# The server runs at real-time priority where the script may set it (root),
# so that SLOWLOG times the scripts' work rather than the moments a shared
# machine gave its core to something else (a fixed CPU would not help on
# two cores shared with builds); the kernel's real-time throttling, which
# would pause a server kept busy by the fill for 50 ms each second, is
# lifted meanwhile and put back on exit.
rt=() rt_runtime=
if chrt -f 10 true 2>/dev/null && [ -w /proc/sys/kernel/sched_rt_runtime_us ]; then
    rt=(chrt -f 10)
    rt_runtime=$(cat /proc/sys/kernel/sched_rt_runtime_us)
    echo -1 > /proc/sys/kernel/sched_rt_runtime_us
fi
"${rt[@]}" redis-server --port $port --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --dir "$work" --pidfile "$work/redis.pid" --logfile "$work/redis.log"
"$standin" --listen 127.0.0.1:0 --key bench-key-1 --pages 1 --items 1 > "$work/standin.out" &
standin_pid=$!
trap 'kill "$(cat "$work/redis.pid")" "$standin_pid" 2>/dev/null || true; rm -rf "$work"
      [ -z "$rt_runtime" ] || echo "$rt_runtime" > /proc/sys/kernel/sched_rt_runtime_us' EXIT
for _ in $(seq 50); do
    redis-cli -p $port ping >/dev/null 2>&1 && grep -q listening "$work/standin.out" && break
    sleep 0.1
done
up=$(sed -n 's#.*listening on http://\([0-9.:]*\).*#\1#p' "$work/standin.out")
r() { redis-cli -p $port "$@"; }
T0=1800000000000000 # µs: the fixed clock the charges read
# (the state, and the prefixes of the log's and the index's segments)
keys=('portion:{scale}:state' 'portion:{scale}:log:units' 'portion:{scale}:index:units')
# A charge's keys and arguments after its clock and id (charge.lua's
# header), in one line: one pool, or with SCALE_SHARES the pool, a's pool
# (both charged) and b's and c's (read only), flag 16, and the shares'
# arguments: 1 pool of the charge's own, 2 recorded, never lends, 2 other
# shares of 10 units.
window='1 30000000 1000000000000'
if [ -n "${SCALE_SHARES:-}" ]; then
    head=(9 'portion:{scale}:state')
    for s in '' /a /b /c; do head+=("portion:{scale}:log:units$s"); done
    for s in '' /a /b /c; do head+=("portion:{scale}:index:units$s"); done
    tail=(16 60000000 "tag:videos.list	scale" 0 4 pool:units pool:units/a pool:units/b pool:units/c
        1 $window 1 $window 0 $window 0 $window 1 2 -1 2 3 10 4 10)
    shares_yaml='    shares: { a: { reserve: 10 }, b: { reserve: 10 }, c: { reserve: 10 } }'
else
    head=(3 "${keys[@]}")
    tail=(0 60000000 "tag:videos.list	scale" 0 1 pool:units 1 $window)
    shares_yaml=
fi
export SCALE_KEY=bench-key-1

# The longest SLOWLOG entry (µs) of a command matching $1, then reset.
slowest() {
    r --no-raw SLOWLOG GET -1 | python3 -c '
import re, sys
want, best, lines = sys.argv[1], 0, sys.stdin.read().split("\n")
for i, l in enumerate(lines):
    m = re.match(r"\s*\d+\) \d+\) \(integer\) \d+$", l)
    if m and i + 3 < len(lines) and want in lines[i + 3]:
        best = max(best, int(lines[i + 2].split()[-1]))
print(best)' "$1"
    r SLOWLOG RESET >/dev/null
}

# The fill's SLOWLOG entries over 2 ms, appended to $work/fill.slow as "µs
# what", what being the charge's call number for a charge (its clock says
# which, of $1 calls) or a command a script ran: a bounded read (a few
# dozen list elements) that takes milliseconds tells that the machine,
# not the log's size, stalled the server.
slow_fill() {
    r --no-raw SLOWLOG GET -1 | python3 -c '
import re, sys
n, t0, lines = int(sys.argv[1]), int(sys.argv[2]), sys.stdin.read().split("\n")
arg = lambda l: l.split(")", 1)[1].strip().strip(chr(34))
for i, l in enumerate(lines):
    if re.match(r"\s*\d+\) \d+\) \(integer\) \d+$", l) and i + 3 < len(lines):
        us = int(lines[i + 2].split()[-1])
        if us <= 2000:
            continue
        cmd = arg(lines[i + 3].split(")", 1)[1])
        if cmd == "EVALSHA" and i + 9 < len(lines):
            # (the clock: after the script, the number of keys and the keys)
            at = i + 6 + int(arg(lines[i + 5]))
            print(us, "charge", (int(arg(lines[at])) - t0) * n // 25_000_000)
        else:
            print(us, cmd, " ".join(arg(x) for x in lines[i + 4:i + 7]))' "$1" "$T0" >> "$work/fill.slow"
}

# A charge of cost 1 at µs $1, as charge.lua's header documents its arguments.
charge_at() {
    r EVALSHA "$charge" "${head[@]}" "$1" "$RANDOM$RANDOM" "${tail[@]}" >/dev/null
}

# The configuration both stores are read with: credential `scale`, one pool
# of one 30 s window, one job calling the stand-in once.
cat > "$work/portion.yaml" <<EOF
credentials:
  scale:
    secret: { env: SCALE_KEY }
    pools:
      units: [{ limit: 1000000000000, per: 30s }]
$shares_yaml
endpoints:
  videos.list: { cost: { units: 1 } }
jobs:
  one:
    credential: scale
    steps:
      - endpoint: videos.list
        request: { url: "http://$up/youtube/v3/videos", query: { key: "{secret}", regionCode: US } }
    output: out
EOF

printf '%-9s | %-10s | %-11s | %-11s | %-13s | %-11s | %-11s | %-11s | %-16s\n' \
    N "bytes/call" "fill, worst" "status wall" "status, worst" "charge, half" "charge, all" \
    "emb. status" "emb. run (empty)"
for n in "${sizes[@]}"; do
    r FLUSHALL >/dev/null
    : > "$work/fill.slow"
    charge=$(r SCRIPT LOAD "$(cargo run -q --example lua_script -- charge)")
    # (the fill logs only charges over 100 µs: the slowest is what counts)
    r CONFIG SET slowlog-log-slower-than 100 >/dev/null
    r CONFIG SET slowlog-max-len 100000 >/dev/null
    r SLOWLOG RESET >/dev/null
    # (in pipes of at most 10^6 charges: one pipe of 10^7 would overrun the
    # server's 1 GB query buffer; the slowest of each kept before the next)
    fill_us=0
    for ((from = 0; from < n; from += 1000000)); do
        python3 - "$charge" "$T0" "$n" "$from" "${#head[@]}" "${head[@]}" "${tail[@]}" > "$work/fill.resp" <<'EOF'
import random, sys
sha, t0, n, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
head, tail = sys.argv[6:6 + int(sys.argv[5])], sys.argv[6 + int(sys.argv[5]):]
out = sys.stdout
def cmd(*a):
    out.write("*%d\r\n" % len(a))
    for x in map(str, a):
        out.write("$%d\r\n%s\r\n" % (len(x.encode()), x))
for i in range(start, min(n, start + 1_000_000)):
    t = t0 + i * 25_000_000 // n
    cmd("EVALSHA", sha, *head, t, random.getrandbits(63), *tail)
EOF
        r --pipe < "$work/fill.resp" >/dev/null
        # (the charges read a fixed clock that moves 25 s over the whole fill,
        # while their keys' expiry runs on Redis's real clock: a fill of 10^7,
        # minutes long, would outlive it; on a real clock expiry keeps pace)
        for k in $(r --scan --pattern 'portion:{scale}:*'); do r PERSIST "$k" >/dev/null; done
        slow_fill "$n"
        worst=$(slowest EVALSHA)
        [ "$worst" -le "$fill_us" ] || fill_us=$worst
    done
    r CONFIG SET slowlog-log-slower-than 0 >/dev/null
    r CONFIG SET slowlog-max-len 1000 >/dev/null
    mem=0
    # (the state, and every segment of the log and of its index)
    for k in $(r --scan --pattern 'portion:{scale}:*'); do mem=$((mem + $(r MEMORY USAGE "$k" SAMPLES 0 | sed 's/^$/0/'))); done
    bytes=$(python3 -c "print(round($mem / $n, 1))")
    start=$(date +%s%N)
    "$portion" -c "$work/portion.yaml" --store "redis://127.0.0.1:$port/0" status >/dev/null
    wall=$(( ($(date +%s%N) - start) / 1000000 ))
    status_us=$(slowest EVALSHA)
    # (half the calls have left the 30 s window; then, 32 s after, all)
    charge_at $((T0 + 42500000)); half_us=$(slowest EVALSHA)
    charge_at $((T0 + 57000000)); all_us=$(slowest EVALSHA)

    # The embedded store: the same calls, written straight into its tables.
    db="$work/ledger-$n.sqlite3"
    "$portion" -c "$work/portion.yaml" --store "embedded:$db" run >/dev/null 2>&1 # the schema
    "$portion" -c "$work/portion.yaml" --store "embedded:$work/empty.sqlite3" run >/dev/null 2>&1
    python3 - "$db" "$n" "${SCALE_SHARES:-}" <<'EOF'
import sqlite3, sys, time
db, n = sys.argv[1], int(sys.argv[2])
now = time.time_ns() // 1000
c = sqlite3.connect(db)
c.execute("DELETE FROM log")
# cum: the pool's running total of costs, this row's included (cost 1 each);
# with shares, share a's pool holds the same calls.
for pool in ['units'] + (['units/a'] if sys.argv[3] else []):
    c.executemany("INSERT INTO log (credential, pool, at, cost, tag, cum) VALUES ('scale', ?, ?, 1, 'videos.list\tscale', ?)",
                  ((pool, now - 25_000_000 + i * 25_000_000 // n, i + 1) for i in range(n)))
c.execute("UPDATE credential SET serial = ?, retain = 60000000, last = ? WHERE name = 'scale'", (n, now))
c.commit()
EOF
    ms() { local s; s=$(date +%s%N); "$@" >/dev/null 2>&1 || true; echo $(( ($(date +%s%N) - s) / 1000000 )); }
    emb_status=$(ms "$portion" -c "$work/portion.yaml" --store "embedded:$db" status)
    emb_run=$(ms "$portion" -c "$work/portion.yaml" --store "embedded:$db" run)
    emb_empty=$(ms "$portion" -c "$work/portion.yaml" --store "embedded:$work/empty.sqlite3" run)
    printf '%-9s | %-10s | %-11s | %-11s | %-13s | %-11s | %-11s | %-11s | %-16s\n' \
        "$n" "$bytes" "${fill_us} µs" "${wall} ms" "${status_us} µs" "${half_us} µs" "${all_us} µs" \
        "${emb_status} ms" "${emb_run} ms (${emb_empty} ms)"
    if [ -s "$work/fill.slow" ]; then
        echo "  the fill's commands over 2 ms (µs, then the charge's call number or the command):"
        sort -rn "$work/fill.slow" | head -12 | sed 's/^/    /'
    fi
done
