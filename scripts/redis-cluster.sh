#!/usr/bin/env bash
# A Redis Cluster of three primaries on loopback, for tests and benches:
#   scripts/redis-cluster.sh start PORT   # primaries on PORT, PORT+1, PORT+2
#   scripts/redis-cluster.sh stop PORT
#   scripts/redis-cluster.sh crash PORT N # kill -9 primary PORT+N, start it again
#                                         # empty (it keeps its slots: nodes.conf)
#   scripts/redis-cluster.sh save PORT N  # primary PORT+N writes a snapshot (RDB)
#   scripts/redis-cluster.sh rollback PORT N # kill -9 it, start it on that snapshot
# No persistence but `save`, no replicas; state in a temp directory. Prints the
# REDIS_URL that reaches it (redis+cluster://...). Needs redis-server and
# redis-cli (7.x).
set -euo pipefail

command=${1:-}
port=${2:-7101}
ports=("$port" $((port + 1)) $((port + 2)))
dir=${TMPDIR:-/tmp}/nodes-control-cluster-$port

start_one() {
    redis-server --port "$1" --bind 127.0.0.1 --daemonize yes \
        --cluster-enabled yes --cluster-config-file "$dir/nodes-$1.conf" \
        --cluster-node-timeout 2000 --save "" --appendonly no --dbfilename "dump-$1.rdb" \
        --dir "$dir" --logfile "$dir/redis-$1.log" >/dev/null
    for _ in $(seq 50); do
        redis-cli -p "$1" ping >/dev/null 2>&1 && return
        sleep 0.1
    done
}

stop() {
    for p in "${ports[@]}"; do
        redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true
    done
    rm -rf "$dir"
}

case "$command" in
start)
    stop
    mkdir -p "$dir"
    for p in "${ports[@]}"; do
        start_one "$p"
    done
    redis-cli --cluster create $(printf '127.0.0.1:%s ' "${ports[@]}") \
        --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 ||
        { cat "$dir/create.log" >&2; exit 1; }
    for p in "${ports[@]}"; do
        for _ in $(seq 100); do
            redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' && break
            sleep 0.1
        done
        redis-cli -p "$p" cluster info | grep -q '^cluster_state:ok' ||
            { echo "cluster on $p is not ok" >&2; exit 1; }
    done
    echo "redis+cluster://$(printf '127.0.0.1:%s,' "${ports[@]}" | sed 's/,$//')"
    ;;
stop)
    stop
    ;;
save)
    p=$((port + ${3:?which primary: 0, 1 or 2}))
    before=$(redis-cli -p "$p" lastsave)
    redis-cli -p "$p" bgsave >/dev/null
    for _ in $(seq 100); do
        [ "$(redis-cli -p "$p" lastsave)" != "$before" ] && exit 0
        sleep 0.05
    done
    echo "primary $p wrote no snapshot" >&2
    exit 1
    ;;
crash | rollback)
    p=$((port + ${3:?which primary: 0, 1 or 2}))
    [ "$command" = crash ] && rm -f "$dir/dump-$p.rdb"
    pid=$(redis-cli -p "$p" info server | tr -d '\r' | sed -n 's/^process_id://p')
    kill -9 "$pid"
    # Until the port is free (a killed daemon may linger as a zombie).
    for _ in $(seq 100); do
        redis-cli -p "$p" ping >/dev/null 2>&1 || break
        sleep 0.05
    done
    start_one "$p"
    ;;
*)
    echo "usage: $0 start|stop [first port, default 7101] | crash|save|rollback PORT N" >&2
    exit 2
    ;;
esac
