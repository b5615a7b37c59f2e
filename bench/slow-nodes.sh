#!/usr/bin/env bash
# `make bench-slow`: slow nodes at full speed. Three click-nodes answering
# /process in 50-150 ms (the load experiments' agents) are loaded with wrk
# directly (one node) and through nodes-control (STRATEGY=rr over the
# three), at CONNS connections; prints both latency distributions, the
# difference of their p99, and the most connections nodes-control held to
# the nodes (at most NODE_MAX_IN_FLIGHT per node). A node's latency here is
# a sleep, so the difference is what the balancer adds.
#
# Knobs: DURATION (10s), CONNS (64), MIN_DELAY_MS (50), MAX_DELAY_MS (150),
# PIN (split|none), DATABASE_URL. Needs wrk, redis-server, curl, taskset, ss.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
MIN_DELAY_MS=${MIN_DELAY_MS:-50}
MAX_DELAY_MS=${MAX_DELAY_MS:-150}
PIN=${PIN:-split}
DB=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
for tool in wrk redis-server curl taskset ss python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y wrk redis-server curl iproute2)" >&2; exit 2; }
done
cargo build --release -q -p nodes-control -p click-node
NC=$PWD/target/release/nodes-control
NODE=$PWD/target/release/click-node
WORK=$(mktemp -d /tmp/bench-slow.XXXXXX)
# shellcheck source=bench/lib.sh
source bench/lib.sh

NODE_PORTS=()
for i in 1 2 3; do
  port=$(free_port)
  start "node$i" 1 "$NODE" --host 127.0.0.1 --port "$port" --name "n$i" \
    --database-url "$DB" --min-delay-ms "$MIN_DELAY_MS" --max-delay-ms "$MAX_DELAY_MS"
  NODE_PORTS+=("$port")
done
for port in "${NODE_PORTS[@]}"; do wait_port "$port"; done

redis=$(free_port)
start redis 1 redis-server --bind 127.0.0.1 --port "$redis" --save '' --appendonly no
wait_port "$redis"
nodes=""
for p in "${NODE_PORTS[@]}"; do nodes+="${nodes:+,}http://127.0.0.1:$p"; done
lb=$(free_port)
start nodes-control 1 env LISTEN_ADDR="127.0.0.1:$lb" NODES="$nodes" ADMIN_TOKEN=bench \
  REDIS_URL="redis://127.0.0.1:$redis" REDIS_KEY_PREFIX="bench-slow:$$-$RANDOM:" \
  DATABASE_URL="$DB" STRATEGY=rr RUST_LOG=warn "$NC"
wait_port "$lb"
sleep 1

load() { # name url -> one line of figures
  local name=$1 url=$2 out
  out=$(on_cpu 0 wrk -t1 -c"$CONNS" -d"$DURATION" --latency "$url")
  awk -v name="$name" '
    /Requests\/sec/ { rps = $2 }
    /^ +50%/ { p50 = $2 } /^ +90%/ { p90 = $2 } /^ +99%/ { p99 = $2 }
    /Non-2xx/ { non2xx = $NF }
    END { printf "%s rps=%s p50=%s p90=%s p99=%s non2xx=%s\n", name, rps, p50, p90, p99, non2xx + 0 }' <<<"$out"
}

ms() { # wrk's 12.34ms / 1.23s / 900us -> ms
  awk '{ v = $1; if (v ~ /us$/) { sub(/us$/, "", v); v /= 1000 } else if (v ~ /ms$/) { sub(/ms$/, "", v) } else if (v ~ /s$/) { sub(/s$/, "", v); v *= 1000 } printf "%.2f", v }' <<<"$1"
}

direct=$(load direct "http://127.0.0.1:${NODE_PORTS[0]}/process/req?user_id=1")
peak=0
( while sleep 0.5; do
    n=0
    for p in "${NODE_PORTS[@]}"; do
      n=$((n + $(ss -Htn state established "( dport = :$p )" | wc -l)))
    done
    echo "$n"
  done >"$WORK/conns.txt" ) &
watcher=$!
through=$(load nodes-control "http://127.0.0.1:$lb/process/req?user_id=1")
kill "$watcher" 2>/dev/null || true
peak=$(sort -n "$WORK/conns.txt" | tail -1)

echo "$direct"
echo "$through"
d99=$(ms "$(sed 's/.*p99=\([^ ]*\).*/\1/' <<<"$direct")")
t99=$(ms "$(sed 's/.*p99=\([^ ]*\).*/\1/' <<<"$through")")
echo "p99 through nodes-control minus direct: $(awk -v a="$t99" -v b="$d99" 'BEGIN { printf "%.2f", a - b }') ms; most connections to the nodes: ${peak:-0} (CONNS=$CONNS)"
