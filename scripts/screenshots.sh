#!/usr/bin/env bash
# Regenerates docs/screenshots/*.png: the tray menu (as read over D-Bus), the sign-in window and
# the dashboard in their main states, light and dark, from the real tray, service and fake
# GitHub under Xvfb (tests/examples/screenshots.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
ensure_build_deps
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/runner-manager-target}"
cargo build --workspace --bins --examples --locked
"$CARGO_TARGET_DIR/debug/examples/screenshots" docs/screenshots
