#!/usr/bin/env bash
# `make bench-latency`: latency under a fixed offered rate (open loop, as
# wrk2) of nginx, HAProxy and nodes-control, each in front of three fresh
# click-nodes, interleaved in one run; draws the latency-versus-rate curve.
#
# For each rate in RATES, ROUNDS times, every balancer (in an order rotated
# per round, so the machine's drift spreads over all) gets fresh nodes and a fresh
# balancer, a warm-up that presses every id once (so the measured presses
# are of existing sessions), then `loadgen rate` offers the rate for
# DURATION seconds over CONNS connections and counts each press's latency
# from when it was due (coordinated omission corrected). A balancer that
# did not carry a rate (under 95 % answered, or over 1 % failed) in most
# rounds is not offered the higher ones. The curve and its table take the
# median of the rounds of each point. The generator runs on CPU 0, each balancer with
# its nodes (and Redis) on CPU 1 (PIN=none: no pinning).
#
# Knobs: RATES (2500 5000 7500 ... 17500 20000 25000 30000), ROUNDS (3),
# DURATION (5), CONNS (64), ID_POOL (10000), PIN (split|none), DATABASE_URL, NC_ENV,
# NC (the nodes-control binary), OUT (the chart, default
# docs/results/latency-vs-rate.png; its points beside it as .jsonl).
# Needs nginx, haproxy, redis-server, curl, taskset.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RATES=${RATES:-2500 5000 7500 10000 12500 15000 17500 20000 25000 30000}
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-64}
ID_POOL=${ID_POOL:-10000}
PIN=${PIN:-split}
DB=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
OUT=${OUT:-docs/results/latency-vs-rate.png}
for tool in nginx haproxy redis-server curl taskset python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y nginx haproxy redis-server curl)" >&2; exit 2; }
done
cargo build --release -q -p nodes-control -p click-node -p loadgen
NC=${NC:-$PWD/target/release/nodes-control}
NODE=$PWD/target/release/click-node
LOADGEN=$PWD/target/release/loadgen
WORK=$(mktemp -d /tmp/bench-latency.XXXXXX)
POINTS=${OUT%.png}.jsonl
# shellcheck source=bench/lib.sh
source bench/lib.sh

run_point() { # balancer rate -> one JSON line appended to POINTS
  local lb=$1 rate=$2 port line
  start_nodes
  port=$(free_port)
  "start_${lb//-/_}" "$port"
  wait_port "$port"
  # The first press is retried while the balancer is not ready (a 503
  # counts nothing).
  for _ in $(seq 100); do
    [[ $(press "$port" "ready-$lb") == *clicked* ]] && break
    sleep 0.1
  done
  line=$(TOKIO_WORKER_THREADS=1 on_cpu 0 "$LOADGEN" rate --url "http://127.0.0.1:$port" \
    --rate "$rate" --duration "$DURATION" --connections "$CONNS" --sessions "$ID_POOL" \
    --warm-up --label "$lb" 2>"$WORK/loadgen.log" || true)
  stop_all
  [ -n "$line" ] || { echo "lb=$lb rate=$rate FAILED: $(tail -1 "$WORK/loadgen.log")"; return 1; }
  echo "$line" >>"$POINTS"
  echo "$line"
  # Carried: go on to the next rate.
  python3 -c 'import json, sys; p = json.loads(sys.argv[1]); sys.exit(0 if p["achieved_rps"] >= 0.95 * p["offered_rps"] and p["errors"] * 100 <= p["sent"] else 1)' "$line"
}

mkdir -p "$(dirname "$OUT")"
: >"$POINTS"
echo "# bench-latency: rates=$RATES rounds=$ROUNDS duration=${DURATION}s conns=$CONNS ids=$ID_POOL pin=$PIN commit=$(git rev-parse --short HEAD 2>/dev/null || echo none) $(date -u +%FT%TZ)"
LBS=(nginx haproxy nodes-control)
declare -A saturated=() missed=()
i=0
for rate in $RATES; do
  missed=()
  for (( r = 0; r < ROUNDS; r++ )); do
    for (( j = 0; j < ${#LBS[@]}; j++ )); do
      lb=${LBS[$(( (j + i + r) % ${#LBS[@]} ))]}
      [ -n "${saturated[$lb]:-}" ] && continue
      run_point "$lb" "$rate" || missed[$lb]=$(( ${missed[$lb]:-0} + 1 ))
      sleep 1
    done
  done
  # Not carried in most rounds: not offered more.
  for lb in "${!missed[@]}"; do
    (( missed[$lb] * 2 > ROUNDS )) && saturated[$lb]=$rate
  done
  i=$((i + 1))
done
echo
"$LOADGEN" rate-curve "$POINTS" --out "$OUT"
