#!/usr/bin/env bash
# The demo: runner-manager end to end on this machine, with no GitHub account.
#
# Builds the binaries, starts the built-in fake GitHub (a user `octo` with repository
# `octo/hello`), starts the service against it with a temporary data directory and socket,
# signs in through the fake's device flow, adds the repository, queues a few jobs for this
# machine's routing label, and shows runners being started, taking the jobs and being cleaned
# up. Everything it started is stopped and its temporary directory removed on exit.
#
# Usage: scripts/demo.sh     DEMO_JOBS=N queues N jobs (default 3); RM_DEMO_BIN_DIR=DIR uses
#                            binaries built already instead of building.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib.sh
. scripts/lib.sh
[[ -n ${RM_DEMO_BIN_DIR:-} ]] || ensure_build_deps
ensure_tun_device
if ! command -v curl >/dev/null; then
    sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends curl ca-certificates
fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/runner-manager-target}"
jobs_wanted="${DEMO_JOBS:-3}"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

if [[ -n ${RM_DEMO_BIN_DIR:-} ]]; then
    # Already built (the end-to-end test runs the demo with the binaries under test).
    bin="$RM_DEMO_BIN_DIR"
else
    say "building (cargo build --workspace --bins)"
    cargo build --workspace --bins --quiet
    bin="$CARGO_TARGET_DIR/debug"
fi

tmp=$(mktemp -d -t runner-manager-demo.XXXXXX)
chmod 755 "$tmp"
fake_pid=""
daemon_pid=""
cleanup() {
    local rc=$?
    if [[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null; then
        kill -TERM "$daemon_pid" 2>/dev/null || true
        # The service lets running jobs finish (at most 60 s), then exits.
        for _ in $(seq 700); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$daemon_pid" 2>/dev/null || true
    fi
    if [[ -n $fake_pid ]] && kill -0 "$fake_pid" 2>/dev/null; then
        kill -TERM "$fake_pid" 2>/dev/null || true
        wait "$fake_pid" 2>/dev/null || true
    fi
    if ((rc != 0)); then
        echo "demo failed (exit $rc); the service's log:" >&2
        tail -n 40 "$tmp/daemon.log" 2>/dev/null >&2 || true
    fi
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits until `$1` (a command) succeeds, at most `$2` seconds; `$3` says what for.
wait_for() {
    local deadline=$((SECONDS + $2))
    until eval "$1" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            echo "timed out after $2 s waiting for $3" >&2
            return 1
        fi
        sleep 0.2
    done
}

say "starting the fake GitHub (fake-github --seed-demo)"
"$bin/fake-github" --seed-demo >"$tmp/fake.out" 2>"$tmp/fake.log" &
fake_pid=$!
wait_for "grep -q 'control API' '$tmp/fake.out'" 30 "the fake GitHub to print its URLs"
origin=$(sed -n 's/.*REST base (github.com style): *//p' "$tmp/fake.out" | head -n1)
client_id=$(sed -n 's/.*OAuth client id: *//p' "$tmp/fake.out" | head -n1)
echo "fake GitHub at $origin (OAuth client id $client_id)"

data="$tmp/data"
socket="$tmp/run/api.sock"
rm_cli() { "$bin/runner-manager" --data-dir "$data" --socket "$socket" "$@"; }

say "starting the service (runner-manager daemon run) with data in $data"
"$bin/runner-manager" daemon run --data-dir "$data" --socket "$socket" \
    --api-base "$origin" --web-base "$origin" --client-id "$client_id" \
    --credential-store file >"$tmp/daemon.log" 2>&1 &
daemon_pid=$!
wait_for "rm_cli status" 30 "the service to answer on $socket"
rm_cli status

say "signing in (runner-manager auth login) through the fake device flow"
rm_cli auth login --web-base "$origin" --client-id "$client_id" >"$tmp/login.out" 2>&1 &
login_pid=$!
wait_for "grep -q 'enter the code: ' '$tmp/login.out'" 30 "auth login to print a user code"
cat "$tmp/login.out"
user_code=$(sed -n 's/.*enter the code: *//p' "$tmp/login.out" | head -n1)
echo "(approving $user_code as octo through the fake's control API, as a person would on $origin/login/device)"
curl -fsS -X POST "$origin/_fake/device/approve" \
    -d "{\"user_code\":\"$user_code\",\"login\":\"octo\"}" >/dev/null
wait "$login_pid"
tail -n +3 "$tmp/login.out"
rm_cli auth status

say "adding the repository (runner-manager repo add octo/hello)"
rm_cli repo add octo/hello --max-runners 2 | tee "$tmp/add.out"
label=$(sed -n 's/^ *runs-on: *//p' "$tmp/add.out" | head -n1)

say "queueing $jobs_wanted job(s) on octo/hello with runs-on: [self-hosted, $label]"
for i in $(seq "$jobs_wanted"); do
    curl -fsS -X POST "$origin/_fake/runs" -d "{\"repo\":\"octo/hello\",\"jobs\":[{\"name\":\"job-$i\",\
\"labels\":[\"$label\"],\"behaviour\":\"succeed\",\"duration_ms\":2000}]}" >/dev/null
done

queued_at=$SECONDS
say "watching: runners start, take the jobs, and are cleaned up (runner-manager status, every second)"
deadline=$((SECONDS + 180))
while :; do
    jobs_json=$(curl -fsS "$origin/_fake/jobs")
    done_count=$(grep -o '"status":"completed"' <<<"$jobs_json" | wc -l || true)
    status_json=$(rm_cli status --json)
    printf '\n[%3ds after queueing] jobs completed: %d/%d\n' "$((SECONDS - queued_at))" "$done_count" "$jobs_wanted"
    rm_cli status | grep -E 'runner |octo/hello' || true
    if ((done_count == jobs_wanted)) && grep -q '"runners": \[\]' <<<"$status_json"; then
        break
    fi
    failures=$(grep -o '"reason"' <<<"$status_json" | wc -l || true)
    if ((failures >= 5 && done_count == 0)); then
        echo "runners keep failing (see the failures above and the service's log below)" >&2
        exit 1
    fi
    if ((SECONDS >= deadline)); then
        echo "the jobs did not all complete within 180 s" >&2
        exit 1
    fi
    sleep 1
done

say "done: every job ran on its own ephemeral runner, and no runner is left"
# (The listing has no final newline; GNU sed would keep that off the last line it prints.)
{ curl -fsS "$origin/_fake/jobs"; echo; } | tr '{' '\n' | sed -n 's/.*"conclusion":"\([a-z]*\)".*"name":"\(job-[0-9]*\)".*"runner_name":"\([^"]*\)".*/  \2: \1 on runner \3/p'
left=$(curl -fsS "$origin/_fake/runners" | grep -o '"id"' | wc -l || true)
echo "GitHub now lists $left self-hosted runner(s) for this machine."
echo "stopping the service and the fake GitHub"
