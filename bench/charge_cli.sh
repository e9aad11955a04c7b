#!/usr/bin/env bash
# The startup cost of `portion charge` (issue 14, part 2): one charge made by
# a whole `portion charge` process, against `redis-cli EVALSHA` of the same
# script with the same keys and arguments, side by side in one run (the
# two alternate, call by call, so that a busy moment of the machine costs
# both alike). Target: `portion charge` within 2x of `redis-cli`.
#
# Where the time goes, from processes that stop earlier:
#   portion --version                   process start and argument parsing
#   portion charge … --cost nosuch=1    + reading and validating the
#                                     configuration (exits 78 there)
#   portion charge … (embedded store)   + one charge in a SQLite file
#   portion charge … (redis)            + connecting to Redis and the charge
#   redis-cli PING                    redis-cli's own start, connect, a round trip
#   /bin/true                         the floor: starting any process here
#
#   bash bench/charge_cli.sh [CALLS]   # default 300 of each
#
# Needs redis-server, redis-cli, python3 and a release build (it runs
# `cargo build --release`). Uses port 16399 and a folder under /tmp; removes
# both when done. The EVALSHA sends the KEYS and ARGV layout documented at
# the top of lua/charge.lua, as `portion` does: keep the two in step.
set -euo pipefail
cd "$(dirname "$0")/.."
calls=${1:-300}

# (every cargo command before HOME changes below: rustup's default install
# lives in ~/.rustup, and without it cargo cannot choose a toolchain)
cargo build --release --quiet --bin portion
charge_lua=$(cargo run -q --example lua_script -- charge)
portion=$PWD/target/release/portion
work=$(mktemp -d "${TMPDIR:-/tmp}/portion-charge-cli.XXXXXX")
port=16399
redis-server --port $port --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --dir "$work" --pidfile "$work/redis.pid" --logfile "$work/redis.log"
trap 'kill "$(cat "$work/redis.pid")" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 50); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done

# One credential, one pool of one window that no run of this script fills.
cat > "$work/portion.yaml" <<EOF
store: redis://127.0.0.1:$port/0
credentials:
  bench:
    secret: { env: UNUSED }
    pools:
      units: [{ limit: 1000000000, per: 1h }]
EOF
sed "s#^store: .*#store: embedded:$work/ledger.sqlite3#" "$work/portion.yaml" > "$work/embedded.yaml"
export XDG_STATE_HOME=$work/state HOME=$work
q=("$portion" -c "$work/portion.yaml")

# The script as portion loads it (the same SHA), and the same charge as
# `portion charge bench --cost units=1` sends: the server's clock, a fresh
# id, no resend, the 60 s horizon, tag "charge<TAB>cli", serial 0, pool
# units at cost 1 with its one 1 h window and budget.
sha=$(redis-cli -p $port SCRIPT LOAD "$charge_lua")
keys=('portion:{bench}:state' 'portion:{bench}:log:units' 'portion:{bench}:index:units')
evalsha() {
    redis-cli -p $port EVALSHA "$sha" 3 "${keys[@]}" "" "$RANDOM$RANDOM$RANDOM" 0 60000000 \
        "tag:charge	cli" 0 1 pool:units 1 1 3600000000 1000000000 >/dev/null
}
# Both must be admitted (a refused or failing call would time something else).
"${q[@]}" charge bench --cost units=1 >/dev/null
evalsha
[ "$(redis-cli -p $port --raw EVALSHA "$sha" 3 "${keys[@]}" "" 7 0 60000000 "tag:charge	cli" 0 1 pool:units 1 1 3600000000 1000000000 | head -1)" = 1 ] \
    || { echo "the EVALSHA is not admitted: is its layout still charge.lua's?" >&2; exit 1; }

# µs of each call of each kind, alternating, one line per call: KIND µs.
timed() { # KIND COMMAND...
    local kind=$1 t0 t1
    shift
    t0=$EPOCHREALTIME
    "$@" >/dev/null 2>&1 || [ "$kind" = config ] # exits 78 by design
    t1=$EPOCHREALTIME
    echo "$kind $(( (${t1/./} - ${t0/./}) ))"
}
for _ in $(seq "$calls"); do
    timed portion_charge "${q[@]}" charge bench --cost units=1
    timed redis_cli_evalsha evalsha
    timed portion_version "$portion" --version
    timed config "${q[@]}" charge bench --cost nosuch=1
    timed embedded "$portion" -c "$work/embedded.yaml" charge bench --cost units=1
    timed redis_cli_ping redis-cli -p $port PING
    timed true /bin/true
done > "$work/times"

python3 - "$work/times" "$calls" <<'EOF'
import statistics, sys
times = {}
for line in open(sys.argv[1]):
    kind, us = line.split()
    times.setdefault(kind, []).append(int(us))
def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]
rows = [
    ("portion_charge", "portion charge (redis)"),
    ("redis_cli_evalsha", "redis-cli EVALSHA charge.lua"),
    ("portion_version", "portion --version"),
    ("config", "portion charge, config read, exits 78"),
    ("embedded", "portion charge (embedded)"),
    ("redis_cli_ping", "redis-cli PING"),
    ("true", "/bin/true"),
]
print(f"{sys.argv[2]} calls of each, alternating; wall time per whole process, ms")
print(f"| {'process':<38} | median | p90 | mean |")
print(f"|{'-'*40}|--------|-----|------|")
for kind, name in rows:
    v = times[kind]
    print(f"| {name:<38} | {statistics.median(v)/1000:.2f} | {q(v, .9)/1000:.2f} | {statistics.mean(v)/1000:.2f} |")
ratio = statistics.median(times["portion_charge"]) / statistics.median(times["redis_cli_evalsha"])
print(f"portion charge / redis-cli EVALSHA (medians): {ratio:.2f}x (target: at most 2x)")
EOF
