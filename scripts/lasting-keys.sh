#!/usr/bin/env bash
# Counts the keys without a TTL in the tests' Redis (REDIS_URL, else
# 127.0.0.1:6379); with --list, prints how many each key prefix holds
# instead. CI counts before and after the tests: a test that leaves a
# lasting key behind (its teardown missed it) fails the run.
set -euo pipefail
redis() { redis-cli -u "${REDIS_URL:-redis://127.0.0.1:6379}" "$@"; }
lasting() {
    redis --scan | awk '{ gsub(/"/, "\\\""); printf "TTL \"%s\"\nECHO \"%s\"\n", $0, $0 }' |
        redis | paste - - | awk -F'\t' '$1 == "-1" { print $2 }'
}
if [ "${1:-}" = "--list" ]; then
    lasting | awk -F: '{ print $1 }' | sort | uniq -c | sort -rn
else
    lasting | wc -l
fi
