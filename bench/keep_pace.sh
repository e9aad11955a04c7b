#!/usr/bin/env bash
# Runs that keep pace (issue 38): waiting inside a run against a timer
# that starts runs, on a local stand-in, wall-clock figures (the budget sets
# the pace, not the CPU: a noisy machine changes them little).
#
#   bash bench/keep_pace.sh github      # PAGES=617 LIMIT=250 DELAY=30ms TICK=60
#   bash bench/keep_pace.sh llm         # PROMPTS=20000 RPM=6000 TPM=2000000 CONCURRENCY=16
#   bash bench/keep_pace.sh day         # REGIONS=60 BUDGET=30 DAY=30 TICK=3 DAYS=5
#
# github: the dlt scenario. One repository's issues, PAGES pages behind
# `Link: next`, from a GitHub-shaped stand-in allowing LIMIT requests a
# minute (its X-RateLimit-* headers, a 403 past them), DELAY an answer; the
# pool says the same limit. Two ways to run it to the end:
#   - wait: one `portion run --wait 2m`;
#   - timer: a run every TICK seconds (as a systemd timer would start
#     them), no wait, until one exits 0.
# Reported: wall time, process starts, requests sent and refused (403),
# against the ideal: the limit's own pace, the requests past the first
# minute's LIMIT going LIMIT a minute, plus their answers' time
# ((ceil(PAGES / LIMIT) - 1) x 60 s + (the last minute's requests + 1) x DELAY).
#
# llm: a batch of PROMPTS prompts (a once-job of inputs, rows in SQLite,
# `max_wait: 2m`, CONCURRENCY requests in flight) against an
# OpenAI-shaped stand-in allowing RPM requests and TPM tokens a minute
# (x-ratelimit-* headers, 429 past them); the pools say the same, tokens
# estimated at 400 a call and settled to the answer's usage. Reported:
# wall time, answers 429, the most requests the stand-in saw in any 60 s
# (at most RPM), and the requests sent in the run's whole minutes against
# what the tighter limit allows in them (k minutes: k x RPM at most, the
# goal within 5% of it).
#
# day: a simulated day, shortened. A job of REGIONS regions of one page
# each, a sliding window of DAY seconds (the "day") holding BUDGET
# requests, fewer than the regions, so the budget is what limits; a timer
# starts a run every TICK seconds for DAYS days. Each run spends what is
# free and stops (75), or, with a wait of one tick (`run --wait TICK`),
# waits for the units freed before the next tick and goes on. Reported
# per way: each day's requests over BUDGET (the first day's burst is whole
# by construction), and the worst gap between two fetches of one region
# over the ideal (REGIONS / BUDGET days).
#
# Release builds of portion and the stand-in (built here unless
# PORTION=/path/to/portion and STANDIN=/path/to/portion-standin).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in github | llm | day) ;; *)
    echo "usage: $0 github|llm|day" >&2
    exit 2
    ;;
esac
if [ -z "${PORTION:-}" ] || [ -z "${STANDIN:-}" ]; then
    cargo build --release --quiet --bins --workspace
fi
portion=${PORTION:-target/release/portion}
standin_bin=${STANDIN:-target/release/portion-standin}
work=$(mktemp -d "${TMPDIR:-/tmp}/portion-pace.XXXXXX")
port=${PORT:-18297}
standin=
trap '[ -z "$standin" ] || kill "$standin" 2>/dev/null || true; rm -rf "$work"' EXIT

start_standin() {
    "$standin_bin" --listen "127.0.0.1:$port" --key bench-key --log "$work/upstream.jsonl" "$@" \
        > "$work/standin.out" 2> "$work/standin.err" &
    standin=$!
    for _ in $(seq 100); do
        grep -q listening "$work/standin.out" 2>/dev/null && return
        sleep 0.05
    done
    cat "$work/standin.err" >&2
    exit 1
}

stop_standin() {
    kill "$standin" 2>/dev/null || true
    wait "$standin" 2>/dev/null || true
    standin=
}

# statuses: how many answers of each status the stand-in logged.
statuses() {
    python3 -c '
import json, sys, collections
c = collections.Counter(json.loads(l)["status"] for l in open(sys.argv[1]))
print(" ".join(f"{k}:{v}" for k, v in sorted(c.items())))' "$work/upstream.jsonl"
}

now() { date +%s.%N; }

export BENCH_KEY=bench-key

github() {
    local pages=${PAGES:-617} limit=${LIMIT:-250} delay=${DELAY:-30ms} tick=${TICK:-60}
    local delay_s
    delay_s=$(python3 -c "import sys; print(float(sys.argv[1].removesuffix('ms')) / 1000)" "$delay")
    local ideal
    ideal=$(python3 -c "
import math; p, l, d = $pages, $limit, $delay_s
last = p - (math.ceil(p / l) - 1) * l
print(round((math.ceil(p / l) - 1) * 60 + (last + 1) * d, 1))")
    echo "$pages pages, $limit requests a minute, $delay an answer; ideal ${ideal} s"
    echo
    echo "| how | wall | ratio to ideal | runs | requests | refused (403) |"
    echo "|---|---|---|---|---|---|"
    for how in wait timer; do
        rm -rf "$work/out" "$work"/ledger.db* "$work/upstream.jsonl"
        cat > "$work/portion.yaml" <<EOF
store: embedded:$work/ledger.db
credentials:
  github:
    secret: { env: BENCH_KEY }
    upstream_headers: github
    pools:
      requests: [{ limit: $limit, per: 1m }]
endpoints:
  issues.list: { cost: { requests: 1 } }
jobs:
  issues:
    credential: github
    regions: [bench/repo]
    steps:
      - endpoint: issues.list
        request:
          url: "http://127.0.0.1:$port/repos/{region}/issues"
          headers: { Authorization: "Bearer {secret}" }
        paginate: { link: next, max_pages: $((pages + 10)) }
    output: $work/out
EOF
        start_standin --pages "$pages" --delay "$delay" --github-limit "$limit" --github-window 1m
        local t0 runs=0 code
        t0=$(now)
        if [ "$how" = wait ]; then
            runs=1
            code=0
            "$portion" -c "$work/portion.yaml" run --wait 2m > /dev/null 2> "$work/run.err" || code=$?
            [ "$code" -eq 0 ] || { tail -5 "$work/run.err" >&2; exit 1; }
        else
            while :; do
                runs=$((runs + 1))
                code=0
                "$portion" -c "$work/portion.yaml" run > /dev/null 2>> "$work/run.err" || code=$?
                [ "$code" -eq 0 ] && break
                [ "$code" -eq 75 ] || { tail -5 "$work/run.err" >&2; exit 1; }
                [ "$runs" -lt 50 ] || { echo "no end after 50 ticks" >&2; exit 1; }
                # (the next tick, as a timer starts it)
                sleep "$(python3 -c "print(max(0.0, $t0 + $runs * $tick - $(now)))")"
            done
        fi
        local wall
        wall=$(python3 -c "print(round($(now) - $t0, 1))")
        stop_standin
        local st sent refused
        st=$(statuses)
        sent=$(wc -l < "$work/upstream.jsonl")
        refused=$(python3 -c "import sys; print(dict(p.split(':') for p in sys.argv[1].split()).get('403', '0'))" "$st")
        echo "| $how | ${wall} s | $(python3 -c "print(f'{$wall / $ideal:.2f}x')") | $runs | $sent | $refused |"
    done
}

llm() {
    local n=${PROMPTS:-20000} rpm=${RPM:-6000} tpm=${TPM:-2000000} conc=${CONCURRENCY:-16}
    python3 -c "
import json
with open('$work/prompts.jsonl', 'w') as f:
    for i in range($n):
        f.write(json.dumps({'id': f'p{i}', 'prompt': f'What is topic {i}?'}) + '\n')"
    cat > "$work/portion.yaml" <<EOF
store: embedded:$work/ledger.db
credentials:
  openai:
    secret: { env: BENCH_KEY }
    upstream_headers: openai
    pools:
      requests: [{ limit: $rpm, per: 1m }]
      tokens: [{ limit: $tpm, per: 1m }]
endpoints:
  chat:
    cost:
      requests: 1
      tokens: { estimate: 400, actual: /usage/total_tokens }
jobs:
  summaries:
    credential: openai
    inputs: { file: prompts.jsonl, key: /id }
    once: true
    max_wait: 2m
    concurrency: $conc
    steps:
      - endpoint: chat
        request:
          method: POST
          url: http://127.0.0.1:$port/v1/chat/completions
          headers: { Authorization: "Bearer {secret}" }
          body:
            model: bench
            messages: [{ role: user, content: "{input.prompt}" }]
    output:
      sqlite: { path: $work/llm.db, table: summaries }
EOF
    start_standin --llm-requests "$rpm" --llm-tokens "$tpm"
    local t0 code=0
    t0=$(now)
    "$portion" -c "$work/portion.yaml" run > /dev/null 2> "$work/run.err" || code=$?
    local wall
    wall=$(python3 -c "print(round($(now) - $t0, 1))")
    stop_standin
    [ "$code" -eq 0 ] || { tail -5 "$work/run.err" >&2; exit 1; }
    echo "$n prompts, $rpm requests and $tpm tokens a minute, concurrency $conc, max_wait 2m"
    echo
    python3 - "$work/upstream.jsonl" "$n" "$rpm" "$wall" <<'PY'
import json, sys, bisect
path, n, rpm, wall = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
seen = [json.loads(l) for l in open(path)]
at = sorted(s["at_us"] / 1e6 for s in seen)
t0 = at[0]
most = max(bisect.bisect_left(at, t + 60) - i for i, t in enumerate(at))
refused = sum(1 for s in seen if s["status"] == 429)
k = int((at[-1] - t0) // 60)
sent = bisect.bisect_left(at, t0 + 60 * k)
print("| wall | requests | answered 429 | most in any 60 s | sent in the first k whole minutes | the limit allows | ratio |")
print("|---|---|---|---|---|---|---|")
ratio = f"{sent / (k * rpm):.3f}" if k else "n/a (under a minute)"
print(f"| {wall} s | {len(seen)} | {refused} | {most} | {sent} (k = {k}) | {k * rpm} | {ratio} |")
PY
}

day() {
    local regions=${REGIONS:-60} budget=${BUDGET:-30} day=${DAY:-30} tick=${TICK:-3} days=${DAYS:-5}
    local list
    list=$(seq -f 'bench/r%g' 1 "$regions" | paste -sd, -)
    echo "$regions regions of 1 page, $budget requests a ${day} s day (sliding), a run every ${tick} s, $days days"
    echo
    echo "| how | runs started | requests | each day over the budget | worst region gap over the ideal |"
    echo "|---|---|---|---|---|"
    for how in stop wait; do
        rm -rf "$work/out" "$work"/ledger.db* "$work/upstream.jsonl" "$work/run.err"
        cat > "$work/portion.yaml" <<EOF
store: embedded:$work/ledger.db
credentials:
  github:
    secret: { env: BENCH_KEY }
    pools:
      requests: [{ limit: $budget, per: ${day}s }]
endpoints:
  issues.list: { cost: { requests: 1 } }
jobs:
  issues:
    credential: github
    regions: [$list]
    steps:
      - endpoint: issues.list
        request:
          url: "http://127.0.0.1:$port/repos/{region}/issues"
          headers: { Authorization: "Bearer {secret}" }
    output: $work/out
EOF
        start_standin --pages 1
        local wait_args=()
        [ "$how" = stop ] || wait_args=(--wait "${tick}s")
        local t0 runs=0 end pids=()
        t0=$(now)
        end=$(python3 -c "print($t0 + $days * $day)")
        while python3 -c "import sys; sys.exit(0 if $(now) < $end else 1)"; do
            "$portion" -c "$work/portion.yaml" run "${wait_args[@]}" > /dev/null 2>> "$work/run.err" &
            pids+=($!)
            runs=$((runs + 1))
            sleep "$(python3 -c "print(max(0.0, $t0 + $runs * $tick - $(now)))")"
        done
        for p in "${pids[@]}"; do wait "$p" || true; done
        stop_standin
        python3 - "$work/upstream.jsonl" "$how" "$runs" "$regions" "$budget" "$day" "$days" "$t0" <<'PY'
import json, sys, collections
path, how, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
regions, budget, day, days, t0 = int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]), float(sys.argv[8])
seen = [json.loads(l) for l in open(path)]
per_day = collections.Counter(int((s["at_us"] / 1e6 - t0) // day) for s in seen)
shares = " ".join(f"{per_day.get(d, 0) / budget:.0%}" for d in range(days))
by_region = collections.defaultdict(list)
for s in seen:
    by_region[s["region"]].append(s["at_us"] / 1e6)
ideal = regions / budget * day
gaps = [b - a for ts in by_region.values() for a, b in zip(sorted(ts), sorted(ts)[1:])]
worst = max(gaps) / ideal if gaps else float("nan")
print(f"| {how} | {runs} | {len(seen)} | {shares} | {worst:.2f}x |")
PY
    done
}

"$1"
