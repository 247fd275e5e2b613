#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs what is missing, then runs every
# test of the workspace. Usage: scripts/test.sh [extra cargo test args]
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib.sh
. scripts/lib.sh
ensure_build_deps

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/runner-manager-target}"
# Build every binary first: the test kit packs the fake Runner.Listener into its runner package,
# and tests of one crate must find the binaries of another.
cargo build --workspace --bins --locked
cargo test --workspace --locked "$@"
