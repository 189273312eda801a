#!/usr/bin/env bash
# What one speed mechanism buys: the tree is built as committed and again with the mechanism
# taken out (scripts/ablations/NAME.patch applied in a scratch worktree), and both builds are
# compared by scripts/compare-builds.sh, interleaved in one sitting (A is the build without,
# B the build with: B/A above 1 on a rate, below 1 on a time or a cost, is what it buys).
#
#   scripts/ablate.sh NAME                       # remembered-stock, hold-ends-in-batches, …
#   WORKLOADS=checkout scripts/ablate.sh hold-ends-in-batches
#   scripts/ablate.sh --build-only NAME          # the two builds, no measurement
#
# A mechanism with a setting that turns it off is measured with one build instead
# (A_ENV="BATCH_LINGER_MS=0" scripts/compare-builds.sh DIR DIR): see docs/benchmarks/.
# Builds go to ABLATION_BUILDS (default /var/tmp/ablation-builds/COMMIT-with and
# COMMIT-without-NAME-PATCHHASH),
# compiled in ABLATION_TREE (default /var/tmp/ablation-tree, a worktree) with CARGO_TARGET_DIR
# (default /var/tmp/release-target); ABLATION_COMMIT (default HEAD) is the commit measured. A
# patch written against an older tree may no longer apply: it is the record of what a figure
# measured, and is rewritten when its mechanism moves.
set -euo pipefail
cd "$(dirname "$0")/.."

build_only=false
if [ "${1:-}" = "--build-only" ]; then
  build_only=true
  shift
fi
[ $# -eq 1 ] || { echo "usage: $0 [--build-only] NAME (one of: $(cd scripts/ablations && ls ./*.patch | sed 's|./||; s|.patch||' | tr '\n' ' '))" >&2; exit 2; }
name="$1"
patch="$PWD/scripts/ablations/$name.patch"
[ -f "$patch" ] || { echo "no such ablation: $patch" >&2; exit 2; }

commit="$(git rev-parse --short "${ABLATION_COMMIT:-HEAD}")"
tree="${ABLATION_TREE:-/var/tmp/ablation-tree}"
builds="${ABLATION_BUILDS:-/var/tmp/ablation-builds}"
# Absolute: cargo runs in the worktree, the binaries are copied from here.
export CARGO_TARGET_DIR="$(realpath -m "${CARGO_TARGET_DIR:-/var/tmp/release-target}")"
export SQLX_OFFLINE=true

if [ ! -e "$tree/.git" ]; then
  git worktree prune
  git worktree add --detach "$tree" "$commit" >/dev/null
fi

# Builds the worktree at `$commit`, with the patch `$2` applied when given, into `$1` (kept
# between runs: its name carries the commit and the patch's own hash).
build() {
  local out="$1" with_patch="${2:-}"
  if [ -x "$out/order-service" ] && [ -x "$out/inventory-service" ]; then
    echo "reusing $out"
    return
  fi
  git -C "$tree" checkout --quiet --detach --force "$commit"
  git -C "$tree" reset --quiet --hard
  git -C "$tree" clean -fdq
  if [ -n "$with_patch" ]; then
    git -C "$tree" apply "$with_patch" \
      || { echo "$with_patch no longer applies to $commit: rewrite it" >&2; exit 1; }
  fi
  echo "building $out"
  (cd "$tree" && cargo build --release --locked --quiet -p order-service -p inventory-service --bins)
  # Copied aside first: an interrupted copy never leaves a half binary to be reused.
  rm -rf "$out.partial"
  mkdir -p "$out.partial"
  cp "$CARGO_TARGET_DIR/release/order-service" "$CARGO_TARGET_DIR/release/inventory-service" "$out.partial/"
  rm -rf "$out"
  mv "$out.partial" "$out"
  git -C "$tree" reset --quiet --hard
  git -C "$tree" clean -fdq
}

with="$builds/$commit-with"
without="$builds/$commit-without-$name-$(git hash-object "$patch" | cut -c1-8)"
build "$with"
build "$without" "$patch"
if "$build_only"; then
  echo "without: $without"
  echo "with:    $with"
  exit 0
fi
scripts/compare-builds.sh "$without" "$with"
