# Common runs. `make up` is the docker compose stack without Docker;
# `make help` lists every target with the line that says what it does.
.PHONY: help up down node test test-cluster e2e lint fmt mutants check-model bench-sweep bench-press bench-latency bench-slow bench-capacity agents sessions compare
.DEFAULT_GOAL := help

## help: this list
help:
	@awk '/^## / { sub(/^## /, ""); i = index($$0, ": "); printf "  %-15s %s\n", substr($$0, 1, i - 1), substr($$0, i + 2) }' $(MAKEFILE_LIST)

## up: the stack without Docker (local Postgres and Redis; nodes on 8081-8083, balancer on 8000)
up:
	bash scripts/up.sh

## down: stop what `make up` (and `make node`) started
down:
	bash scripts/down.sh

# Start (or restart) node N of the `make up` stack: `make node N=4`.
## node: start or restart node N of the `make up` stack (make node N=4)
node:
	bash scripts/node.sh $(N)

## test: every test (cargo test --workspace), against Postgres and Redis on 127.0.0.1
test:
	cargo test --workspace

# The API and fault tests again on a three-primary Redis Cluster on
# loopback (needs redis-server and redis-cli 7; CI runs it after the tests).
## test-cluster: the API and fault tests again on a three-primary Redis Cluster
test-cluster:
	bash scripts/test-cluster.sh

# The status page in headless Chromium and schemathesis against /openapi.json,
# on a stack of its own (see e2e/run.sh; CI runs it after the tests).
## e2e: the status page in headless Chromium and schemathesis against /openapi.json
e2e:
	bash e2e/run.sh

## lint: cargo fmt --check and clippy -D warnings
lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings

## fmt: cargo fmt
fmt:
	cargo fmt --all

# The model's large bounds, which `cargo test --workspace` leaves out (the
# tests marked ignored in crates/model/tests/guards.rs); .ci/run runs them.
# `--workspace` resolves features as `cargo test --workspace` does, so the
# binary it built is reused (`-p model` would build every dependency again).
## check-model: the model checked at its large bounds (three presses, faults together)
check-model:
	cargo test --workspace --test guards -- --ignored

# Every mutant of the shared decisions caught by a test (installs
# cargo-mutants from crates.io when missing; about half a minute).
## mutants: cargo mutants over crates/protocol; fails on a surviving mutant
mutants:
	command -v cargo-mutants >/dev/null || cargo install --locked cargo-mutants
	cargo mutants -p protocol --output target

# One sweep of 10,000 expired among 1,000,000 live sessions (needs Redis, Postgres).
## bench-sweep: one sweep of 10,000 expired among 1,000,000 sessions
bench-sweep:
	cargo bench --bench sweep

# nodes-control beside nginx and HAProxy over the same click-nodes, one
# interleaved run, ratios (needs nginx, haproxy, wrk, redis-server; knobs:
# ROUNDS, DURATION, CONNS, PIN). See bench/press-vs-peers.sh.
## bench-press: presses beside nginx and HAProxy over the same nodes (CONNS=, NEW_SESSIONS=1)
bench-press:
	bash bench/press-vs-peers.sh

# Latency under a fixed offered rate (open loop, coordinated omission
# corrected) of nginx, HAProxy and nodes-control over the same nodes,
# interleaved; draws docs/results/latency-vs-rate.png (knobs: RATES,
# DURATION, CONNS; see bench/latency-vs-rate.sh).
## bench-latency: latency-versus-rate curve beside nginx and HAProxy (open loop)
bench-latency:
	bash bench/latency-vs-rate.sh

# Slow nodes at full speed: /process of 50-150 ms nodes, directly and
# through nodes-control; p99 difference and connections held (needs wrk,
# redis-server; see bench/slow-nodes.sh).
## bench-slow: 50-150 ms nodes directly and through the balancer
bench-slow:
	bash bench/slow-nodes.sh

# The figures of docs/capacity.md: presses/s of one and two
# replicas, Redis commands per press, per new session and per expiry, Redis
# bytes per session (needs wrk, redis-server; see bench/capacity.sh).
## bench-capacity: the capacity figures (one and two replicas, Redis cost per press)
bench-capacity:
	bash bench/capacity.sh

# Load experiments against the stack of `make up` (results in results/).
LOADGEN = ./target/release/loadgen
RESULTS ?= results

## agents: loadgen agents against `make up` (GET /process, per-node spread)
agents:
	$(LOADGEN) agents --url http://127.0.0.1:8000 --label agents --out-dir $(RESULTS)

## sessions: loadgen sessions against `make up` (counts and stickiness checked)
sessions:
	$(LOADGEN) sessions --url http://127.0.0.1:8000 --out-dir $(RESULTS)

# Starts one balancer per strategy on the nodes of `make up` (it wipes their
# sessions when it registers them: run it on a demo stack, not a live one).
## compare: loadgen compare, one balancer per strategy on the `make up` nodes
compare:
	$(LOADGEN) compare --strategies rr,wrr,lc,ch,maglev,hrw,p2c,random \
		--nodes http://127.0.0.1:8081,http://127.0.0.1:8082,http://127.0.0.1:8083 \
		--balancer-bin ./target/release/nodes-control --out-dir $(RESULTS)
