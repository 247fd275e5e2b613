#!/usr/bin/env bash
# The tray against the demo: starts the built-in fake GitHub (user `octo`, repository
# `octo/hello`) and the service with a temporary data directory, like scripts/demo.sh, then the
# tray app on the service's socket. Sign in from the tray (Sign in…): the window shows a code
# and opens the fake GitHub's device page, where "Authorize" approves it (or run the curl line
# this script prints). Ctrl-C stops everything and removes the temporary directory.
#
# Usage: scripts/tray-demo.sh     (needs a desktop session with a tray; under plain X without a
#                                  tray host the tray opens its dashboard instead)
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib.sh
. scripts/lib.sh
ensure_build_deps
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/runner-manager-target}"
echo "== building (cargo build --workspace --bins)"
cargo build --workspace --bins --quiet
bin="$CARGO_TARGET_DIR/debug"

tmp=$(mktemp -d -t runner-manager-tray-demo.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$bin/fake-github" --seed-demo >"$tmp/fake.out" 2>"$tmp/fake.log" &
pids+=($!)
for _ in $(seq 150); do grep -q 'control API' "$tmp/fake.out" 2>/dev/null && break; sleep 0.2; done
origin=$(sed -n 's/.*REST base (github.com style): *//p' "$tmp/fake.out" | head -n1)
client_id=$(sed -n 's/.*OAuth client id: *//p' "$tmp/fake.out" | head -n1)
[[ -n $origin ]] || { echo "the fake GitHub did not start: $(cat "$tmp/fake.log")" >&2; exit 1; }

socket="$tmp/run/api.sock"
"$bin/runner-manager" daemon run --data-dir "$tmp/data" --socket "$socket" \
    --api-base "$origin" --web-base "$origin" --client-id "$client_id" \
    --credential-store file >"$tmp/daemon.log" 2>&1 &
pids+=($!)
for _ in $(seq 150); do "$bin/runner-manager" --socket "$socket" status >/dev/null 2>&1 && break; sleep 0.2; done

"$bin/runner-manager-tray" --socket "$socket" --show sign-in >"$tmp/tray.log" 2>&1 &
pids+=($!)

cat <<TEXT

The fake GitHub runs at $origin, the service on $socket, and the tray is up.
  1. The sign-in window shows a code. "Open ..." opens $origin/login/device in your browser:
     enter the code there and press Authorize (you sign in as octo).
     Or approve from here:  curl -X POST $origin/_fake/device/approve -d '{"user_code":"CODE","login":"octo"}'
  2. In the dashboard, add the repository octo/hello; copy its runs-on line.
  3. Queue a job:  curl -X POST $origin/_fake/runs -d '{"repo":"octo/hello","jobs":[{"name":"build","labels":["LABEL"],"duration_ms":8000}]}'
     (LABEL is the routing label the dashboard shows) and watch the tray show it running.
Logs: $tmp/{daemon,tray,fake}.log   Ctrl-C stops everything.
TEXT
wait "${pids[2]}" || true
