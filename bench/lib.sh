# Helpers shared by the bench scripts (sourced; the caller sets WORK, a
# scratch directory, PIN, split or none, NODE, the click-node binary, DB,
# the nodes' DATABASE_URL, and NC, the nodes-control binary). The three
# balancers, each on the nodes of the last start_nodes (NODE_PORTS):
#   nginx:          hash $http_x_session_id consistent, keep-alive upstreams
#   haproxy:        stick table on X-Session-Id, keep-alive upstreams
#   nodes-control:  its own Redis, Postgres at DB
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

start_nginx() { # port
  local servers="" p
  for p in "${NODE_PORTS[@]}"; do servers+="    server 127.0.0.1:$p;"$'\n'; done
  mkdir -p "$WORK/nginx/logs"
  cat >"$WORK/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  # keepalive: idle upstream connections kept, above the largest CONNS
  # run (at 128, nginx reconnected under 256 clients: 31.8 us of node CPU
  # a press against 17.3 for the others).
  upstream nodes {
    hash \$http_x_session_id consistent;
$servers    keepalive 1024;
  }
  server {
    listen 127.0.0.1:$1;
    location / {
      proxy_pass http://nodes;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
EOF
  start nginx 1 nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx"
}

start_haproxy() { # port
  local servers="" i=0 p
  for p in "${NODE_PORTS[@]}"; do i=$((i + 1)); servers+="  server n$i 127.0.0.1:$p"$'\n'; done
  cat >"$WORK/haproxy.cfg" <<EOF
global
  nbthread 1
  maxconn 4000
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
frontend presses
  bind 127.0.0.1:$1
  default_backend nodes
backend nodes
  balance leastconn
  stick-table type string len 128 size 200k expire 30m
  stick on req.hdr(X-Session-Id)
  http-reuse always
$servers
EOF
  start haproxy 1 haproxy -f "$WORK/haproxy.cfg"
}

start_nodes_control() { # port [binary]
  local redis nodes="" p bin=${2:-$NC}
  redis=$(free_port)
  start redis 1 redis-server --bind 127.0.0.1 --port "$redis" --save '' --appendonly no
  wait_port "$redis"
  for p in "${NODE_PORTS[@]}"; do nodes+="${nodes:+,}http://127.0.0.1:$p"; done
  # shellcheck disable=SC2086
  start nodes-control 1 env LISTEN_ADDR="127.0.0.1:$1" NODES="$nodes" ADMIN_TOKEN=bench \
    REDIS_URL="redis://127.0.0.1:$redis" REDIS_KEY_PREFIX="bench:$$-$RANDOM:" DATABASE_URL="$DB" \
    RUST_LOG=warn ${NC_ENV:-} "$bin"
}
