#!/usr/bin/env bash
# Requests in flight at once (issue 14, part 1): one `portion run` of CALLS
# calls (REGIONS regions x PAGES pages) against the stand-in answering every
# request in 100 ms, at concurrency N = 1, 4, 16, 64, beside the ideal
# CALLS x 100 ms / N; the wall time and portion's own CPU (user + sys, from
# /usr/bin/time) per call. Then the same job with a pacing window that is
# the bottleneck (LIMIT units an hour, fewer than CALLS): the run should end
# once the window is full, one answer's delay later at most.
#
#   bash bench/concurrency.sh            # REGIONS=100 PAGES=2 LIMIT=50 REPS=3
#   PORTION_BASE=/path/to/old/portion bash bench/concurrency.sh
#       # also the N=1 row with another build (one without `concurrency`)
#
# Needs a release build (it runs `cargo build --release`) and /usr/bin/time.
# Embedded store, in a folder under /tmp that is removed when done. Each
# figure is the median of REPS runs, each on a fresh store.
set -euo pipefail
cd "$(dirname "$0")/.."
REGIONS=${REGIONS:-100} PAGES=${PAGES:-2} LIMIT=${LIMIT:-50} REPS=${REPS:-3}
DELAY_MS=100
calls=$((REGIONS * PAGES))

cargo build --release --quiet --bins
portion=$PWD/target/release/portion
standin=$PWD/target/release/portion-standin
work=$(mktemp -d "${TMPDIR:-/tmp}/portion-concurrency.XXXXXX")
"$standin" --listen 127.0.0.1:0 --key bench-key-1 --pages "$PAGES" --items 1 \
    --units 1000000 --delay ${DELAY_MS}ms > "$work/standin.out" &
standin_pid=$!
trap 'kill "$standin_pid" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
for _ in $(seq 50); do grep -q listening "$work/standin.out" && break; sleep 0.1; done
up=$(sed -n 's#.*listening on \(http://[0-9.:]*\).*#\1#p' "$work/standin.out")
printf bench-key-1 > "$work/key"
regions=$(seq -f 'R%g' 0 $((REGIONS - 1)) | paste -sd, -)

# config LIMIT [N]: the job, concurrency N (left out without N).
config() {
    local key=""
    [ -z "${2:-}" ] || key="    concurrency: $2"
    cat > "$work/portion.yaml" <<EOF
store: embedded:$work/ledger.db
credentials:
  main:
    secret: { file: key }
    pools:
      units:
        - { limit: $1, per: 1h }
endpoints:
  videos.list: { cost: { units: 1 } }
jobs:
  bench:
    credential: main
    regions: [$regions]
$key
    steps:
      - endpoint: videos.list
        request:
          url: $up/youtube/v3/videos
          query: { part: snippet, chart: mostPopular, regionCode: "{region}", key: "{secret}" }
        paginate: { token: /nextPageToken, param: pageToken, max_pages: $PAGES }
    output: $work/out
EOF
}

# shellcheck source=bench/timed_run.sh
. bench/timed_run.sh

# row LABEL BIN N LIMIT: the median wall of REPS runs, and its CPU.
row() {
    local label=$1 bin=$2 n=$3 limit=$4
    config "$limit" "${n#base}"
    read -r wall cpu made code <<< "$(median_run "$bin")"
    local n_=${n#base}
    n_=${n_:-1}
    local ideal
    ideal=$(echo "scale=3; $made * $DELAY_MS / 1000 / $n_" | bc)
    printf '| %-10s | %3s | %5s | %4s | %7.2f s | %7.2f s | %5.2fx | %6.2f ms |\n' \
        "$label" "$n_" "$made" "$code" "$wall" "$ideal" "$(echo "scale=3; $wall / $ideal" | bc)" \
        "$(echo "scale=4; $cpu * 1000 / $made" | bc)"
}

echo "$calls calls ($REGIONS regions x $PAGES pages), stand-in delay ${DELAY_MS} ms, median of $REPS"
echo
echo '| build      |   N | calls | exit |      wall |     ideal | ratio | CPU/call |'
echo '|------------|-----|-------|------|-----------|-----------|-------|----------|'
[ -z "${PORTION_BASE:-}" ] || row "before" "$PORTION_BASE" base 1000000
for n in ${NS:-1 4 16 64}; do row "this" "$portion" "$n" 1000000; done
echo
echo "Pacing window the bottleneck: $LIMIT units an hour, $calls calls of work"
echo
echo '| build      |   N | calls | exit |      wall |     ideal | ratio | CPU/call |'
echo '|------------|-----|-------|------|-----------|-----------|-------|----------|'
for n in 1 4 16 64; do row "this" "$portion" "$n" "$LIMIT"; done
