#!/usr/bin/env bash
# Cross-target checks for the crates that must build on Windows and macOS: rm-core (the pure
# domain), rm-proto (the local API, which the tray uses: types alone, and the client and
# server with the named-pipe transport on Windows, the getpeereid path on macOS) and
# rm-credstore (the OS keyrings and machine stores: Credential Manager, the System keychain). Only
# `cargo clippy` (type check + lints, no linking, no running), so no cross linker or C
# toolchain is needed. The other crates are Linux-first for now (rusqlite/ring build C code).
#
# Usage: scripts/check-cross.sh [target...]   (default: x86_64-pc-windows-gnu x86_64-apple-darwin)
# A target whose standard library is missing is added with `rustup target add`; if that fails
# (no rustup, or no access to rustup's server, as on some CI machines) the target is skipped
# with a message, unless CROSS_REQUIRE=1, which makes a skip fail the script.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/runner-manager-target}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(x86_64-pc-windows-gnu x86_64-apple-darwin)
fi

# Each line: package and cargo arguments checked on every target.
checks=(
    "rm-core --all-targets"
    "rm-proto --all-targets"
    "rm-proto --features client"
    "rm-proto --features server"
    "rm-proto --features client,server --all-targets"
    "rm-credstore --all-targets"
)

std_installed() {
    local sysroot
    sysroot=$(rustc --print sysroot)
    [ -d "$sysroot/lib/rustlib/$1/lib" ]
}

skipped=()
for target in "${targets[@]}"; do
    if ! std_installed "$target"; then
        echo "== $target: standard library not installed; trying \`rustup target add $target\`"
        # Bounded: without access to rustup's server the download can hang rather than fail.
        if ! command -v rustup >/dev/null || ! timeout 180 rustup target add "$target"; then
            echo "== SKIPPING $target: its standard library is not installed and \`rustup target add $target\` failed (no rustup, no access to rustup's server, or an unknown target). Install it where the network allows and re-run." >&2
            skipped+=("$target")
            continue
        fi
    fi
    for check in "${checks[@]}"; do
        # shellcheck disable=SC2086 # the check line is a list of arguments
        set -- $check
        package=$1
        shift
        echo "== $target: cargo clippy -p $package $*"
        cargo clippy --locked --target "$target" -p "$package" "$@" -- -D warnings
    done
done

if [ ${#skipped[@]} -gt 0 ]; then
    echo "cross checks: skipped ${skipped[*]}" >&2
    if [ "${CROSS_REQUIRE:-0}" = 1 ]; then
        exit 1
    fi
fi
echo "cross checks: done"
