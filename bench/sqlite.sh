#!/usr/bin/env bash
# Rows in SQLite (issue 26): one `portion run` of REGIONS x PAGES pages of 50
# items against the stand-in at 0 ms, the pages written as files only, then
# also as rows (`output.sqlite`) without and with a full-text index
# (`search`), then as rows only. Per case the wall time (median of REPS runs,
# each on a fresh store and database) and the rows per second the sink adds
# (rows / the wall time over the files-only run); the sink's share is that
# extra time over the whole run's.
#
#   bash bench/sqlite.sh                 # REGIONS=20 PAGES=50 REPS=3
#   PROFILE=debug bash bench/sqlite.sh   # the debug build (no release build)
#   DELAY=50ms REGIONS=10 PAGES=10 bash bench/sqlite.sh
#                                        # an upstream that takes 50 ms a page
#   DELAY=100ms REGIONS=16 PAGES=64 CONCURRENCY=16 bash bench/sqlite.sh
#                                        # 16 regions walked side by side
#   PORTION=/path/a VS=/path/b bash bench/sqlite.sh
#                                        # two builds side by side: each run of
#                                        # a case alternates a, b (a's first)
#
# At 0 ms a run does nothing but write its pages, so the "share" there is
# the sink's throughput, not what it adds to a real run: measure that at
# a realistic DELAY, with enough pages that creating the database does not
# weigh.
#
# Needs /usr/bin/time. Embedded store, in a folder under /tmp removed when done.
set -euo pipefail
cd "$(dirname "$0")/.."
REGIONS=${REGIONS:-20} PAGES=${PAGES:-50} REPS=${REPS:-3} PROFILE=${PROFILE:-release}
DELAY=${DELAY:-0ms} CONCURRENCY=${CONCURRENCY:-1}
ITEMS=50
# (PORTION=/path/to/portion: that build instead, nothing built)
if [ -z "${PORTION:-}" ]; then
    if [ "$PROFILE" = release ]; then cargo build --release --quiet --bins; else cargo build --quiet --bins; fi
fi
portion=${PORTION:-$PWD/target/$PROFILE/portion}
standin=${STANDIN:-$PWD/target/$PROFILE/portion-standin}
work=$(mktemp -d "${TMPDIR:-/tmp}/portion-sqlite.XXXXXX")
"$standin" --listen 127.0.0.1:0 --key bench-key-1 --pages "$PAGES" --items $ITEMS \
    --units 10000000 --delay "$DELAY" > "$work/standin.out" &
standin_pid=$!
trap 'kill "$standin_pid" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
for _ in $(seq 50); do grep -q listening "$work/standin.out" && break; sleep 0.1; done
up=$(sed -n 's#.*listening on \(http://[0-9.:]*\).*#\1#p' "$work/standin.out")
printf bench-key-1 > "$work/key"
regions=$(seq -f 'R%g' 0 $((REGIONS - 1)) | paste -sd, -)
rows=$((REGIONS * PAGES * ITEMS))

# config OUTPUT: the job, its `output` as given.
config() {
    cat > "$work/portion.yaml" <<YAML
store: embedded:$work/ledger.db
credentials:
  main:
    secret: { file: key }
    pools:
      units:
        - { limit: 10000000, per: 1h }
endpoints:
  videos.list: { cost: { units: 1 } }
jobs:
  bench:
    credential: main
    regions: [$regions]
    concurrency: $CONCURRENCY
    steps:
      - endpoint: videos.list
        request:
          url: $up/youtube/v3/videos
          query: { part: snippet, chart: mostPopular, regionCode: "{region}", key: "{secret}" }
        paginate: { token: /nextPageToken, param: pageToken, max_pages: $PAGES }
    output: $1
YAML
}

# once BUILD: one run on a fresh store and database; prints its wall time.
# (the last run's pages are moved aside, not deleted, until the script
# ends: ext4 without a journal, as on this VM's disk, skips every inode
# freed in the last minute (six while its block is dirty) when it makes a
# file, reading each one, so a run just after deleting 6,400 pages spent
# 0.4 ms more kernel CPU a page: perf, __ext4_new_inode -> find_inode_bit ->
# recently_deleted; BENCHMARKS.md, "What to know before measuring")
once() {
    [ ! -e "$work/out" ] || mv "$work/out" "$work/set-aside.$(date +%s%N)"
    rm -rf "$work"/ledger.db*
    /usr/bin/time -f '%e' -o "$work/time" "$1" --config "$work/portion.yaml" run > /dev/null 2> "$work/err" \
        || { cat "$work/err" >&2; exit 1; }
    tail -1 "$work/time"
}
# walls: REPS runs of each build, alternating; prints each build's median.
walls() {
    : > "$work/a"; : > "$work/b"
    for _ in $(seq "$REPS"); do
        once "$portion" >> "$work/a"
        [ -z "${VS:-}" ] || once "$VS" >> "$work/b"
    done
    for f in a b; do
        [ -s "$work/$f" ] && sort -n "$work/$f" | sed -n "$(((REPS + 1) / 2))p"
    done
}

rows_out="sqlite: { path: out/rows.db, table: videos, items: /items/*, key: /id"
echo "$REGIONS regions x $PAGES pages x $ITEMS items = $rows rows, $PROFILE build, upstream $DELAY a page," \
    "concurrency $CONCURRENCY, median of $REPS${VS:+; a: $portion, b: $VS}"
config "out/pages"
read -r -d '' base_a base_b < <(walls) || true
echo "files only: ${base_a} s${VS:+ | b: ${base_b} s}"
for case in "files + rows|{ folder: out/pages, $rows_out } }" \
            "files + rows + search|{ folder: out/pages, $rows_out, search: [/snippet/title, /snippet/channelTitle] } }" \
            "rows + search, no files|{ $rows_out, search: [/snippet/title, /snippet/channelTitle] } }"; do
    config "${case#*|}"
    read -r -d '' wall_a wall_b < <(walls) || true
    line="${case%%|*}:"
    for w in "a $wall_a $base_a" ${VS:+"b $wall_b $base_b"}; do
        set -- $w
        line+=$(awk -v b="$1" -v w="$2" -v base="$3" -v r="$rows" -v two="${VS:+1}" 'BEGIN {
            e = w - base
            if (two) printf " %s", b
            printf " %.2f s, sink %+.2f s (%+.1f%% of the files-only run)", w, e, 100 * e / base
            if (e > 0) printf ", %.0f rows/s", r / e
            if (two && b == "a") printf " |" }')
    done
    echo "$line"
done
