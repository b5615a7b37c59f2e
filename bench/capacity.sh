#!/usr/bin/env bash
# `make bench-capacity`: the figures behind docs/capacity.md,
# measured on this machine against a Redis of its own and three click-nodes
# (no simulated delay):
#
#   1. one replica, presses of existing sessions: presses/s, Redis commands
#      per press (every command run, a script's own calls included, and the
#      most frequent by name);
#   2. the background: Redis commands per second of an idle replica;
#   3. one replica, every press a new session: presses/s, Redis commands
#      per new session, Redis bytes per session (used_memory grown / sessions);
#   4. two replicas on the same Redis, one wrk on each: presses/s together
#      (every phase drives the balancer with two wrk of CONNS/2, so that one
#      and two replicas meet the same client);
#   5. two replicas on the same Redis, every press a new session;
#   6. one more primary: the same two replicas over a Redis Cluster of three
#      primaries on loopback (scripts/redis-cluster.sh), new sessions and
#      existing ones: presses/s, Redis CPU per new session over all
#      primaries and the busiest primary's share;
#   7. expiry: a replica with SESSION_TTL_SECS=5 and a 1 s sweep, sessions
#      created, then Redis commands per expired session (idle rate taken off).
#
# Knobs: DURATION (10s), CONNS (64), ID_POOL (10000), PIN (none: every
# process floats over every CPU; split: wrk on CPU 0, the rest on CPU 1),
# DATABASE_URL. Needs wrk, redis-server, redis-cli, curl, python3.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
export ID_POOL=${ID_POOL:-10000}
PIN=${PIN:-none}
DB=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
for tool in wrk redis-server redis-cli curl python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y wrk redis-server curl)" >&2; exit 2; }
done
cargo build --release -q -p nodes-control -p click-node
NC=$PWD/target/release/nodes-control
NODE=$PWD/target/release/click-node
LUA=$PWD/bench/press.lua
WORK=$(mktemp -d /tmp/bench-capacity.XXXXXX)
# shellcheck source=bench/lib.sh
source bench/lib.sh
trap 'stop_all; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

REDIS=$(free_port)
start redis 1 redis-server --bind 127.0.0.1 --port "$REDIS" --save '' --appendonly no
wait_port "$REDIS"
start_nodes
NODES=""
for p in "${NODE_PORTS[@]}"; do NODES+="${NODES:+,}http://127.0.0.1:$p"; done
rcli() { redis-cli -p "$REDIS" "$@"; }
# Commands Redis ran since the last RESETSTAT (a script's own calls
# included), and per unit of work by command: "total evalsha=1.00 hget=2.00 ..".
counts() { # units
  rcli INFO commandstats | python3 -c '
import re, sys
units = float(sys.argv[1]) or 1
calls = {m[1]: int(m[2]) for m in re.finditer(r"cmdstat_([^:]+):calls=(\d+)", sys.stdin.read())}
top = sorted(calls.items(), key=lambda kv: -kv[1])[:8]
print(sum(calls.values()), " ".join(f"{k}={v / units:.2f}" for k, v in top if k not in ("config", "info")))' "$1"
}
per() { python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print(f'{a / b:.2f}' if b else 'n/a')" "$@"; }
field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p"; }

replica() { # name port extra-env... : a balancer replica on the shared Redis
  local name=$1 port=$2; shift 2
  start "$name" 1 env LISTEN_ADDR="127.0.0.1:$port" NODES="$NODES" ADMIN_TOKEN=bench \
    REDIS_URL="${REDIS_TARGET:-redis://127.0.0.1:$REDIS}" REDIS_KEY_PREFIX="${PREFIX:-capacity:}" DATABASE_URL="$DB" \
    RUST_LOG=warn "$@" "$NC"
  wait_port "$port"
  for _ in $(seq 100); do
    [[ $(press "$port" "ready-probe-$name") == *clicked* ]] && return 0
    sleep 0.1
  done
  echo "replica $name never answered a press; logs in $WORK" >&2
  exit 1
}
redis_cpu() { # -> Redis's CPU seconds so far (user + system, main thread and all)
  rcli INFO cpu | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'
}
cpu_us_per() { # before after units -> Redis CPU microseconds per unit
  python3 -c "import sys; a, b, n = map(float, sys.argv[1:]); print(f'{(b - a) * 1e6 / n:.1f}' if n else 'n/a')" "$@"
}
pg_calls() { # port -> the replica's Postgres calls so far
  curl -s "http://127.0.0.1:$1/metrics" | awk '/^nodes_control_postgres_call_duration_seconds_count/ {n = $2} END {print n + 0}'
}
load() { # port conns new(0|1) duration [tag of new ids] -> wrk's RESULT line
  NEW_TAG=${5:-} NEW=$3 SEQUENTIAL=${SEQUENTIAL:-0} on_cpu 0 wrk -t1 -c"$2" -d"$4" --timeout 5s -s "$LUA" "http://127.0.0.1:$1" | grep '^RESULT'
}

echo "# bench-capacity: duration=$DURATION conns=$CONNS ids=$ID_POOL pin=$PIN cpus=$(nproc) commit=$(git rev-parse --short HEAD 2>/dev/null || echo none) $(date -u +%FT%TZ)"
A=$(free_port)
replica a "$A"
SEQUENTIAL=1 load "$A" "$CONNS" 0 2s >/dev/null # every id of the pool placed (in order), caches warm

half=$((CONNS / 2))
both() { # port-a port-b new(0|1) -> "presses/s errors requests p99-of-a" from two wrk of CONNS/2 each
  load "$1" "$half" "$3" "$DURATION" a >"$WORK/a.txt" &
  local wa=$!
  load "$2" "$half" "$3" "$DURATION" b >"$WORK/b.txt" &
  wait "$wa" "$!"
  echo "$(($(field rps <"$WORK/a.txt") + $(field rps <"$WORK/b.txt"))) $(($(field errors <"$WORK/a.txt") + $(field errors <"$WORK/b.txt"))) $(($(field requests <"$WORK/a.txt") + $(field requests <"$WORK/b.txt"))) $(field p99_ms <"$WORK/a.txt")"
}
rcli CONFIG RESETSTAT >/dev/null
cpu_before=$(redis_cpu)
read -r rps errors req p99 <<<"$(both "$A" "$A" 0)"
read -r cmds breakdown <<<"$(counts "$req")"
ONE=$rps
echo "one replica, existing sessions: $rps presses/s, p99 $p99 ms, errors $errors; Redis per press: $(per "$cmds" "$req") commands ($breakdown), $(cpu_us_per "$cpu_before" "$(redis_cpu)" "$req") us of Redis CPU"

rcli CONFIG RESETSTAT >/dev/null
sleep 5
read -r cmds breakdown <<<"$(counts 5)"
IDLE_PER_S=$(per "$cmds" 5)
echo "one replica, idle: $IDLE_PER_S commands/s ($breakdown; health checks, leases, fences)"

mem_before=$(rcli INFO memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')
keys_before=$(rcli DBSIZE)
pg_before=$(pg_calls "$A")
rcli CONFIG RESETSTAT >/dev/null
cpu_before=$(redis_cpu)
read -r rps errors req p99 <<<"$(both "$A" "$A" 1)"
cpu_new=$(cpu_us_per "$cpu_before" "$(redis_cpu)" "$req")
read -r cmds breakdown <<<"$(counts "$req")"
pg_new=$(per "$(($(pg_calls "$A") - pg_before))" "$req")
mem_after=$(rcli INFO memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')
echo "one replica, new sessions: $rps presses/s, p99 $p99 ms, errors $errors; Redis per new session: $(per "$cmds" "$req") commands ($breakdown), $cpu_new us of Redis CPU; $(per "$((mem_after - mem_before))" "$req") bytes of Redis per session ($req sessions, keys $keys_before -> $(rcli DBSIZE)); Postgres calls of the replica per new session: $pg_new"

B=$(free_port)
replica b "$B"
load "$B" "$CONNS" 0 2s >/dev/null
read -r rps errors req p99 <<<"$(both "$A" "$B" 0)"
echo "two replicas, existing sessions: $rps presses/s ($(per "$rps" "$ONE")x one replica), p99 $p99 ms, errors $errors"
cpu_before=$(redis_cpu)
read -r rps errors req p99 <<<"$(both "$A" "$B" 1)"
SINGLE_NEW=$rps
echo "two replicas, new sessions, one Redis: $rps presses/s, p99 $p99 ms, errors $errors; $(cpu_us_per "$cpu_before" "$(redis_cpu)" "$req") us of Redis CPU per new session"
stop_all

# One more primary: the same two replicas over a three-primary cluster.
CLUSTER=$((20000 + RANDOM % 10000))
REDIS_TARGET=$(bash scripts/redis-cluster.sh start "$CLUSTER")
trap 'stop_all; bash scripts/redis-cluster.sh stop "$CLUSTER"; rm -rf "$WORK"' EXIT
cluster_cpu() { # -> CPU seconds of each primary so far, space-separated
  for p in $CLUSTER $((CLUSTER + 1)) $((CLUSTER + 2)); do
    redis-cli -p "$p" INFO cpu | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f ", s}'
  done
}
start_nodes
NODES=""
for p in "${NODE_PORTS[@]}"; do NODES+="${NODES:+,}http://127.0.0.1:$p"; done
PREFIX=capacity-cluster: replica d "$A"
PREFIX=capacity-cluster: replica e "$B"
SEQUENTIAL=1 load "$A" "$CONNS" 0 2s >/dev/null
SEQUENTIAL=1 load "$B" "$CONNS" 0 2s >/dev/null
read -r rps errors req p99 <<<"$(both "$A" "$B" 0)"
echo "two replicas, existing sessions, three primaries: $rps presses/s, p99 $p99 ms, errors $errors"
cpu_before=$(cluster_cpu)
read -r rps errors req p99 <<<"$(both "$A" "$B" 1)"
cpu_after=$(cluster_cpu)
echo "two replicas, new sessions, three primaries: $rps presses/s ($(per "$rps" "$SINGLE_NEW")x one Redis), p99 $p99 ms, errors $errors; $(python3 -c '
import sys
n = float(sys.argv[1]); a = list(map(float, sys.argv[2].split())); b = list(map(float, sys.argv[3].split()))
d = [y - x for x, y in zip(a, b)]
print(f"{sum(d) * 1e6 / n:.1f} us of Redis CPU per new session over the three primaries, the busiest {max(d) / sum(d) * 100:.0f} % of it")' "$req" "$cpu_before" "$cpu_after")"
stop_all
bash scripts/redis-cluster.sh stop "$CLUSTER"
unset REDIS_TARGET

# Expiry: its own Redis prefix and a short life; sessions created for 2 s,
# then counted out by the sweep.
start_nodes
NODES=""
for p in "${NODE_PORTS[@]}"; do NODES+="${NODES:+,}http://127.0.0.1:$p"; done
start redis2 1 redis-server --bind 127.0.0.1 --port "$REDIS" --save '' --appendonly no
wait_port "$REDIS"
rcli FLUSHALL >/dev/null
C=$(free_port)
PREFIX=capacity-expiry: replica c "$C" SESSION_TTL_SECS=5 SWEEP_INTERVAL_SECS=1
expired() { curl -s "http://127.0.0.1:$C/metrics" | awk '/^nodes_control_sessions_expired_total/ {n = $2} END {print n + 0}'; }
line=$(load "$C" 16 1 2s)
created=$(($(field requests <<<"$line") - $(field errors <<<"$line") + 1))
pg_before=$(pg_calls "$C")
rcli CONFIG RESETSTAT >/dev/null
cpu_before=$(redis_cpu)
started=$(date +%s.%N)
for _ in $(seq 300); do
  [ "$(expired)" -ge "$created" ] && break
  sleep 0.1
done
window=$(python3 -c "import time, sys; print(time.time() - float(sys.argv[1]))" "$started")
read -r cmds breakdown <<<"$(counts "$created")"
swept=$(expired)
cpu_expiry=$(cpu_us_per "$cpu_before" "$(redis_cpu)" "$swept")
pg_expiry=$(per "$(($(pg_calls "$C") - pg_before))" "$swept")
echo "expiry: $swept of $created sessions swept; Redis per expired session: $(python3 -c "import sys; c, w, i, n = map(float, sys.argv[1:]); print(f'{max(c - w * i, 0) / n:.2f}')" "$cmds" "$window" "$IDLE_PER_S" "$swept") commands ($cmds in ${window%.*} s, idle rate taken off), $cpu_expiry us of Redis CPU (idle included); Postgres calls of the replica per expired session: $pg_expiry (the nodes write the archive rows themselves)"
