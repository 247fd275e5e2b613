#!/usr/bin/env bash
# Benchmark: time from a release being published to the service running it, on an idle host.
# A portable install of this checkout's build runs against the fake GitHub's release feed with
# a short check interval (test-only `--update-check-secs`); the next patch version of this
# checkout (scripts/release.sh --profile dev, signed with a throwaway key) is published, and
# the time until the service answers its version over the local API is measured.
#
# Usage: scripts/bench-update.sh [RUNS=5] [CHECK_SECS=2]
#   RM_TEST_RELEASE_DIR/RM_TEST_RELEASE_VERSION/RM_TEST_RELEASE_PUBKEY reuse a release made
#   already (as scripts/test.sh exports them); otherwise one is built (~2 min).
#
# Prints, per run and as medians: published → the check that saw it (waiting for the next
# check, at most CHECK_SECS), → verified and swapped, → the new service answering. In
# production the check interval is 6 h (± 10 %), so the figure there is one interval plus the
# measured check-to-answer time.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"
check="${2:-2}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/runner-manager-target}"
cargo build --quiet --workspace --bins --locked
bin="$CARGO_TARGET_DIR/debug"

tmp=$(mktemp -d -t runner-manager-bench.XXXXXX)
chmod 755 "$tmp"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

if [[ -z ${RM_TEST_RELEASE_DIR:-} ]]; then
    current=$(sed -n '/^\[workspace.package\]/,/^\[/ s/^version = "\(.*\)"/\1/p' Cargo.toml)
    IFS=. read -r major minor patch <<< "${current%%-*}"
    RM_TEST_RELEASE_VERSION="$major.$minor.$((patch + 1))"
    minisign -G -W -f -p "$tmp/key.pub" -s "$tmp/key" >/dev/null
    RM_RELEASE_ALLOW_DIRTY=1 RUNNER_MANAGER_SIGNING_KEY_FILE="$tmp/key" \
        RUNNER_MANAGER_RELEASE_PUBKEY_FILE="$tmp/key.pub" \
        scripts/release.sh "$RM_TEST_RELEASE_VERSION" --profile dev --out "$tmp/release" >/dev/null 2>&1
    RM_TEST_RELEASE_DIR="$tmp/release" RM_TEST_RELEASE_PUBKEY="$tmp/key.pub"
fi
next="$RM_TEST_RELEASE_VERSION"

now() { date +%s.%N; }
wait_for() {
    local deadline=$((SECONDS + $2))
    until eval "$1" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || { echo "timed out waiting for $3" >&2; exit 1; }
        sleep 0.05
    done
}

"$bin/fake-github" >"$tmp/fake.out" 2>"$tmp/fake.log" &
pids+=($!)
wait_for "grep -q 'control API' '$tmp/fake.out'" 30 "the fake GitHub"
origin=$(sed -n 's/.*REST base (github.com style): *//p' "$tmp/fake.out" | head -n1)
assets=$(for f in "$RM_TEST_RELEASE_DIR"/*; do printf '{"name":"%s","path":"%s"},' "$(basename "$f")" "$f"; done)
assets="[${assets%,}]"

results=()
for run in $(seq "$runs"); do
    prefix="$tmp/run$run/prefix"
    mkdir -p "$prefix/bin" "$prefix/share/runner-manager"
    cp "$bin/runner-manager" "$prefix/bin/runner-manager"
    current=$("$prefix/bin/runner-manager" --version | cut -d' ' -f2)
    printf '{"kind":"portable","version":"%s","files":["bin/runner-manager","share/runner-manager/portable.json"]}\n' \
        "$current" > "$prefix/share/runner-manager/portable.json"
    socket="$tmp/run$run/api.sock"
    # No release yet: the service starts up to date.
    curl -fsS -X DELETE "$origin/_fake/releases" >/dev/null
    log="$tmp/run$run/daemon.log"
    "$prefix/bin/runner-manager" --data-dir "$tmp/run$run/data" --socket "$socket" daemon run \
        --credential-store file --api-base "$origin" --web-base "$origin" \
        --update auto --update-api-base "$origin" --update-repo runner-manager/runner-manager \
        --update-check-secs "$check" --update-trust-key "$RM_TEST_RELEASE_PUBKEY" >"$log" 2>&1 &
    pid=$!
    pids+=("$pid")
    version() {
        curl -fsS --unix-socket "$socket" -H 'x-runner-manager-api: 1' http://localhost/v1/version |
            sed -n 's/.*"service_version":"\([^"]*\)".*/\1/p'
    }
    wait_for "[[ \$(version) == $current ]]" 30 "the service"
    sleep 1
    curl -fsS -X POST "$origin/_fake/releases" \
        -d "{\"repo\":\"runner-manager/runner-manager\",\"tag\":\"v$next\",\"assets\":$assets}" >/dev/null
    t0=$(now)
    wait_for "grep -q 'a newer runner-manager was released' '$log'" 60 "the check"
    t1=$(now)
    wait_for "grep -q 'files swapped' '$log'" 120 "the swap"
    t2=$(now)
    wait_for "[[ \$(version) == $next ]]" 60 "the new version"
    t3=$(now)
    line=$(awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" \
        'BEGIN { printf "%.2f %.2f %.2f %.2f", b - a, c - b, d - c, d - a }')
    echo "run $run: seen after, swapped after, answering after, total (s): $line"
    results+=("$line")
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
done
median() { # column
    printf '%s\n' "${results[@]}" | awk -v c="$1" '{print $c}' | sort -n |
        awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
seen=$(median 1) swap=$(median 2) answer=$(median 3) total=$(median 4)
echo "RESULT published -> running (idle host, $runs runs, check every $check s): median $total s"
echo "RESULT   waiting for the check $seen s; check + download + verify + drain + swap $swap s; restart until it answers $answer s"
echo "RESULT production: one check interval (6 h +- 10 %) + $(awk -v a="$swap" -v b="$answer" 'BEGIN {printf "%.2f", a + b}') s"
