#!/usr/bin/env bash
# Builds both services' runtime images where no image registry is reachable, and runs each
# against the local PostgreSQL, Redis and RabbitMQ until its /readyz answers 200:
#
#   scripts/image-check.sh          (as root: debootstrap and rootful podman)
#
# 1. a Debian bookworm base image (the release the Dockerfile's runtime stage starts from)
#    made with debootstrap from the host's Debian mirror, imported into podman once and kept
#    as $BASE_IMAGE (delete it with `podman rmi` to make it again);
# 2. both binaries from the host's release build (`cargo build --release`);
# 3. the Dockerfile's own runtime stages built by podman on that base, the host's binaries
#    standing in for the builder stage (which stays for machines with a registry);
# 4. each image run the way deploy/kubernetes runs it (user 10001 from the image, read-only
#    root filesystem, no capabilities, LOG_FORMAT=json, SHUTDOWN_DRAIN_SECS) with --network
#    host, against a database name nobody used (the service creates it), a fresh RabbitMQ
#    vhost, a Redis key prefix of its own and a free port, until /readyz is 200;
# 5. each container stopped with SIGTERM, which must end it with exit code 0 (the binary is
#    PID 1 and shuts down gracefully by itself);
# 6. containers, databases, vhost and Redis keys removed; the images stay tagged
#    order-service:check and inventory-service:check.
#
# Knobs: DEBIAN_MIRROR (default: the first Debian mirror in the host's apt sources),
# BASE_IMAGE (default localhost/order-inventory-base:bookworm), CONTAINER_RUNTIME (default:
# podman's own runtime if it can start a container here, else a runc wrapper, see below),
# CARGO_TARGET_DIR, TEST_DATABASE_SERVER. The first run spends several minutes in debootstrap.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET_DIR="${CARGO_TARGET_DIR:-target}"
BASE_IMAGE="${BASE_IMAGE:-localhost/order-inventory-base:bookworm}"
PG_SERVER="${TEST_DATABASE_SERVER:-postgres://postgres@127.0.0.1:5432}"
RUN="ic_$(date +%s)_$$"
VHOST="$RUN"
REDIS_PREFIX="$RUN:"
WORK="$(mktemp -d "${TMPDIR:-/var/tmp}/image-check.XXXXXX")"

log() { printf '\n==> %s\n' "$*"; }

log "tools"
missing=()
for tool in podman debootstrap runc; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ "${#missing[@]}" -gt 0 ]; then
  apt-get install -y -qq "${missing[@]}" >/dev/null \
    || (apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null)
fi
for tool in cargo curl psql redis-cli rabbitmqctl python3; do
  command -v "$tool" >/dev/null || { echo "error: $tool is needed" >&2; exit 1; }
done

CONTAINERS=()
cleanup() {
  local status=$?
  for container in "${CONTAINERS[@]}"; do podman rm -f "$container" >/dev/null 2>&1 || true; done
  for db in "${RUN}_orders" "${RUN}_inventory"; do
    psql "$PG_SERVER/postgres" -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true
  done
  redis-cli --scan --pattern "$REDIS_PREFIX*" 2>/dev/null | xargs -r redis-cli del >/dev/null 2>&1 || true
  rabbitmqctl -q delete_vhost "$VHOST" >/dev/null 2>&1 || true
  rm -rf "$WORK"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

debian_mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  # deb822 sources (URIs: ...) or one-line ones (deb URI suite ...): the first Debian archive.
  { cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true; } \
    | awk '$1 == "URIs:" || $1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/ && $i !~ /security/) { print $i; exit } }'
}

if podman image exists "$BASE_IMAGE"; then
  log "base image $BASE_IMAGE (kept from an earlier run)"
else
  mirror="$(debian_mirror)"
  [ -n "$mirror" ] || { echo "error: no Debian mirror found; set DEBIAN_MIRROR" >&2; exit 1; }
  log "base image $BASE_IMAGE: debootstrap bookworm (minbase) from $mirror"
  debootstrap --variant=minbase bookworm "$WORK/rootfs" "$mirror" >"$WORK/debootstrap.log" \
    || { tail -n 30 "$WORK/debootstrap.log" >&2; exit 1; }
  rm -rf "$WORK"/rootfs/var/cache/apt/archives/*.deb "$WORK"/rootfs/var/lib/apt/lists/*
  tar -C "$WORK/rootfs" -c . | podman import --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$WORK/rootfs"
fi

# Some sandboxes refuse the process rlimits runc sets for every container ("error setting
# rlimits for ready process: operation not permitted"). Where podman's own runtime cannot start
# a container, a wrapper removes them from the bundle before handing it to runc.
runtime_args=()
if [ -n "${CONTAINER_RUNTIME:-}" ]; then
  runtime_args=(--runtime "$CONTAINER_RUNTIME")
elif ! podman run --rm --network host "$BASE_IMAGE" true >/dev/null 2>&1; then
  cat >"$WORK/runc-without-rlimits" <<'WRAPPER'
#!/bin/sh
# runc, minus the process rlimits this machine refuses to set
bundle=""; prev=""
for a in "$@"; do
  [ "$prev" = "--bundle" ] && bundle="$a"
  case "$a" in --bundle=*) bundle="${a#--bundle=}";; esac
  prev="$a"
done
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
  python3 -c "import json,sys;p=sys.argv[1];c=json.load(open(p));c.get('process',{}).pop('rlimits',None);json.dump(c,open(p,'w'))" "$bundle/config.json"
fi
exec runc "$@"
WRAPPER
  chmod +x "$WORK/runc-without-rlimits"
  runtime_args=(--runtime "$WORK/runc-without-rlimits")
  echo "podman cannot start containers with its own runtime here; using a runc wrapper without rlimits"
fi

log "release build of both binaries (host toolchain)"
cargo build --release --locked -p order-service -p inventory-service --bins
mkdir -p "$WORK/binaries/out"
cp "$TARGET_DIR/release/order-service" "$TARGET_DIR/release/inventory-service" "$WORK/binaries/out/"

for service in inventory-service order-service; do
  log "image $service:check (the Dockerfile's runtime stage on $BASE_IMAGE)"
  podman "${runtime_args[@]}" build --quiet --network host \
    --build-arg RUNTIME_BASE="$BASE_IMAGE" --build-context builder="$WORK/binaries" \
    --target "$service" --tag "$service:check" . >/dev/null
done

log "vhost $VHOST"
rabbitmqctl -q add_vhost "$VHOST"
rabbitmqctl -q set_permissions -p "$VHOST" guest '.*' '.*' '.*'

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
INVENTORY_PORT="$(free_port)"
ORDER_PORT="$(free_port)"

run() { # service port database [extra env...]
  local service=$1 port=$2 database=$3
  shift 3
  local name="${RUN}_$service"
  podman "${runtime_args[@]}" run --detach --name "$name" --network host \
    --read-only --cap-drop ALL --security-opt no-new-privileges \
    --env HTTP_ADDR="127.0.0.1:$port" --env DATABASE_URL="$PG_SERVER/$database" \
    --env REDIS_KEY_PREFIX="$REDIS_PREFIX" \
    --env AMQP_URL="amqp://guest:guest@127.0.0.1:5672/$VHOST" \
    --env LOG_FORMAT=json --env SHUTDOWN_DRAIN_SECS=1 "$@" \
    "$service:check" >/dev/null
  CONTAINERS+=("$name")
}

ready() { # service port
  local service=$1 port=$2
  for _ in $(seq 1 120); do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")" = 200 ]; then
      # Read from the host: `podman exec` would need the rlimits the wrapper drops.
      local pid uid
      pid="$(podman inspect --format '{{.State.Pid}}' "${RUN}_$service")"
      uid="$(stat -c %u "/proc/$pid")"
      [ "$uid" = 10001 ] || { echo "error: $service runs as uid $uid, not 10001" >&2; exit 1; }
      echo "$service: /readyz 200 on port $port, running as uid $uid"
      return
    fi
    sleep 0.5
  done
  echo "error: $service never became ready" >&2
  podman logs --tail 30 "${RUN}_$service" >&2 || true
  exit 1
}

log "run both images against the local PostgreSQL, Redis and RabbitMQ"
run inventory-service "$INVENTORY_PORT" "${RUN}_inventory"
run order-service "$ORDER_PORT" "${RUN}_orders" --env INVENTORY_URL="http://127.0.0.1:$INVENTORY_PORT"
ready inventory-service "$INVENTORY_PORT"
ready order-service "$ORDER_PORT"

log "SIGTERM: each container must exit 0"
for service in order-service inventory-service; do
  name="${RUN}_$service"
  podman stop --time 30 "$name" >/dev/null
  code="$(podman inspect --format '{{.State.ExitCode}}' "$name")"
  [ "$code" = 0 ] || { echo "error: $service exited $code" >&2; podman logs --tail 30 "$name" >&2; exit 1; }
  echo "$service: exited 0"
done
log "image check passed"
