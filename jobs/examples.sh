#!/usr/bin/env bash
# Runs each example job of jobs/ (github.yaml, llm.yaml, graphql.yaml,
# backfill.yaml) end to end on this machine: no network, no Redis, no real
# API key. Each gets a freshly started stand-in (`portion-standin`, which
# imitates GitHub, an OpenAI-compatible LLM API, a Shopify-style GraphQL
# API and YouTube) and a copy
# of its job file pointed at it, with the embedded store, under
# out/examples/NAME/ (beside the inputs files of jobs/); then one line says
# how it went. A job of inputs done once (llm, backfill) is run a second
# time, which sends nothing. jobs/demo.sh is the
# README's quick start and stays as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --quiet
bin=${CARGO_TARGET_DIR:-target}/debug   # where `cargo build` put them
portion=$bin/portion
standin_bin=$bin/portion-standin
port=18090
base=http://127.0.0.1:$port

# The secrets the examples read: the key the stand-in accepts.
export GITHUB_TOKEN=demo-key OPENAI_API_KEY=demo-key SHOPIFY_TOKEN=demo-key YT_API_KEY=demo-key

rm -rf out/examples
mkdir -p out/examples
standin=
trap '[ -z "$standin" ] || kill "$standin" 2>/dev/null || true' EXIT

# example NAME REAL_ORIGIN STANDIN_OPTIONS...: run jobs/NAME.yaml with
# REAL_ORIGIN replaced by the stand-in's.
example() {
    local name=$1 origin=$2
    shift 2
    local dir=out/examples/$name
    mkdir -p "$dir"
    "$standin_bin" --listen "127.0.0.1:$port" --key demo-key --log "$dir/upstream.jsonl" "$@" \
        > "$dir/standin.out" 2> "$dir/standin.err" &
    standin=$!
    for _ in $(seq 100); do
        grep -q listening "$dir/standin.out" 2>/dev/null && break
        kill -0 "$standin" 2>/dev/null || { cat "$dir/standin.err" >&2; exit 1; }
        sleep 0.05
    done
    {
        echo "store: embedded:ledger.sqlite3"
        sed -e "s|$origin|$base|g" -e "s|\.\./out/|out/|g" "jobs/$name.yaml"
    } > "$dir/portion.yaml"
    cp jobs/*.jsonl jobs/*.txt "$dir/"   # inputs: { file } is read beside the config
    set +e
    "$portion" -c "$dir/portion.yaml" run > "$dir/run.out" 2> "$dir/run.err"
    local code=$?
    set -e
    local first again=""
    first=$(wc -l < "$dir/upstream.jsonl")
    if [ "$code" -eq 0 ] && grep -q '^ *once: true' "$dir/portion.yaml"; then
        set +e
        "$portion" -c "$dir/portion.yaml" run > "$dir/again.out" 2> "$dir/again.err"
        code=$?
        set -e
        again=", again: exit $code, $(($(wc -l < "$dir/upstream.jsonl") - first)) requests"
    fi
    kill "$standin" 2>/dev/null || true
    wait "$standin" 2>/dev/null || true
    standin=
    local pages requests spent
    pages=$(find "$dir/out" -type f -name '*.json' ! -name '.*' 2>/dev/null | wc -l)
    requests=$first
    spent=$(grep -o 'spent [^;)]*' "$dir/run.err" | tail -n 1 || true)
    echo "$name: exit $code, $requests requests to the stand-in, $pages pages, ${spent:-nothing spent}$again (log: $dir/run.err)"
    if [ "$code" -ne 0 ]; then
        cat "$dir/run.err" >&2
        failed=1
    fi
}

failed=0
example github https://api.github.com --pages 3 --items 5 --github-used 1200
example llm https://api.openai.com
example graphql https://example-shop.myshopify.com --pages 3 --items 5
example backfill https://www.googleapis.com --pages 1 --items 1
# The backfill sends its 300 ids 50 a call (inputs.batch): 6 requests.
calls=$(wc -l < out/examples/backfill/upstream.jsonl)
if [ "$calls" -ne 6 ]; then
    echo "backfill: $calls requests to the stand-in, expected 6 (50 ids a call)" >&2
    failed=1
fi
exit "$failed"
