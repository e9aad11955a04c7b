#!/usr/bin/env bash
# The quick-start demo, end to end on one machine: no network, no Redis, no
# API key. It builds portion and portion-standin, serves the stand-in for the
# YouTube Data API on 127.0.0.1:18089, runs the trending job of
# jobs/demo.yaml tick after tick (as a timer would) until the quota stops it
# (exit 75), then shows `portion status`, the plan for the next runs and a
# local full-text search over the rows the runs wrote. State, pages and rows
# go to out/demo/, which each demo starts afresh.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --quiet
bin=${CARGO_TARGET_DIR:-target}/debug   # where `cargo build` put them
portion=$bin/portion
standin_bin=$bin/portion-standin
config=jobs/demo.yaml

rm -rf out/demo
mkdir -p out/demo
"$standin_bin" --listen 127.0.0.1:18089 --key demo-key --pages 3 --log out/demo/upstream.jsonl \
    > out/demo/standin.out 2> out/demo/standin.err &
standin=$!
trap 'kill "$standin" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    grep -q listening out/demo/standin.out 2>/dev/null && break
    kill -0 "$standin" 2>/dev/null || { cat out/demo/standin.err >&2; exit 1; }
    sleep 0.05
done
echo "== stand-in: $(cat out/demo/standin.out)"

for tick in $(seq 1 10); do
    echo "== tick $tick: portion run"
    set +e
    "$portion" -c "$config" run
    code=$?
    set -e
    echo "== tick $tick: exit $code"
    if [ "$code" -eq 75 ]; then
        break
    elif [ "$code" -ne 0 ]; then
        exit "$code"
    fi
done
if [ "$code" -ne 75 ]; then
    echo "the demo expected the quota to stop a tick (exit 75)" >&2
    exit 1
fi

echo
echo "== portion status"
"$portion" -c "$config" status
echo
echo "== portion run --dry-run"
"$portion" -c "$config" run --dry-run
echo
echo "== $(ls out/demo/trending | wc -l) pages in out/demo/trending, $(wc -l < out/demo/upstream.jsonl) requests seen by the stand-in"

# Ingest → local search: the rows the runs upserted into out/demo/videos.db,
# found by their FTS5 index, no quota spent. sqlite3 if installed, else
# Python's sqlite3 module.
db=out/demo/videos.db
sql() {
    if command -v sqlite3 >/dev/null; then
        sqlite3 "$db" "$1"
    else
        python3 -c 'import sqlite3, sys
for row in sqlite3.connect(sys.argv[1]).execute(sys.argv[2]):
    print("|".join(map(str, row)))' "$db" "$1"
    fi
}
echo
echo "== $(sql 'SELECT count(*) FROM videos') rows in $db; a local search for GB:"
sql "SELECT v.key, json_extract(v.item, '$.snippet.title') FROM videos_search s JOIN videos v ON v.key = s.key WHERE videos_search MATCH 'GB' ORDER BY v.key LIMIT 5"
