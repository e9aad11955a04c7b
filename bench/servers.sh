#!/usr/bin/env bash
# Local Redis servers for the benchmarks in BENCHMARKS.md: one server on
# port 16399 and a 3-master Cluster on 17001-17003 (cluster bus on
# 27001-27003), loopback only, no persistence, data under /tmp/portion-bench.
#
#   bash bench/servers.sh start
#   bash bench/servers.sh stop
set -euo pipefail
dir=/tmp/portion-bench
case "${1:-}" in
start)
    mkdir -p "$dir"
    redis-server --port 16399 --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$dir" --daemonize yes --pidfile "$dir/single.pid" --logfile "$dir/single.log"
    for i in 1 2 3; do
        mkdir -p "$dir/c$i"
        redis-server --port "1700$i" --bind 127.0.0.1 --save '' --appendonly no \
            --cluster-enabled yes --cluster-port "2700$i" --cluster-config-file nodes.conf \
            --dir "$dir/c$i" --daemonize yes --pidfile "$dir/c$i.pid" --logfile "$dir/c$i.log"
    done
    sleep 0.5
    redis-cli --cluster create 127.0.0.1:17001 127.0.0.1:17002 127.0.0.1:17003 \
        --cluster-replicas 0 --cluster-yes >/dev/null
    until redis-cli -p 17001 cluster info | grep -q cluster_state:ok; do sleep 0.2; done
    echo "single:  redis://127.0.0.1:16399/0"
    echo "cluster: redis+cluster://127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003"
    ;;
stop)
    for p in "$dir"/*.pid; do
        [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null || true
    done
    sleep 0.5
    rm -rf "$dir"
    ;;
*)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
