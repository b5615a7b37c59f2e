# Common runs. `make up` is the docker compose stack without Docker.
.PHONY: up down test lint fmt bench-sweep bench-press

up:
	bash scripts/up.sh

down:
	bash scripts/down.sh

test:
	cargo test --workspace

lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all

# One sweep of 10,000 expired among 1,000,000 live sessions (needs Redis, Postgres).
bench-sweep:
	cargo bench --bench sweep

# Press throughput through the balancer started by `make up` (needs wrk).
bench-press:
	wrk -t2 -c64 -d10s -s bench/press.lua http://127.0.0.1:8000
