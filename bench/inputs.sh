#!/usr/bin/env bash
# Jobs of inputs at scale (issue 25, "Performance"): a once-job over a .txt
# file of SIZES lines (a key a line), one videos.list call per input against
# the stand-in answering at once (0 ms), concurrency 16, on the embedded
# store and on Redis. For each size and store: the wall time, inputs per
# second, portion's CPU (user + sys, /usr/bin/time) per input and its max
# RSS. Then the resume deep in the largest file: a run whose hourly window
# of HALF units stops it there (75), then a run allowed 75 more: the time
# from its start to the stand-in's first request, beside the same on a
# fresh store (the file's first line), and the bytes each read (rchar).
#
#   bash bench/inputs.sh                       # SIZES="10000 1000000"
#   SIZES="10000 100000" STORES=embedded bash bench/inputs.sh
#   ROWS=0 SIZES=1000000 bash bench/inputs.sh  # the resume alone
#   ROWS=0 BLANK_HALF=1 SIZES=1000000 bash bench/inputs.sh
#       # the resume in a file whose first half is blank lines (walked
#       # uncharged): the run to the middle takes seconds, not an hour
#
# Needs a release build (it runs `cargo build --release`), /usr/bin/time
# and, for Redis, redis-server (one is started on a free port, no
# persistence). Everything lives in a folder under /tmp removed when done
# (KEEP=1 keeps it). Each run's pages are moved aside, not deleted, until
# then (see bench/timed_run.sh): at 10^6 inputs that is a million files a
# run (some 4 GB on ext4 with 4 KB blocks) for every run of the script:
# check `df -h` and `df -i` first.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES:-10000 1000000} STORES=${STORES:-embedded redis} CONCURRENCY=${CONCURRENCY:-16}

# (PORTION=/path/to/portion: that build instead, nothing built)
[ -n "${PORTION:-}" ] || cargo build --release --quiet --bins
portion=${PORTION:-$PWD/target/release/portion}
standin_bin=$PWD/target/release/portion-standin
work=$(mktemp -d "${TMPDIR:-/tmp}/portion-inputs.XXXXXX")
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
printf bench-key-1 > "$work/key"
# portion's own state (what it knows the store recorded) under $work too, so
# that a store emptied for the next row is not taken for one that lost data
export XDG_STATE_HOME=$work/state

# standin LOG: a fresh stand-in (logging to LOG, or not if empty); sets $up.
standin() {
    local log=()
    [ -z "$1" ] || log=(--log "$1")
    "$standin_bin" --listen 127.0.0.1:0 --key bench-key-1 --pages 1 --items 1 \
        --units 100000000 "${log[@]}" > "$work/standin.out" &
    pids+=($!)
    standin_pid=$!
    for _ in $(seq 100); do grep -q listening "$work/standin.out" 2>/dev/null && break; sleep 0.05; done
    up=$(sed -n 's#.*listening on \(http://[0-9.:]*\).*#\1#p' "$work/standin.out")
}

redis_url=
if [[ " $STORES " == *" redis "* ]]; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$work" --logfile "$work/redis.log" > /dev/null &
    pids+=($!)
    until redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; do sleep 0.1; done
    redis_url=redis://127.0.0.1:$port/0
fi

# fresh STORE: an empty store of that kind; prints its `store:` value.
fresh() {
    # (pages moved aside, not deleted: see bench/timed_run.sh)
    [ ! -e "$work/out" ] || mv "$work/out" "$work/set-aside.$(date +%s%N)"
    rm -rf "$work"/ledger.db* "$XDG_STATE_HOME"
    case "$1" in
    embedded) echo "embedded:$work/ledger.db" ;;
    redis) redis-cli -u "$redis_url" flushall > /dev/null && echo "$redis_url" ;;
    esac
}

# config STORE_URL FILE LIMIT: the job, LIMIT units an hour.
config() {
    cat > "$work/portion.yaml" <<EOF
store: $1
credentials:
  main:
    secret: { file: key }
    pools:
      units:
        - { limit: $3, per: 1h }
endpoints:
  videos.list: { cost: { units: 1 } }
jobs:
  bench:
    credential: main
    inputs: { file: $2 }
    once: true
    concurrency: $CONCURRENCY
    steps:
      - endpoint: videos.list
        request:
          url: $up/youtube/v3/videos
          query: { part: id, id: "{key}", key: "{secret}" }
    output: $work/out
EOF
}

# timed: one `portion run`; prints "wall user+sys maxrss_kb code".
timed() {
    local code=0
    /usr/bin/time -f '%e %U %S %M' -o "$work/time" \
        "$portion" --config "$work/portion.yaml" run > /dev/null 2> "$work/err" || code=$?
    read -r wall user sys rss < <(tail -1 "$work/time")
    echo "$wall $(echo "$user + $sys" | bc) $rss $code"
}

standin ""
echo "once-job over a .txt file, stand-in at 0 ms, concurrency $CONCURRENCY, $(nproc) cores"
echo
echo '| store    |   inputs | exit |    wall |  inputs/s | CPU/input | max RSS |'
echo '|----------|----------|------|---------|-----------|-----------|---------|'
for n in $SIZES; do
    seq -f 'K%.0f' 0 $((n - 1)) > "$work/ids-$n.txt"
    [ "${ROWS:-1}" != 0 ] || continue
    for store in $STORES; do
        config "$(fresh "$store")" "$work/ids-$n.txt" $((n * 2))
        read -r wall cpu rss code <<< "$(timed)"
        printf '| %-8s | %8d | %4s | %5.1f s | %9.0f | %6.3f ms | %4d MB |\n' \
            "$store" "$n" "$code" "$wall" "$(echo "$n / $wall" | bc -l)" \
            "$(echo "$cpu * 1000 / $n" | bc -l)" $((rss / 1024))
    done
done
kill "$standin_pid" 2>/dev/null || true

# first_request: `portion run` with the stand-in logging; prints the ms from
# the run's start to the first request the stand-in saw, and the bytes the
# run read (rchar of the shell that reaped it).
first_request() {
    standin "$work/up.jsonl"
    config "$1" "$2" "$3"
    local start
    start=$(date +%s%6N)
    # shellcheck disable=SC2016
    sh -c '"$@" > /dev/null 2>&1; cat /proc/$$/io' sh "$portion" --config "$work/portion.yaml" run \
        > "$work/io" || true
    kill "$standin_pid" 2>/dev/null || true
    wait "$standin_pid" 2>/dev/null || true
    local first
    first=$(head -1 "$work/up.jsonl" | sed 's/.*"at_us":\([0-9]*\).*/\1/')
    echo "$(((first - start) / 1000)) $(sed -n 's/^rchar: //p' "$work/io")"
    rm -f "$work/up.jsonl"
}

largest=$(printf '%s\n' $SIZES | sort -n | tail -1)
half=$((largest / 2))
file=$work/ids-$largest.txt
# The resumed run's file, and the units that stop the run before it there.
rfile=$file to_middle=$half
if [ -n "${BLANK_HALF:-}" ]; then
    rfile=$work/blank-$largest.txt to_middle=75
    awk -v n="$largest" 'BEGIN { for (i = 0; i < n / 2; i++) print ""; for (i = 0; i < n / 2; i++) print "K" i }' > "$rfile"
fi
echo
echo "Resume deep in the $largest-line file: the time to the first request"
echo
echo '| store    | run                        | to 1st request | bytes read |'
echo '|----------|----------------------------|----------------|------------|'
for store in $STORES; do
    url=$(fresh "$store")
    read -r ms read <<< "$(first_request "$url" "$file" 75)"
    printf '| %-8s | %-26s | %9d ms | %10d |\n' "$store" "fresh (line 1)" "$ms" "$read"
    url=$(fresh "$store")
    standin ""
    config "$url" "$rfile" "$to_middle"
    read -r _ _ _ code <<< "$(timed)"
    kill "$standin_pid" 2>/dev/null || true
    [ "$code" = 75 ] || { echo "the run to the middle exited $code" >&2; cat "$work/err" >&2; exit 1; }
    read -r ms read <<< "$(first_request "$url" "$rfile" $((to_middle + 75)))"
    printf '| %-8s | %-26s | %9d ms | %10d |\n' "$store" "resumed (line $((half + to_middle % half + 1)))" "$ms" "$read"
done
