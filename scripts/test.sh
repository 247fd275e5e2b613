#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs what is missing, then runs every
# test of the workspace. Usage: scripts/test.sh [extra cargo test args]
#
# The tests run inside a private D-Bus session with gnome-keyring as the Secret Service, started
# unlocked before anything touches org.freedesktop.secrets (otherwise it comes up locked) and
# isolated in a temporary XDG_DATA_HOME, so the credential-store tests use a real keyring without
# touching the user's. Without dbus-run-session/gnome-keyring-daemon that one test is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib.sh
. scripts/lib.sh
ensure_build_deps

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/runner-manager-target}"
# Build every binary first: the test kit packs the fake Runner.Listener into its runner package,
# and tests of one crate must find the binaries of another.
cargo build --workspace --bins --locked

if command -v dbus-run-session >/dev/null && command -v gnome-keyring-daemon >/dev/null; then
    keyring_dir=$(mktemp -d)
    trap 'rm -rf "$keyring_dir"' EXIT
    export RM_TEST_KEYRING_DIR="$keyring_dir"
    # The keyring daemon leaves with the session bus when dbus-run-session ends. It gets its own
    # runtime directory too: without a usable XDG_RUNTIME_DIR (a non-login user, CI) it dies on
    # its control socket and D-Bus activation would start a locked one instead.
    dbus-run-session -- bash -c '
        set -euo pipefail
        mkdir -m 700 "$RM_TEST_KEYRING_DIR/run"
        eval "$(printf pw | XDG_DATA_HOME="$RM_TEST_KEYRING_DIR/data" \
            XDG_RUNTIME_DIR="$RM_TEST_KEYRING_DIR/run" \
            gnome-keyring-daemon --unlock --components=secrets)"
        # Wait until it owns the name (asking NameHasOwner does not activate anything).
        for _ in $(seq 100); do
            owned=$(dbus-send --session --print-reply --dest=org.freedesktop.DBus / \
                org.freedesktop.DBus.NameHasOwner string:org.freedesktop.secrets 2>&1 || true)
            [[ $owned == *"boolean true"* ]] && break
            sleep 0.05
        done
        export RM_TEST_SECRET_SERVICE=1
        cargo test --workspace --locked "$@"
    ' test.sh "$@"
else
    echo "test.sh: dbus-run-session or gnome-keyring-daemon is missing: the Secret Service" \
         "test will be skipped (install dbus and gnome-keyring to run it)" >&2
    cargo test --workspace --locked "$@"
fi
