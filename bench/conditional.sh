#!/usr/bin/env bash
# Conditional requests and incremental cursors (issue 27): a GitHub-shaped
# stand-in, REPOS repositories (2 pages of 5 issues each), polled once a
# "minute" for MINUTES simulated minutes (one run each, back to back), CHANGE
# of them (5%) updated before each poll. Three jobs, each on a fresh store
# and stand-in: plain, `conditional: true` (cost { requests: 1,
# not_modified: 0 }, `on_not_modified: end`: the stand-in's pages are
# sorted by update), and conditional + `incremental` (since=). For each:
# units charged (status), calls sent, and whether every change was on disk
# after the poll that followed it (no page missed).
#
#   bash bench/conditional.sh            # REPOS=200 MINUTES=30 CHANGE=10
#
# Uses the debug build (`cargo build`); everything under a folder in /tmp,
# removed when done (KEEP=1 keeps it).
set -euo pipefail
cd "$(dirname "$0")/.."
REPOS=${REPOS:-200} MINUTES=${MINUTES:-30} CHANGE=${CHANGE:-10}
cargo build --quiet --bins
portion=$PWD/target/debug/portion
standin_bin=$PWD/target/debug/portion-standin
work=$(mktemp -d "${TMPDIR:-/tmp}/portion-cond.XXXXXX")
standin=
trap '[ -z "$standin" ] || kill "$standin" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
printf bench-key-1 > "$work/key"
repos=$(seq -f 'o/r%g' 1 "$REPOS" | paste -sd, -)

bench() {
    local name=$1 extra=$2 dir=$work/$1 port=${PORT:-18391}
    mkdir -p "$dir"; cp "$work/key" "$dir/key"
    "$standin_bin" --listen "127.0.0.1:$port" --key bench-key-1 --pages 2 --items 5 --github-limit 1000000 \
        --log "$dir/upstream.jsonl" > "$dir/standin.out" 2>&1 &
    standin=$!
    for _ in $(seq 100); do grep -q listening "$dir/standin.out" 2>/dev/null && break; sleep 0.05; done
    cat > "$dir/portion.yaml" <<YAML
store: embedded:ledger.sqlite3
credentials:
  gh:
    secret: { file: key }
    pools: { requests: [ { limit: 1000000, per: 1h } ] }
endpoints:
  issues.list: { cost: { requests: 1, not_modified: 0 } }
jobs:
  issues:
    credential: gh
    regions: [$repos]
    steps:
      - endpoint: issues.list
        request:
          url: "http://127.0.0.1:$port/repos/{region}/issues"
          query: { sort: updated }
          headers: { Authorization: "Bearer {secret}" }
        paginate: { link: next, max_pages: 5 }
$extra    output: out
YAML
    local missed=0 touched=0
    for m in $(seq "$MINUTES"); do
        if [ "$m" -gt 1 ]; then
            for r in $(seq 1 "$REPOS" | shuf -n "$CHANGE" --random-source=<(yes "$m")); do
                curl -s -X POST "http://127.0.0.1:$port/_standin/touch?repo=o/r$r" >> "$dir/touches.jsonl"
                echo >> "$dir/touches.jsonl"
            done
        fi
        "$portion" -c "$dir/portion.yaml" run > /dev/null 2>> "$dir/run.err" || echo "$name: minute $m: the run exited $?" >&2
        # Each change on disk: its issue with its new time, in some page.
        while read -r t; do
            [ -n "$t" ] || continue
            touched=$((touched + 1))
            repo=$(sed 's/.*"repo":"\([^"]*\)".*/\1/' <<< "$t")
            issue=$(sed 's/.*"issue":\([0-9]*\).*/\1/' <<< "$t")
            off=$(sed 's/.*"updated_at_offset":\([0-9]*\).*/\1/' <<< "$t")
            at=$(date -u -d "@$((1704067200 + off))" +%Y-%m-%dT%H:%M:%SZ)
            grep -rlq "\"id\":\"$repo#$issue\",\"title\":\"[^\"]*\",\"updated_at\":\"$at\"" "$dir/out" \
                || grep -rlq "\"updated_at\":\"$at\"" "$dir/out" || missed=$((missed + 1))
        done < <(cat "$dir/touches.jsonl" 2>/dev/null); : > "$dir/touches.jsonl"
    done
    local used calls s304
    used=$("$portion" -c "$dir/portion.yaml" status --json | grep -o '"used": *[0-9]*' | head -1 | grep -o '[0-9]*$')
    calls=$(wc -l < "$dir/upstream.jsonl")
    s304=$(grep -c '"status":304' "$dir/upstream.jsonl" || true)
    kill "$standin"; wait "$standin" 2>/dev/null || true; standin=
    echo "$name: units $used, calls $((calls - touched)) ($s304 answered 304), changes $touched, missed $missed"
}

bench plain ""
bench conditional "        conditional: true
        on_not_modified: end
"
bench incremental "        conditional: true
        on_not_modified: end
        incremental: { from: /*/updated_at, param: since, initial: \"2024-01-01T00:00:00Z\" }
"
