#!/usr/bin/env bash
# End to end against a real stack (three click-nodes and the balancer, with
# a Redis of its own and Postgres reached through a proxy this script can
# cut), on a database of its own made afresh: the status page in headless
# Chromium, then schemathesis on /openapi.json, first healthy (the admin
# commands last: they remove the nodes), then with Redis, Postgres and
# every node gone, each phase with fixed probes (e2e/probes.py) beside the random
# cases; last, every documented status must have been reached (or be
# listed, with the test that proves it, in e2e/unreached.txt).
#
# Needs: python3 with venv, redis-server, Postgres on 127.0.0.1:5432,
# Debian's chromium and chromium-driver (installed when missing and root).
# Binaries from BIN_DIR (target/debug, built here if missing).
set -euo pipefail
cd "$(dirname "$0")/.."

work=${E2E_DIR:-target/e2e}
bin=${BIN_DIR:-target/debug}
venv=${E2E_VENV:-target/e2e-venv}
token=e2e-admin-token

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get install -y -qq chromium chromium-driver >/dev/null
    else
        echo "install Debian's chromium and chromium-driver first" >&2
        exit 1
    fi
fi
if [ ! -x "$venv/bin/schemathesis" ] || ! "$venv/bin/python" -c 'import selenium' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "schemathesis==4.32.5" "selenium==4.*"
fi
if [ ! -x "$bin/nodes-control" ] || [ ! -x "$bin/click-node" ]; then
    cargo build -p nodes-control -p click-node
fi

rm -rf "$work"
mkdir -p "$work"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Three consecutive free ports for the nodes.
for _ in $(seq 1 50); do
    node_base=$((20000 + RANDOM % 20000))
    python3 -c "
import socket, sys
for p in range($node_base + 1, $node_base + 4):
    s = socket.socket(); s.bind(('127.0.0.1', p)); s.close()" 2>/dev/null && break
done
redis_port=$(free_port)
proxy_port=$(free_port)
balancer_port=$(free_port)
base=http://127.0.0.1:$balancer_port

redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize yes --pidfile "$PWD/$work/redis.pid" --dir "$PWD/$work" --logfile "$PWD/$work/redis.log"
python3 e2e/tcp_proxy.py "127.0.0.1:$proxy_port" 127.0.0.1:5432 &
echo $! >"$work/proxy.pid"
# The balancer's first call asks whether its database exists: were the
# proxy not listening yet, it would take the refusal for "it exists" and
# never create it (a fresh machine's first run failed so).
for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$proxy_port") 2>/dev/null && break
    sleep 0.05
done

cleanup() {
    RUN_DIR=$work/run bash scripts/down.sh >/dev/null 2>&1 || true
    for pid in "$work/proxy.pid" "$work/redis.pid"; do
        [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null || true
    done
}
trap cleanup EXIT

# A fresh machine's conditions: the balancer keeps its membership in
# Postgres, so a database left by an earlier run would bring back that
# run's nodes (dead now, down after the rebuild) beside this run's.
psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS nodes_control_e2e WITH (FORCE)" >/dev/null

RUN_DIR=$work/run BALANCER_PORT=$balancer_port NODE_PORT_BASE=$node_base BIN_DIR=$bin SKIP_BUILD=1 \
    MIN_DELAY_MS=1 MAX_DELAY_MS=5 ADMIN_TOKEN=$token REDIS_URL=redis://127.0.0.1:$redis_port \
    DATABASE_URL=postgres://postgres@127.0.0.1:$proxy_port/nodes_control_e2e \
    bash scripts/up.sh

echo "== the status page in headless Chromium"
"$venv/bin/python" e2e/status_page.py "$base" "$token" "http://127.0.0.1:$((node_base + 3))" \
    --screenshot "$work/status.png"
# The README's picture is the last run's (a run from a checkout refreshes it).
cp "$work/status.png" docs/status.png

curl -fsS "$base/openapi.json" >"$work/openapi.json"
echo "== fixed probes, healthy stack"
python3 e2e/probes.py "$base" "$token" healthy "$work/probes-healthy.har"
schemathesis() {
    "$venv/bin/schemathesis" run "$base/openapi.json" -H "Authorization: Bearer $token" \
        --no-color --generation-database none --seed 1 --report har "$@"
}
healthy_checks=not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance
echo "== schemathesis, healthy stack"
# The admin commands last: the fuzzer reuses addresses it saw in answers,
# so it removes and drains the stack's own nodes, after which a press is
# rightly a 503 no_node_available. Everything else first, on a stack
# that still has its nodes; then /node alone, which must not fail either.
schemathesis --checks "$healthy_checks" --exclude-path /node \
    --max-examples 200 --report-har-path "$work/healthy.har"
echo "== schemathesis, healthy stack, admin commands"
schemathesis --checks "$healthy_checks" --include-path /node \
    --max-examples 200 --report-har-path "$work/healthy-admin.har"

echo "== schemathesis, Redis, Postgres and every node gone"
kill "$(cat "$work/redis.pid")" "$(cat "$work/proxy.pid")"
for pid in "$work"/run/n*.pid; do kill "$(cat "$pid")"; done
sleep 1
echo "== fixed probes, outage"
python3 e2e/probes.py "$base" "$token" outage "$work/probes-outage.har"
# 503 is the documented answer to an outage, so no not_a_server_error here;
# an undocumented status (a 500) still fails status_code_conformance.
schemathesis --checks status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
    --max-examples 20 --report-har-path "$work/outage.har"

echo "== documented statuses reached"
python3 e2e/statuses.py "$work/openapi.json" "$work/healthy.har" "$work/healthy-admin.har" "$work/outage.har" \
    "$work/probes-healthy.har" "$work/probes-outage.har" \
    --allow-unreached e2e/unreached.txt
