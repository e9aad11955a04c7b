#!/usr/bin/env bash
# A fan-out of many values (issue 23): one `portion run` of one region whose
# search (PAGES pages of ITEMS ids) feeds a videos.list fan-out of
# PAGES x ITEMS values in batches of BATCH, against the stand-in answering
# at once, on the embedded store; the wall time, portion's CPU (user + sys)
# and the size of the cursor saved after the first batch. Before the fix
# the cursor held every value not yet sent and was rewritten after each
# batch (quadratic); now the values are kept once and the cursor holds a
# position.
#
#   bash bench/fan_out_cursor.sh                     # 10^5 values, batches of 50
#   PORTION_BASE=/path/to/old/portion bash bench/fan_out_cursor.sh   # also that build
#
# Needs a release build (it runs `cargo build --release`), /usr/bin/time
# and sqlite3 (for the cursor's size; optional).
set -euo pipefail
cd "$(dirname "$0")/.."
PAGES=${PAGES:-200} ITEMS=${ITEMS:-500} BATCH=${BATCH:-50} REPS=${REPS:-1}
values=$((PAGES * ITEMS))
batches=$((values / BATCH))

cargo build --release --quiet --bins
portion=$PWD/target/release/portion
standin=$PWD/target/release/portion-standin
work=$(mktemp -d "${TMPDIR:-/tmp}/portion-fan-out-cursor.XXXXXX")
"$standin" --listen 127.0.0.1:0 --key bench-key-1 --pages "$PAGES" --items "$ITEMS" \
    --units 100000000 --search 100000000 > "$work/standin.out" &
standin_pid=$!
trap 'kill "$standin_pid" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
for _ in $(seq 50); do grep -q listening "$work/standin.out" && break; sleep 0.1; done
up=$(sed -n 's#.*listening on \(http://[0-9.:]*\).*#\1#p' "$work/standin.out")
printf bench-key-1 > "$work/key"
cat > "$work/portion.yaml" <<YAML
store: embedded:$work/ledger.db
credentials:
  main:
    secret: { file: key }
    pools:
      units:
        - { limit: 100000000, per: 1h }
endpoints:
  search.list: { cost: { units: 1 } }
  videos.list: { cost: { units: 1 } }
jobs:
  bench:
    credential: main
    regions: [US]
    steps:
      - endpoint: search.list
        request:
          url: $up/youtube/v3/search
          query: { part: id, regionCode: "{region}", key: "{secret}" }
        paginate: { token: /nextPageToken, param: pageToken, max_pages: $PAGES }
      - endpoint: videos.list
        for_each: { from: /items/*/id/videoId, batch: $BATCH, per_page: $ITEMS }
        request:
          url: $up/youtube/v3/videos
          query: { part: statistics, id: "{batch}", key: "{secret}" }
    output: $work/out
YAML

# shellcheck source=bench/timed_run.sh
. bench/timed_run.sh

row() {
    read -r wall cpu made code <<< "$(median_run "$2")"
    printf '| %-6s | %6s | %5s | %4s | %8.2f s | %8.2f s |\n' "$1" "$values" "$made" "$code" "$wall" "$cpu"
}

echo "1 region: $PAGES search pages of $ITEMS ids, then $batches batches of $BATCH, stand-in without delay, median of $REPS"
echo
echo '| build  | values | calls | exit |       wall |        CPU |'
echo '|--------|--------|-------|------|------------|------------|'
[ -z "${PORTION_BASE:-}" ] || row "before" "$PORTION_BASE"
row "this" "$portion"
