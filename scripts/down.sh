#!/usr/bin/env bash
# Stops what scripts/up.sh started (RUN_DIR as there, default .run).
set -u
cd "$(dirname "$0")/.."
run=${RUN_DIR:-.run}
stopped=()
for pid in "$run"/*.pid; do
    [ -e "$pid" ] || continue
    if kill "$(cat "$pid")" 2>/dev/null; then
        stopped+=("$(basename "$pid" .pid)")
    fi
    rm -f "$pid"
done
if [ ${#stopped[@]} -eq 0 ]; then
    echo "nothing was running"
else
    echo "stopped ${stopped[*]}"
fi
