#!/usr/bin/env bash
# Starts (or restarts) node N of the `make up` stack: click-node nN on
# NODE_PORT_BASE+N (8080+N), logs and pid in RUN_DIR (.run) like the others,
# so `make down` stops it too. `make node N=4` starts a fourth one to add;
# `make node N=2` restarts n2 (a new process: its counts are gone, and the
# balancer notices by its new instance id).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:?usage: scripts/node.sh N}
[[ $n =~ ^[0-9]+$ ]] || { echo "N must be a number, not $n" >&2; exit 2; }
run=${RUN_DIR:-.run}
node_base=${NODE_PORT_BASE:-8080}
bin=${BIN_DIR:-target/release}
port=$((node_base + n))
mkdir -p "$run"
[ -x "$bin/click-node" ] || { echo "no $bin/click-node: run 'make up' first (it builds)" >&2; exit 1; }
if [ -e "$run/n$n.pid" ] && kill "$(cat "$run/n$n.pid")" 2>/dev/null; then
    # Wait until its port is free again.
    for _ in $(seq 1 50); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
        sleep 0.1
    done
    echo "stopped n$n"
fi
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is in use by something this stack did not start" >&2
    exit 1
fi
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/nodes_control}
"$bin/click-node" --host 127.0.0.1 --port "$port" --name "n$n" \
    --min-delay-ms "${MIN_DELAY_MS:-50}" --max-delay-ms "${MAX_DELAY_MS:-150}" \
    >>"$run/n$n.log" 2>&1 &
echo $! >"$run/n$n.pid"
for _ in $(seq 1 50); do
    if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
        echo "n$n up on http://127.0.0.1:$port (logs in $run/n$n.log)"
        exit 0
    fi
    sleep 0.1
done
echo "n$n did not answer /health; see $run/n$n.log" >&2
exit 1
