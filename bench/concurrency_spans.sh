#!/usr/bin/env bash
# Where a run with N in flight loses time against the ideal (issue 25,
# "Performance"): one `portion run` of CALLS regions x 1 page against the
# stand-in answering in 100 ms and logging each request, for each build
# given, at N in NS, with the pages and the store on disk (DISK, default a
# folder under /tmp) and on tmpfs (SHM, default /dev/shm). Besides wall /
# ideal: the time from the run's start to its first request, and the
# per-slot overhead (request k's arrival less request k-N's plus 100 ms:
# what a slot spends between an answer and its next request: the page
# written and synced, the cursor saved, the next charge), split in two
# from the run's debug log (`-vv`): from the answer to its page written
# (both fsyncs included) and from a page written to the next request's
# send (the cursor saved, the place handed over, the next charge); the
# folder fsyncs the run made for its pages (builds that log them), and
# portion's CPU time and context switches (perf stat).
#
#   bash bench/concurrency_spans.sh target/release/portion /path/to/old/portion
#   CALLS=1280 NS="16 64" bash bench/concurrency_spans.sh target/release/portion
#   REPS=3 WHERE=disk bash bench/concurrency_spans.sh new old   # new, old, new, old, ...
#
# Needs perf, python3 and release builds (given as arguments).
set -euo pipefail
cd "$(dirname "$0")/.."
CALLS=${CALLS:-1280} NS=${NS:-64} REPS=${REPS:-1} WHERE=${WHERE:-disk tmpfs}
standin_bin=$PWD/target/release/portion-standin
work=$(mktemp -d "${TMPDIR:-/tmp}/portion-spans.XXXXXX")
shm=$(mktemp -d "${SHM:-/dev/shm}/portion-spans.XXXXXX")
trap 'rm -rf "$work" "$shm"' EXIT
printf bench-key-1 > "$work/key"
regions=$(seq -f 'R%g' 0 $((CALLS - 1)) | paste -sd, -)

# one BIN N DIR: prints the row.
one() {
    local bin=$1 n=$2 dir=$3
    # (pages moved aside, not deleted: see bench/timed_run.sh)
    [ ! -e "$dir/out" ] || mv "$dir/out" "$dir/set-aside.$(date +%s%N)"
    rm -rf "$dir"/ledger.db* "$work/up.jsonl"
    "$standin_bin" --listen 127.0.0.1:0 --key bench-key-1 --pages 1 --items 1 \
        --units 100000000 --delay 100ms --log "$work/up.jsonl" > "$work/standin.out" &
    local sp=$!
    for _ in $(seq 100); do grep -q listening "$work/standin.out" && break; sleep 0.1; done
    local up
    up=$(sed -n 's#.*listening on \(http://[0-9.:]*\).*#\1#p' "$work/standin.out")
    cat > "$work/portion.yaml" <<EOT
store: embedded:$dir/ledger.db
credentials:
  main:
    secret: { file: key }
    pools:
      units:
        - { limit: 100000000, per: 1h }
endpoints:
  videos.list: { cost: { units: 1 } }
jobs:
  bench:
    credential: main
    regions: [$regions]
    concurrency: $n
    steps:
      - endpoint: videos.list
        request:
          url: $up/youtube/v3/videos
          query: { part: snippet, chart: mostPopular, regionCode: "{region}", key: "{secret}" }
    output: $dir/out
EOT
    local s e
    s=$(date +%s%6N)
    perf stat -x, -e task-clock,context-switches -o "$work/stat" \
        "$bin" --config "$work/portion.yaml" -vv run > /dev/null 2> "$work/err" || true
    e=$(date +%s%6N)
    kill "$sp"; wait "$sp" 2>/dev/null || true
    python3 - "$s" "$e" "$n" "$work/up.jsonl" "$work/stat" "$bin" "$dir" "$work/err" <<'PY'
import json, re, sys
from datetime import datetime, timezone
s, e, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ups = [json.loads(l) for l in open(sys.argv[4])]
a = sorted(u["at_us"] for u in ups)
arrived = {u["region"]: u["at_us"] for u in ups}
us = lambda l: int(datetime.fromisoformat(l[:26]).replace(tzinfo=timezone.utc).timestamp() * 1e6)
sent, wrote, fsyncs = [], {}, "-"
for l in open(sys.argv[8]):
    if " GET " in l:
        sent.append(us(l))
    elif m := re.search(r"wrote .*\.r\d+\.(R\d+)\.", l):
        wrote[m.group(1)] = us(l)
    elif m := re.search(r"(\d+) new name\(s\) made durable by (\d+) folder", l):
        fsyncs = m.group(2)
sent.sort()
done = sorted(wrote.values())
# the k-th page written frees the place of request k + N
spans = lambda v: "%5.1f / %5.1f" % (sorted(v)[len(v) // 2] / 1000, sum(v) / len(v) / 1000) if v else "-"
to_written = [wrote[r] - arrived[r] - 100000 for r in wrote if r in arrived]
to_next = [sent[k + n] - done[k] for k in range(min(len(done), len(sent) - n))]
stat = {l.split(",")[2]: float(l.split(",")[0]) for l in open(sys.argv[5]) if l[0].isdigit()}
ideal = len(a) * 100 / n
gaps = sorted(a[k] - (a[k - n] + 100000) for k in range(n, len(a)))
pick = lambda q: gaps[int(q * (len(gaps) - 1))] / 1000
print("| %-10s | %-5s | %2d | %5d | %7.2f s | %6.2f s | %5.2fx | %6.0f ms | %5.1f / %5.1f ms | %s ms | %s ms | %5s | %5.2f s | %6d |" % (
    sys.argv[6].split("/")[-1][:10], "tmpfs" if sys.argv[7].startswith("/dev/shm") else "disk", n, len(a),
    (e - s) / 1e6, ideal / 1000, (e - s) / 1000 / ideal, (a[0] - s) / 1000, pick(0.5), pick(0.9),
    spans(to_written), spans(to_next), fsyncs,
    stat.get("task-clock", 0) / 1000, stat.get("context-switches", 0)))
PY
}

echo "$CALLS calls (regions x 1 page), stand-in delay 100 ms, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo '| build      | pages |  N | calls |      wall |    ideal | ratio | 1st req | slot overhead p50 / p90 | answer to written p50 / mean | written to next request p50 / mean | folder fsyncs |  CPU | ctx sw |'
echo '|------------|-------|----|-------|-----------|----------|-------|---------|-------------------------|------------------------------|------------------------------------|---------------|------|--------|'
for n in $NS; do
    for _ in $(seq "$REPS"); do
        for bin in "$@"; do
            for where in $WHERE; do
                case $where in disk) one "$bin" "$n" "$work" ;; tmpfs) one "$bin" "$n" "$shm" ;; esac
            done
        done
    done
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
