#!/usr/bin/env bash
# A fan-out over millions of values (issue 36, item 13): one `portion run`
# whose first step reads one page of VALUES values at /items/* and whose
# fan-out sends them in batches of BATCH; portion's peak memory (max RSS,
# /usr/bin/time) on both stores, and on Redis its SLOWLOG (every command
# slower than SLOW µs) and its peak memory. The values go to the store as
# the page is written, in chunks, never all held.
#
#   bash bench/fan_out_memory.sh                      # 3x10^6 distinct values
#   VALUES=16000000 MOD=10 bash bench/fan_out_memory.sh   # the issue's 32 MB page of tiny values
#   PORTION=/path/to/old/portion bash bench/fan_out_memory.sh   # another build
#
# Needs a release build (it runs `cargo build --release`), /usr/bin/time,
# python3 and redis-server.
set -euo pipefail
cd "$(dirname "$0")/.."
VALUES=${VALUES:-3000000} MOD=${MOD:-0} BATCH=${BATCH:-1000} SLOW=${SLOW:-1000}
PORT=${PORT:-18301} REDIS_PORT=${REDIS_PORT:-18302}

cargo build --release --quiet --bins
portion=${PORTION:-$PWD/target/release/portion}
work=$(mktemp -d "${TMPDIR:-/tmp}/portion-fan-out-memory.XXXXXX")
cleanup() {
    kill "${server_pid:-}" 2>/dev/null || true
    redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
    [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

# The upstream: /ids?page=1 is the page of values (each `i`, or `i % MOD`
# with MOD), any later page empty; /videos answers {}.
cat > "$work/serve.py" <<'PY'
import http.server, socketserver, sys
port, n, mod = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
vals = (str(i % mod) if mod else str(i) for i in range(n))
page = ('{"items":[' + ','.join(vals) + ']}').encode()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        body = page if self.path.startswith('/ids') and 'page=1' in self.path else (
            b'{"items":[]}' if self.path.startswith('/ids') else b'{}')
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
print(len(page), flush=True)
S(('127.0.0.1', port), H).serve_forever()
PY
python3 "$work/serve.py" "$PORT" "$VALUES" "$MOD" > "$work/serve.out" &
server_pid=$!
for _ in $(seq 600); do [ -s "$work/serve.out" ] && break; sleep 0.1; done
echo "page: $(head -1 "$work/serve.out") bytes, $VALUES values (MOD=$MOD), batches of $BATCH"

redis-server --port "$REDIS_PORT" --save '' --appendonly no --daemonize yes \
    --slowlog-log-slower-than "$SLOW" --dir "$work" > /dev/null
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

export XDG_STATE_HOME=$work/state  # (this host's history of each store: the bench's own)
printf 'bench-secret-key-1' > "$work/key"
chmod 600 "$work/key"
config() {
    cat <<YAML
store: $1
credentials:
  main:
    secret: { file: key }
    pools:
      units: [ { limit: 100000000, per: 1h } ]
endpoints:
  ids: { cost: { units: 1 } }
  videos: { cost: { units: 1 } }
jobs:
  details:
    credential: main
    steps:
      - endpoint: ids
        request: { url: "http://127.0.0.1:$PORT/ids", query: { key: "{secret}" } }
        paginate: { page: page, start: 1, until_empty: /items, max_pages: 5 }
      - endpoint: videos
        for_each: { from: /items/*, batch: $BATCH, join: ",", per_page: 1000000 }
        request: { url: "http://127.0.0.1:$PORT/videos", query: { id: "{batch}", key: "{secret}" } }
    output:
      folder: out-$2
YAML
}

echo "| store | exit | pages | wall | max RSS |"
echo "|---|---|---|---|---|"
for store in embedded redis; do
    case $store in
        embedded) url="embedded:$work/ledger.sqlite3" ;;
        redis) url="redis://127.0.0.1:$REDIS_PORT" ;;
    esac
    config "$url" "$store" > "$work/$store.yaml"
    set +e
    /usr/bin/time -f '%e %M' -o "$work/$store.time" \
        "$portion" -c "$work/$store.yaml" -q run 2> "$work/$store.err"
    code=$?
    set -e
    read -r wall rss < <(tail -1 "$work/$store.time")
    pages=$(find "$work/out-$store" -name '*.json' | wc -l)
    echo "| $store | $code | $pages | ${wall} s | $((rss / 1024)) MiB |"
done
echo
echo "Redis: $(redis-cli -p "$REDIS_PORT" slowlog len) command(s) over ${SLOW} µs; the slowest:"
redis-cli -p "$REDIS_PORT" --json slowlog get 128 | python3 -c '
import json, sys
for e in sorted(json.load(sys.stdin), key=lambda e: -e[2])[:5]:
    print("    %6d µs  %s (%d keys or fields)" % (e[2], e[3][0], len(e[3]) - 1))'
redis-cli -p "$REDIS_PORT" info memory | grep '^used_memory_peak_human' | sed 's/^/Redis /'
