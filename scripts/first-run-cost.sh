#!/usr/bin/env bash
# What a newcomer's first run costs on this machine, measured the way they meet it: a cold
# release build (what scripts/run-local.sh makes), a cold test build, then the README's test
# command on that build. Each build starts from an empty target directory of its own, so
# nothing cached by earlier work counts; the crates.io downloads are not timed (they are
# fetched first).
#
#   scripts/first-run-cost.sh            # all three; about 55 minutes on 2 cores
#   scripts/first-run-cost.sh --no-tests # the two builds only
#
# Prints one line per step (wall-clock minutes and seconds) and the core count; the README's
# "What the first run costs" quotes these lines. Needs what `cargo test --workspace` needs.
set -euo pipefail
cd "$(dirname "$0")/.."

run_tests=1
[ "${1:-}" = "--no-tests" ] && run_tests=0

export SQLX_OFFLINE=true
scratch="$(mktemp -d /var/tmp/first-run-cost.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT

cargo fetch --locked >/dev/null

timed() {
  local label="$1"
  shift
  local start end
  start=$(date +%s)
  "$@" >"$scratch/$label.log" 2>&1 || {
    echo "$label failed; its log:" >&2
    tail -50 "$scratch/$label.log" >&2
    exit 1
  }
  end=$(date +%s)
  printf '%-28s %dm %02ds\n' "$label" $(((end - start) / 60)) $(((end - start) % 60))
}

echo "cores: $(nproc)"
CARGO_TARGET_DIR="$scratch/release" timed "cold release build" \
  cargo build --release --workspace --locked
rm -rf "$scratch/release"
CARGO_TARGET_DIR="$scratch/test" timed "cold test build" \
  cargo test --workspace --locked --no-run
if [ "$run_tests" = 1 ]; then
  CARGO_TARGET_DIR="$scratch/test" timed "cargo test --workspace" \
    cargo test --workspace --locked
  grep -h '^test result:' "$scratch/cargo test --workspace.log" | awk '
    { passed += $4; failed += $6; ignored += $8 }
    END { printf "%-28s %d passed, %d failed, %d ignored\n", "tests", passed, failed, ignored }'
fi
