#!/usr/bin/env bash
# A fan-out's batches in flight at once (issue 14, part 1): one `portion run`
# of one region whose search (PAGES pages of ITEMS ids, one after another)
# feeds a videos.list fan-out of BATCHES batches of 10 ids, against the
# stand-in answering every request in 100 ms, at concurrency N = 1, 4, 16,
# beside the ideal (PAGES + BATCHES / N) x 100 ms; the wall time and portion's
# own CPU (user + sys, from /usr/bin/time) per call.
#
#   bash bench/fan_out.sh                # 200 batches (4 pages of 500 ids), REPS=3
#   PORTION_BASE=/path/to/old/portion bash bench/fan_out.sh
#       # also the N=4 row with another build (one whose batches go one by one)
#
# Needs a release build (it runs `cargo build --release`) and /usr/bin/time.
# Embedded store, in a folder under /tmp that is removed when done. Each
# figure is the median of REPS runs, each on a fresh store.
set -euo pipefail
cd "$(dirname "$0")/.."
PAGES=${PAGES:-4} ITEMS=${ITEMS:-500} REPS=${REPS:-3}
DELAY_MS=100
batches=$((PAGES * ITEMS / 10))
calls=$((PAGES + batches))

cargo build --release --quiet --bins
portion=$PWD/target/release/portion
standin=$PWD/target/release/portion-standin
work=$(mktemp -d "${TMPDIR:-/tmp}/portion-fan-out.XXXXXX")
"$standin" --listen 127.0.0.1:0 --key bench-key-1 --pages "$PAGES" --items "$ITEMS" \
    --units 1000000 --search 1000000 --delay ${DELAY_MS}ms > "$work/standin.out" &
standin_pid=$!
trap 'kill "$standin_pid" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
for _ in $(seq 50); do grep -q listening "$work/standin.out" && break; sleep 0.1; done
up=$(sed -n 's#.*listening on \(http://[0-9.:]*\).*#\1#p' "$work/standin.out")
printf bench-key-1 > "$work/key"

# config N: the job at concurrency N.
config() {
    cat > "$work/portion.yaml" <<EOF
store: embedded:$work/ledger.db
credentials:
  main:
    secret: { file: key }
    pools:
      units:
        - { limit: 1000000, per: 1h }
endpoints:
  search.list: { cost: { units: 1 } }
  videos.list: { cost: { units: 1 } }
jobs:
  bench:
    credential: main
    regions: [US]
    concurrency: $1
    steps:
      - endpoint: search.list
        request:
          url: $up/youtube/v3/search
          query: { part: id, regionCode: "{region}", key: "{secret}" }
        paginate: { token: /nextPageToken, param: pageToken, max_pages: $PAGES }
      - endpoint: videos.list
        for_each: { from: /items/*/id/videoId, batch: 10, per_page: $ITEMS }
        request:
          url: $up/youtube/v3/videos
          query: { part: statistics, id: "{batch}", key: "{secret}" }
    output: $work/out
EOF
}

# shellcheck source=bench/timed_run.sh
. bench/timed_run.sh

# row LABEL BIN N: the median wall of REPS runs, and its CPU.
row() {
    local label=$1 bin=$2 n=$3
    config "$n"
    read -r wall cpu made code <<< "$(median_run "$bin")"
    local ideal
    ideal=$(echo "scale=3; ($PAGES + $batches / $n) * $DELAY_MS / 1000" | bc)
    printf '| %-6s | %2s | %5s | %4s | %6.2f s | %6.2f s | %5.2fx | %5.2f ms |\n' \
        "$label" "$n" "$made" "$code" "$wall" "$ideal" "$(echo "scale=3; $wall / $ideal" | bc)" \
        "$(echo "scale=4; $cpu * 1000 / $made" | bc)"
}

echo "1 region: $PAGES search pages of $ITEMS ids, then $batches batches of 10 ($calls calls), stand-in delay ${DELAY_MS} ms, median of $REPS"
echo
echo '| build  |  N | calls | exit |     wall |    ideal | ratio | CPU/call |'
echo '|--------|----|-------|------|----------|----------|-------|----------|'
[ -z "${PORTION_BASE:-}" ] || row "before" "$PORTION_BASE" 4
for n in ${NS:-1 4 16}; do row "this" "$portion" "$n"; done
