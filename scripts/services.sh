#!/usr/bin/env bash
# Makes sure Postgres (127.0.0.1:5432) and Redis (127.0.0.1:6379) answer,
# starting the local servers if they do not, and that the given databases
# exist. Used by .ci/run and scripts/up.sh; docker compose users do not need it.
set -euo pipefail

wait_for() { # name, command...
    local name=$1; shift
    for _ in $(seq 1 60); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.5
    done
    echo "$name does not answer" >&2
    return 1
}

if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
    echo "starting Postgres"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
fi
wait_for Postgres pg_isready -h 127.0.0.1 -p 5432 -q

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    echo "starting Redis"
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
fi
wait_for Redis redis-cli -h 127.0.0.1 -p 6379 ping

for db in "$@"; do
    if ! psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
        echo "creating database $db"
        psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE \"$db\"" >/dev/null
    fi
done
