#!/usr/bin/env bash
# The docker compose stack without Docker: three click-nodes (8081..8083)
# and the balancer (8000) against the local Postgres and Redis. Logs and
# pids go to .run/; scripts/down.sh stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/services.sh nodes_control
cargo build --release -p nodes-control -p click-node -p loadgen
mkdir -p .run
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/nodes_control}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
export ADMIN_TOKEN=${ADMIN_TOKEN:-dev-admin-token}

nodes=()
for i in 1 2 3; do
    port=$((8080 + i))
    ./target/release/click-node --host 127.0.0.1 --port "$port" --name "n$i" \
        --min-delay-ms "${MIN_DELAY_MS:-50}" --max-delay-ms "${MAX_DELAY_MS:-150}" \
        >".run/n$i.log" 2>&1 &
    echo $! >".run/n$i.pid"
    nodes+=("http://127.0.0.1:$port")
done
NODES=$(IFS=,; echo "${nodes[*]}") LISTEN_ADDR=${LISTEN_ADDR:-127.0.0.1:8000} \
    ./target/release/nodes-control >.run/balancer.log 2>&1 &
echo $! >.run/balancer.pid

for _ in $(seq 1 60); do
    if curl -fsS http://127.0.0.1:8000/readyz >/dev/null 2>&1; then
        echo "up: balancer http://127.0.0.1:8000 (ADMIN_TOKEN=$ADMIN_TOKEN), nodes ${nodes[*]}; logs in .run/"
        exit 0
    fi
    sleep 0.5
done
echo "the balancer did not become ready; see .run/balancer.log" >&2
exit 1
