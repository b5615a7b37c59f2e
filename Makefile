# Common runs. `make up` is the docker compose stack without Docker.
.PHONY: up down test lint fmt

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
