#!/usr/bin/env bash
# The docker compose stack without Docker: three click-nodes (8081..8083)
# and the balancer (8000) against the local Postgres and Redis. Logs and
# pids go to .run/; scripts/down.sh stops everything.
#
# Settings come from the environment, then `.env`, then the defaults below
# (so a token set in `.env` is the one in force). For tests and side-by-side
# stacks: RUN_DIR (.run), BALANCER_PORT (8000), NODE_PORT_BASE (8080: nodes
# on base+1..base+3), BIN_DIR with SKIP_BUILD=1 to use binaries built already.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -f .env ]; then
    # The environment wins over .env, as dotenvy does for the binaries.
    while IFS='=' read -r key value; do
        [[ $key =~ ^[A-Z_][A-Z0-9_]*$ ]] || continue
        [ -n "${!key+set}" ] || export "$key=$value"
    done < <(grep -v '^[[:space:]]*#' .env)
fi
run=${RUN_DIR:-.run}
balancer_port=${BALANCER_PORT:-8000}
node_base=${NODE_PORT_BASE:-8080}
bin=${BIN_DIR:-target/release}

# One stack per run directory: a second `make up` would find its ports
# taken, and overwriting the pid files would orphan the first stack.
mkdir -p "$run"
for pid in "$run"/*.pid; do
    [ -e "$pid" ] || continue
    if kill -0 "$(cat "$pid")" 2>/dev/null; then
        echo "a stack is already up ($(basename "$pid" .pid) is pid $(cat "$pid")); run 'make down' first" >&2
        exit 1
    fi
    rm -f "$pid"
done
for port in "$balancer_port" $((node_base + 1)) $((node_base + 2)) $((node_base + 3)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "port $port is in use; stop what listens there (or set BALANCER_PORT / NODE_PORT_BASE)" >&2
        exit 1
    fi
done

bash scripts/services.sh
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    echo "building the release binaries (the first time takes several minutes)..."
    cargo build --release -p nodes-control -p click-node -p loadgen
fi
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/nodes_control}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
export ADMIN_TOKEN=${ADMIN_TOKEN:-dev-admin-token}
# A development stack may create its database; a deployment must not.
export CREATE_DATABASE=${CREATE_DATABASE:-true}

nodes=()
for i in 1 2 3; do
    port=$((node_base + i))
    "$bin/click-node" --host 127.0.0.1 --port "$port" --name "n$i" \
        --min-delay-ms "${MIN_DELAY_MS:-50}" --max-delay-ms "${MAX_DELAY_MS:-150}" \
        >"$run/n$i.log" 2>&1 &
    echo $! >"$run/n$i.pid"
    nodes+=("http://127.0.0.1:$port")
done
NODES=$(IFS=,; echo "${nodes[*]}") LISTEN_ADDR=127.0.0.1:$balancer_port \
    "$bin/nodes-control" >"$run/balancer.log" 2>&1 &
echo $! >"$run/balancer.pid"

# "up" only when every process is alive and answering.
dead() {
    for pid in "$run"/*.pid; do
        kill -0 "$(cat "$pid")" 2>/dev/null || { basename "$pid" .pid; return 0; }
    done
    return 1
}
for _ in $(seq 1 60); do
    if name=$(dead); then
        echo "$name exited at start; see $run/$name.log" >&2
        bash scripts/down.sh >/dev/null
        exit 1
    fi
    ready=1
    curl -fsS "http://127.0.0.1:$balancer_port/readyz" >/dev/null 2>&1 || ready=0
    for node in "${nodes[@]}"; do
        curl -fsS "$node/health" >/dev/null 2>&1 || ready=0
    done
    if [ "$ready" = 1 ]; then
        echo "up: balancer http://127.0.0.1:$balancer_port (ADMIN_TOKEN=$ADMIN_TOKEN), nodes ${nodes[*]}; logs in $run/"
        exit 0
    fi
    sleep 0.5
done
echo "the stack did not become ready; see $run/*.log" >&2
bash scripts/down.sh >/dev/null
exit 1
