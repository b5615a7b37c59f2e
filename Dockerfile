# Multi-stage build of both binaries: nodes-control (the balancer) and
# click-node (the reference node). Migrations are embedded at compile time,
# so no database is needed to build.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p nodes-control -p click-node

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/nodes-control /src/target/release/click-node /usr/local/bin/
COPY migrations /app/migrations
WORKDIR /app
EXPOSE 8000
CMD ["nodes-control"]
