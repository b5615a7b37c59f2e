#!/usr/bin/env bash
# Stops what scripts/up.sh started (RUN_DIR as there, default .run).
set -u
cd "$(dirname "$0")/.."
run=${RUN_DIR:-.run}
for pid in "$run"/*.pid; do
    [ -e "$pid" ] || continue
    kill "$(cat "$pid")" 2>/dev/null || true
    rm -f "$pid"
done
echo "stopped"
