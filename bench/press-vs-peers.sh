#!/usr/bin/env bash
# `make bench-press`: nodes-control beside nginx and HAProxy, each in front
# of three fresh click-nodes, in one run, so that the ratios it prints
# compare like with like on a noisy machine.
#
#   nginx:          hash $http_x_session_id consistent, keep-alive upstreams
#   haproxy:        stick table on X-Session-Id, keep-alive upstreams
#   nodes-control:  its own Redis, Postgres at DATABASE_URL
#
# Every run starts fresh processes; rounds rotate the order (A B C, B C A,
# C A B) so the machine's drift cancels in the per-round ratios. Each
# round also reads, from /proc, the CPU the balancer (with its Redis) and
# its nodes spent per press: on a full core the tail follows it. wrk runs on
# CPU 0, each balancer with its nodes (and Redis) on CPU 1 (PIN=none: no
# pinning). wrk presses ID_POOL ids drawn at random, body and X-Session-Id
# header alike (bench/press.lua).
#
# Knobs: ROUNDS (3), DURATION (10s), WARMUP (3s), CONNS (64), ID_POOL
# (10000), PIN (split|none), DATABASE_URL, NC_ENV (extra VAR=value words for
# nodes-control), NEW_SESSIONS (1: a fourth contestant, nodes-control with
# every press a new id, and its rate beside existing sessions), NC (the
# nodes-control binary), NC_B (another build's binary: a contestant of its
# own, nodes-control-b, to compare two builds side by side; with
# NEW_SESSIONS=1 also nodes-control-b-new). Needs nginx,
# haproxy, wrk, redis-server, curl, taskset.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-3s}
CONNS=${CONNS:-64}
export ID_POOL=${ID_POOL:-10000}
PIN=${PIN:-split}
DB=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
for tool in nginx haproxy wrk redis-server curl taskset python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y nginx haproxy wrk redis-server curl)" >&2; exit 2; }
done
cargo build --release -q -p nodes-control -p click-node
NC=${NC:-$PWD/target/release/nodes-control}
NODE=$PWD/target/release/click-node
LUA=$PWD/bench/press.lua
WORK=$(mktemp -d /tmp/bench-press.XXXXXX)
RESULTS=$WORK/runs.txt
# shellcheck source=bench/lib.sh
source bench/lib.sh

start_nodes_control_b() { # port: the same with the binary NC_B
  start_nodes_control "$1" "$NC_B"
}

start_nodes_control_new() { # port: the same, pressed with new ids only
  start_nodes_control "$1"
}

start_nodes_control_b_new() { # port: NC_B, pressed with new ids only
  start_nodes_control "$1" "$NC_B"
}

# CPU time (clock ticks) of every process of the sessions `start` began
# (each is its own session: setsid), e.g. nginx's master and worker.
cpu_ticks() { # session ids...
  local sid pid t=0
  for sid in "$@"; do
    for pid in $(ps -o pid= -s "$sid"); do
      t=$((t + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)))
    done
  done
  echo "$t"
}

us_per() { # clock ticks, presses -> microseconds of CPU per press
  python3 -c 'import os, sys; us = int(sys.argv[1]) * 1e6 / os.sysconf("SC_CLK_TCK") / max(int(sys.argv[2]), 1); print(f"{us:.1f}")' "$@"
}

run_one() { # round balancer
  local round=$1 lb=$2 port a b c line new=0 nodes_sids lb_sids cpu_lb cpu_nodes requests
  [[ $lb == nodes-control*-new ]] && new=1
  start_nodes
  nodes_sids=("${PIDS[@]}")
  port=$(free_port)
  "start_${lb//-/_}" "$port"
  lb_sids=("${PIDS[@]:${#nodes_sids[@]}}") # the balancer and, for nodes-control, its Redis
  wait_port "$port"
  # Sticky: one id's count goes 1, 2, 3 only if every press reaches one node.
  # The first is retried while the balancer is not ready yet (a 503 counts
  # nothing).
  for _ in $(seq 100); do
    a=$(press "$port" "sticky-$round-$lb")
    [[ $a == *clicked* ]] && break
    sleep 0.1
  done
  b=$(press "$port" "sticky-$round-$lb"); c=$(press "$port" "sticky-$round-$lb")
  local sticky=FAIL
  [[ $a == *" 1 time"* && $b == *" 2 times"* && $c == *" 3 times"* ]] && sticky=ok
  # The warm-up presses the ids in order, so that every one is placed
  # before the measured run (drawn at random, a tenth were still new in it
  # at 16 connections: placements, slower, in a run of existing sessions).
  SEQUENTIAL=1 NEW=$new on_cpu 0 wrk -t1 -c"$CONNS" -d"$WARMUP" -s "$LUA" "http://127.0.0.1:$port" >/dev/null 2>&1 || true
  cpu_lb=$(cpu_ticks "${lb_sids[@]}"); cpu_nodes=$(cpu_ticks "${nodes_sids[@]}")
  line=$(NEW=$new on_cpu 0 wrk -t1 -c"$CONNS" -d"$DURATION" --timeout 5s -s "$LUA" "http://127.0.0.1:$port" | grep '^RESULT' || true)
  cpu_lb=$(($(cpu_ticks "${lb_sids[@]}") - cpu_lb)); cpu_nodes=$(($(cpu_ticks "${nodes_sids[@]}") - cpu_nodes))
  stop_all
  [ -n "$line" ] || { echo "round=$round lb=$lb FAILED (logs: $WORK)"; return; }
  # CPU per press in microseconds: the balancer's (with its Redis) and the
  # nodes' (what the same presses cost them behind each balancer).
  requests=$(sed 's/.*requests=\([0-9]*\).*/\1/' <<<"$line")
  echo "round=$round lb=$lb sticky=$sticky ${line#RESULT } cpu_us=$(us_per "$cpu_lb" "$requests") node_cpu_us=$(us_per "$cpu_nodes" "$requests")" | tee -a "$RESULTS"
}

LBS=(nginx haproxy nodes-control)
[ "${NEW_SESSIONS:-0}" = 1 ] && LBS+=(nodes-control-new)
[ -n "${NC_B:-}" ] && LBS+=(nodes-control-b)
[ -n "${NC_B:-}" ] && [ "${NEW_SESSIONS:-0}" = 1 ] && LBS+=(nodes-control-b-new)
echo "# bench-press: rounds=$ROUNDS duration=$DURATION conns=$CONNS ids=$ID_POOL pin=$PIN commit=$(git rev-parse --short HEAD 2>/dev/null || echo none) $(date -u +%FT%TZ)"
for (( r = 1; r <= ROUNDS; r++ )); do
  for (( j = 0; j < ${#LBS[@]}; j++ )); do
    run_one "$r" "${LBS[$(( (j + r - 1) % ${#LBS[@]} ))]}"
    sleep 1
  done
done
echo
python3 - "$RESULTS" <<'EOF'
import statistics, sys
runs = [dict(kv.split("=", 1) for kv in line.split()) for line in open(sys.argv[1])]
by = {}
for run in runs:
    by.setdefault(run["lb"], {})[run["round"]] = run
nginx = by.get("nginx", {})
print(f"{'balancer':<20} {'presses/s':>10} {'p99 ms':>8} {'vs nginx':>9} {'p99 vs nginx':>13} {'p99.9 ms':>9} {'CPU us/press':>13} {'errors':>7} sticky")
for lb in ["nginx", "haproxy", "nodes-control", "nodes-control-new", "nodes-control-b", "nodes-control-b-new"]:
    if lb in ("nodes-control-new", "nodes-control-b", "nodes-control-b-new") and lb not in by:
        continue
    rounds = by.get(lb, {})
    if not rounds:
        print(f"{lb:<20} no result"); continue
    rps = statistics.median(float(r["rps"]) for r in rounds.values())
    p99 = statistics.median(float(r["p99_ms"]) for r in rounds.values())
    shared = [k for k in rounds if k in nginx]
    ratio = statistics.median(float(rounds[k]["rps"]) / float(nginx[k]["rps"]) for k in shared) if shared else float("nan")
    p99_ratio = statistics.median(float(rounds[k]["p99_ms"]) / float(nginx[k]["p99_ms"]) for k in shared) if shared else float("nan")
    p999 = statistics.median(float(r["p999_ms"]) for r in rounds.values())
    # The balancer's CPU per press (its Redis included), then its nodes'.
    cpu = statistics.median(float(r["cpu_us"]) for r in rounds.values())
    node_cpu = statistics.median(float(r["node_cpu_us"]) for r in rounds.values())
    errors = sum(int(r["errors"]) for r in rounds.values())
    sticky = "ok" if all(r["sticky"] == "ok" for r in rounds.values()) else "FAIL"
    print(f"{lb:<20} {rps:>10.0f} {p99:>8.2f} {ratio:>9.2f} {p99_ratio:>13.2f} {p999:>9.2f} {f'{cpu:.1f} + {node_cpu:.1f}':>13} {errors:>7} {sticky}")
def per_round(of, to, field="rps"):
    """The median over shared rounds of `of`'s field divided by `to`'s (None: no round shared)."""
    a, b = by.get(of, {}), by.get(to, {})
    shared = [k for k in a if k in b]
    return statistics.median(float(a[k][field]) / float(b[k][field]) for k in shared) if shared else None
for new, old, name in [("nodes-control-new", "nodes-control", "nodes-control"), ("nodes-control-b-new", "nodes-control-b", "NC_B")]:
    if (ratio := per_round(new, old)) is not None:
        print(f"new sessions vs existing sessions ({name}, per round): {ratio:.2f}")
for b, a, what in [("nodes-control-b", "nodes-control", ""), ("nodes-control-b-new", "nodes-control-new", ", new sessions")]:
    if (ratio := per_round(b, a)) is not None:
        print(f"NC_B vs NC{what} (per round): presses/s {ratio:.3f}, p99 {per_round(b, a, 'p99_ms'):.3f}")
EOF
