#!/usr/bin/env bash
# Benchmark: the tray app's cost and responsiveness (tests/examples/tray-bench.rs): start →
# registered with the tray host, RSS with no window open, CPU over an idle window, service
# event → menu updated p50/p99 (read over D-Bus). Runs the real tray, service and fake GitHub
# under Xvfb with the tests' fake tray host.
# Usage: scripts/bench-tray.sh [--release] [EVENTS=50] [IDLE_SECS=60]
#   --release  measure a release build of the tray (built here first; ~10 min from cold)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
ensure_build_deps
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/runner-manager-target}"
if [[ ${1:-} == --release ]]; then
    shift
    cargo build --release -p runner-manager-tray --locked --quiet
    export RM_BENCH_TRAY="$CARGO_TARGET_DIR/release/runner-manager-tray"
fi
cargo build --workspace --bins --examples --locked --quiet
"$CARGO_TARGET_DIR/debug/examples/tray-bench" "${1:-50}" "${2:-60}"
