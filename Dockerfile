# Multi-stage build of both binaries: nodes-control (the balancer) and
# click-node (the reference node). Migrations are embedded at compile time,
# so no database is needed to build, and the image carries none.
#
# cargo-chef builds the dependencies in a layer of their own, keyed by the
# manifests and Cargo.lock only: a change to the sources rebuilds our crates,
# not the few hundred dependencies.
FROM rust:1-bookworm AS chef
RUN cargo install cargo-chef --locked
WORKDIR /src

FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS build
COPY --from=planner /src/recipe.json recipe.json
RUN cargo chef cook --release --locked --recipe-path recipe.json -p nodes-control -p click-node
COPY . .
RUN cargo build --release --locked -p nodes-control -p click-node

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home nodes
COPY --from=build /src/target/release/nodes-control /src/target/release/click-node /usr/local/bin/
USER nodes
EXPOSE 8000
# The balancer's liveness (compose overrides it per service: readiness for
# the balancer, /health for the nodes on 8080).
HEALTHCHECK --interval=5s --timeout=3s --retries=10 \
    CMD curl -fsS http://localhost:8000/healthz || exit 1
CMD ["nodes-control"]
