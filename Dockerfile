# syntax=docker/dockerfile:1
#
# One multi-stage build for both services; pick one with the build target:
#
#   docker build --target order-service     -t order-service .
#   docker build --target inventory-service -t inventory-service .
#
# (docker-compose.yml does this per service.) The cache mounts below need BuildKit, which
# `docker build` and `docker compose` (v2) use by default; with the old docker-compose 1.x set
# DOCKER_BUILDKIT=1 COMPOSE_DOCKER_CLI_BUILD=1.
#
# No SQLx offline data (.sqlx/) and no database at build time: the project's queries are
# checked at run time (`sqlx::query(...)`, not the `query!` macros). The migrations in
# migrations/ are embedded into the binaries at compile time by `sqlx::migrate!`, and each
# service creates its database and applies them when it starts, so the image ships no SQL.

# The runtime stage's base. Where no registry is reachable, scripts/image-check.sh passes a Debian
# base it made with debootstrap (--build-arg RUNTIME_BASE=...) and the host's release binaries in
# place of the builder stage (--build-context builder=...); the rest is built as written. (An ARG
# used in a FROM line must come before the first FROM.)
ARG RUNTIME_BASE=debian:bookworm-slim

# ---- build ---------------------------------------------------------------------------------------
FROM rust:1-bookworm AS builder
# protoc: the etcd client (STOCK_LOCK=etcd) compiles etcd's protocol files at build time.
RUN apt-get update \
    && apt-get install -y --no-install-recommends protobuf-compiler \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The query macros check every statement against .sqlx/ (committed), never a live database.
ENV SQLX_OFFLINE=true
# Both binaries in one cargo invocation: the shared crates compile once. The registry, git and
# target caches survive between builds, so a code change recompiles only the crates it touches.
# The target dir is a cache mount (not part of the layer), hence the copy to /out.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p order-service -p inventory-service \
    && mkdir -p /out \
    && cp target/release/order-service target/release/inventory-service /out/

# ---- common runtime --------------------------------------------------------------------------------
FROM ${RUNTIME_BASE} AS runtime
# ca-certificates: for any TLS endpoint a deployment points the services at. No curl: the
# compose healthchecks use bash's /dev/tcp instead, which keeps the image small. Unpinned on
# purpose: certificates should be the distribution's current ones.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin app
USER 10001:10001
ENV RUST_LOG=info
# The binary is PID 1 and handles SIGTERM itself (graceful shutdown), so no init is needed.
STOPSIGNAL SIGTERM

# ---- inventory-service -----------------------------------------------------------------------------
FROM runtime AS inventory-service
COPY --from=builder /out/inventory-service /usr/local/bin/inventory-service
# Inside a container the service must listen on all interfaces, not the local default 127.0.0.1.
ENV HTTP_ADDR=0.0.0.0:8081
EXPOSE 8081
ENTRYPOINT ["/usr/local/bin/inventory-service"]

# ---- order-service (also the default target) -------------------------------------------------------
FROM runtime AS order-service
COPY --from=builder /out/order-service /usr/local/bin/order-service
ENV HTTP_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/order-service"]
