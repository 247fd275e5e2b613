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
ensure_tun_device
# A copy of the tests' output goes here too when the caller names a file (CI sums it up).
export RM_TEST_LOG="${RM_TEST_LOG:-/dev/null}"
# Build every binary first: the test kit packs the fake Runner.Listener into its runner package,
# and tests of one crate must find the binaries of another.
cargo build --workspace --bins --locked

# The update tests apply a real newer build: this checkout built with the next patch version
# (scripts/release.sh --profile dev, sharing the compiled dependencies; ~2 min), signed with a
# throwaway key made here.
release_tmp=$(mktemp -d)
trap 'rm -rf "$release_tmp"' EXIT
current=$(sed -n '/^\[workspace.package\]/,/^\[/ s/^version = "\(.*\)"/\1/p' Cargo.toml)
IFS=. read -r major minor patch <<< "${current%%-*}"
export RM_TEST_RELEASE_VERSION="$major.$minor.$((patch + 1))"
minisign -G -W -f -p "$release_tmp/test.pub" -s "$release_tmp/test.key" >/dev/null
RM_RELEASE_ALLOW_DIRTY=1 RUNNER_MANAGER_SIGNING_KEY_FILE="$release_tmp/test.key" \
    RUNNER_MANAGER_RELEASE_PUBKEY_FILE="$release_tmp/test.pub" \
    scripts/release.sh "$RM_TEST_RELEASE_VERSION" --profile dev --out "$release_tmp/release" 2>&1 |
    grep -v '^ *Compiling'
export RM_TEST_RELEASE_DIR="$release_tmp/release" RM_TEST_RELEASE_PUBKEY="$release_tmp/test.pub"

if command -v dbus-run-session >/dev/null && command -v gnome-keyring-daemon >/dev/null; then
    keyring_dir=$(mktemp -d)
    trap 'rm -rf "$keyring_dir" "$release_tmp"' EXIT
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
        cargo test --workspace --locked "$@" 2>&1 | tee -a "$RM_TEST_LOG"
    ' test.sh "$@"
else
    echo "test.sh: dbus-run-session or gnome-keyring-daemon is missing: the Secret Service" \
         "test will be skipped (install dbus and gnome-keyring to run it)" >&2
    cargo test --workspace --locked "$@" 2>&1 | tee -a "$RM_TEST_LOG"
fi
