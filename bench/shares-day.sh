#!/usr/bin/env bash
# A simulated day with shares (issue 28, BENCHMARKS.md), in the efficiency
# harness's style: a calendar window of 60 s is the "day", budget 600.
#   trending: a share (reserve 60%), needs 300 a day in "hourly" bursts:
#             24 bursts, one every 2.5 s, of 12 or 13 calls of 1 unit;
#   backfill: no share, unbounded: every "second" from the start it charges
#             1-unit calls until one is refused.
# Time runs on the store's clock (each charge gives its time, At::Given),
# no sleeps. Reported per configuration: trending's refused calls (goal 0),
# backfill's units and their part of what trending leaves (goal >= 95%),
# units over the budget (0); without shares for contrast, and with lending
# never, at 80% and at 96% (after trending's last burst, 57.5 s).
#
#   bash bench/shares-day.sh   (port 16397, started and stopped here)
#
# The charges are sent with the KEYS and ARGV layout documented at the top
# of lua/charge.lua: keep the two in step.
set -euo pipefail
cd "$(dirname "$0")/.."
port=${PORT:-16397}
work=$(mktemp -d "${TMPDIR:-/tmp}/portion-day.XXXXXX")
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --dir "$work" --pidfile "$work/redis.pid" --logfile "$work/redis.log"
trap 'kill "$(cat "$work/redis.pid")" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
cargo run -q --example lua_script -- charge > "$work/charge.lua"
python3 - "$port" "$work/charge.lua" <<'EOF'
import random, socket, sys
port, script = int(sys.argv[1]), open(sys.argv[2]).read()
sock = socket.create_connection(("127.0.0.1", port))
buf = sock.makefile("rb")
def cmd(*a):
    out = b"*%d\r\n" % len(a)
    for x in a:
        x = str(x).encode()
        out += b"$%d\r\n%s\r\n" % (len(x), x)
    sock.sendall(out)
    return read()
def read():
    line = buf.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"*":
        return [read() for _ in range(int(rest))]
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else buf.read(n + 2)[:-2].decode()
    if kind == b":":
        return int(rest)
    if kind == b"-":
        raise RuntimeError(rest.decode())
    return rest.decode()
sha = cmd("SCRIPT", "LOAD", script)
S, T0 = 1_000_000, 1_800_000_000 * 1_000_000  # a minute's start (µs)
DAY = 86_400 * S
midnights = [(T0 // DAY + d) * DAY for d in range(-2, 4)]
BUDGET, RESERVE = 600, 360
def charge(cred, at, job, shares, lend):
    # pools: units, then trending's share pool (trending: charged; backfill:
    # only read), each one calendar window of 60 s
    pools = ["units"] + (["units/trending"] if shares else [])
    keys = ["portion:{%s}:state" % cred] + ["portion:{%s}:log:%s" % (cred, p) for p in pools] \
        + ["portion:{%s}:index:%s" % (cred, p) for p in pools]
    cost = {p: 1 if p == "units" or job == "trending" else 0 for p in pools}
    args = [at, random.getrandbits(62), 16 if shares else 0, 60 * S, "tag:x\t" + job, 0, len(pools)]
    args += ["pool:" + p for p in pools]
    for p in pools:
        args += [cost[p], 1, -60 * S, BUDGET]
    for _ in pools:
        args += midnights
    if shares:
        rows = [0] if job == "trending" else [1, 2, RESERVE]
        args += [1, 2 if job == "trending" else 1, lend] + rows
    r = cmd("EVALSHA", sha, len(keys), *keys, *args)
    return r[0] == 1
def day(name, shares, lend):
    cred = "day-" + name
    used = {"trending": 0, "backfill": 0}
    refused = 0
    # (tenths of a second: backfill on whole seconds, first; trending's
    # bursts every 2.5 s)
    for tenth in range(600):
        at = T0 + tenth * S // 10
        if tenth % 10 == 0:
            while charge(cred, at, "backfill", shares, lend):
                used["backfill"] += 1
        if tenth % 25 == 0:
            k = tenth // 25
            for _ in range(12 + k % 2):
                if charge(cred, at, "trending", shares, lend):
                    used["trending"] += 1
                else:
                    refused += 1
    total = used["trending"] + used["backfill"]
    leaves = BUDGET - used["trending"]
    print("%-27s | %16d | %8d | %8d | %5.1f%% | %5d" % (name, refused, used["trending"],
          used["backfill"], 100 * used["backfill"] / leaves, max(0, total - BUDGET)))
print("%-27s | %16s | %8s | %8s | %6s | %5s" % ("configuration", "trending refused", "trending", "backfill", "of left", "over"))
day("no shares", False, -1)
day("reserve 60%, never lends", True, -1)
day("reserve 60%, lend_after 80%", True, 8000)
day("reserve 60%, lend_after 96%", True, 9600)
EOF
