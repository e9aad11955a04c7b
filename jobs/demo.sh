#!/usr/bin/env bash
# The quick-start demo, end to end on one machine: no network, no Redis, no
# API key. It builds quota and quota-standin, serves the stand-in for the
# YouTube Data API on 127.0.0.1:18089, runs the trending job of
# jobs/demo.yaml tick after tick (as a timer would) until the quota stops it
# (exit 75), then shows `quota status` and the plan for the next runs. State
# and pages go to out/demo/, which each demo starts afresh.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --quiet
bin=${CARGO_TARGET_DIR:-target}/debug   # where `cargo build` put them
quota=$bin/quota
standin_bin=$bin/quota-standin
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
    echo "== tick $tick: quota run"
    set +e
    "$quota" -c "$config" run
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
echo "== quota status"
"$quota" -c "$config" status
echo
echo "== quota run --dry-run"
"$quota" -c "$config" run --dry-run
echo
echo "== $(ls out/demo/trending | wc -l) pages in out/demo/trending, $(wc -l < out/demo/upstream.jsonl) requests seen by the stand-in"
