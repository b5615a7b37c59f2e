# Helpers shared by the bench scripts (sourced; the caller sets WORK, a
# scratch directory, PIN, split or none, NODE, the click-node binary, and
# DB, the nodes' DATABASE_URL).
PIDS=()

on_cpu() { # cpu command... : runs pinned unless PIN=none
  local cpu=$1; shift
  if [ "$PIN" = none ]; then "$@"; else taskset -c "$cpu" "$@"; fi
}
start() { # log-name cpu command... -> background (pinned), remembered
  local name=$1 cpu=$2; shift 2
  if [ "$PIN" = none ]; then
    setsid "$@" >"$WORK/$name.log" 2>&1 </dev/null &
  else
    setsid taskset -c "$cpu" "$@" >"$WORK/$name.log" 2>&1 </dev/null &
  fi
  PIDS+=("$!")
}
stop_all() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
}
trap 'stop_all; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
wait_port() { # port
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on $1; logs in $WORK" >&2
  trap - EXIT; stop_all; exit 1
}
press() { # port id -> the answer's body
  curl -s --max-time 2 -X POST -H 'Content-Type: application/json' -H "X-Session-Id: $2" \
    --data "{\"session_id\":\"$2\"}" "http://127.0.0.1:$1/press" || true
}

start_nodes() { # -> NODE_PORTS
  NODE_PORTS=()
  local i port
  for i in 1 2 3; do
    port=$(free_port)
    start "node$i" 1 "$NODE" --host 127.0.0.1 --port "$port" --name "n$i" \
      --database-url "$DB" --min-delay-ms 0 --max-delay-ms 0
    NODE_PORTS+=("$port")
  done
  for port in "${NODE_PORTS[@]}"; do wait_port "$port"; done
}
