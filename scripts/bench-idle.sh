#!/usr/bin/env bash
# Benchmark: the service's idle cost. Starts the fake GitHub, the service signed in through the
# fake device flow and watching N repositories with no jobs, lets it settle, then samples the
# service's resident memory and CPU time over a window and prints the figures.
#
# Usage: scripts/bench-idle.sh [TARGETS=10] [WINDOW_SECS=60]
#   RM_BENCH_PROFILE=release uses release binaries (built if missing); default debug.
#   RM_BENCH_DAEMON_ARGS="..." passes extra arguments to `daemon run` (for experiments).
#   RM_BENCH_BIN_DIR=DIR runs the `runner-manager` and `fake-github` found in DIR, built by
#     nobody (a fixed snapshot: other builds in the shared target dir do not change it).
#   RM_BENCH_PID_FILE=FILE writes the service's pid there once it settled (attach a profiler:
#     `perf record -g -p`, `strace -c -f -p`) and removes it when the window ends.
#   A TARGETS of 0 measures the service signed in but watching nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
targets="${1:-10}"
window="${2:-60}"
profile="${RM_BENCH_PROFILE:-debug}"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/runner-manager-target}"
if [[ -n ${RM_BENCH_BIN_DIR:-} ]]; then
    bin="$RM_BENCH_BIN_DIR"
    label="binaries from $bin"
else
    label="$profile build"
    if [[ $profile == release ]]; then
        cargo build --release --quiet -p rm-daemon -p rm-testkit --bins
    else
        cargo build --quiet -p rm-daemon -p rm-testkit --bins
    fi
    bin="$CARGO_TARGET_DIR/$profile"
fi

tmp=$(mktemp -d -t runner-manager-bench.XXXXXX)
chmod 755 "$tmp"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

wait_for() {
    local deadline=$((SECONDS + $2))
    until eval "$1" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || { echo "timed out waiting for $3" >&2; exit 1; }
        sleep 0.2
    done
}

"$bin/fake-github" --seed-demo >"$tmp/fake.out" 2>"$tmp/fake.log" &
pids+=($!)
wait_for "grep -q 'control API' '$tmp/fake.out'" 30 "the fake GitHub"
origin=$(sed -n 's/.*REST base (github.com style): *//p' "$tmp/fake.out" | head -n1)
client_id=$(sed -n 's/.*OAuth client id: *//p' "$tmp/fake.out" | head -n1)
for i in $(seq 2 "$targets"); do
    curl -fsS -X POST "$origin/_fake/repos" -d "{\"full_name\":\"octo/idle-$i\"}" >/dev/null
done

data="$tmp/data"
socket="$tmp/run/api.sock"
rm_cli() { "$bin/runner-manager" --data-dir "$data" --socket "$socket" "$@"; }
"$bin/runner-manager" daemon run --data-dir "$data" --socket "$socket" \
    --api-base "$origin" --web-base "$origin" --client-id "$client_id" \
    --credential-store file ${RM_BENCH_DAEMON_ARGS:-} >"$tmp/daemon.log" 2>&1 &
daemon_pid=$!
pids+=("$daemon_pid")
wait_for "rm_cli status" 30 "the service"

rm_cli auth login --web-base "$origin" --client-id "$client_id" >"$tmp/login.out" 2>&1 &
login_pid=$!
wait_for "grep -q 'enter the code: ' '$tmp/login.out'" 30 "a user code"
user_code=$(sed -n 's/.*enter the code: *//p' "$tmp/login.out" | head -n1)
curl -fsS -X POST "$origin/_fake/device/approve" -d "{\"user_code\":\"$user_code\",\"login\":\"octo\"}" >/dev/null
wait "$login_pid"

if ((targets > 0)); then
    rm_cli repo add octo/hello >/dev/null
    for i in $(seq 2 "$targets"); do rm_cli repo add "octo/idle-$i" >/dev/null; done
fi

# Settle: every target's first poll is a charged 200; afterwards idle polls are 304s.
sleep 10
curl -fsS -X DELETE "$origin/_fake/counters" >/dev/null

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$daemon_pid/stat"; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$daemon_pid/status"; }
[[ -z ${RM_BENCH_PID_FILE:-} ]] || echo "$daemon_pid" >"$RM_BENCH_PID_FILE"
# /proc's CPU times come in 10 ms ticks; where `perf` works, its task-clock counter (every
# thread of the service, those started later included) gives the window's CPU in µs.
perf_out="$tmp/perf.csv"
perf_pid=""
if command -v perf >/dev/null 2>&1; then
    perf stat -x, -e task-clock,context-switches -o "$perf_out" -p "$daemon_pid" -- sleep "$window" \
        >/dev/null 2>&1 &
    perf_pid=$!
fi
cpu0=$(cpu); t0=$(date +%s.%N)
samples=()
for _ in $(seq "$window"); do samples+=("$(rss_kb)"); sleep 1; done
cpu1=$(cpu); t1=$(date +%s.%N)
[[ -z ${RM_BENCH_PID_FILE:-} ]] || rm -f "$RM_BENCH_PID_FILE"
[[ -z $perf_pid ]] || wait "$perf_pid" || true

median_rss=$(printf '%s\n' "${samples[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
max_rss=$(printf '%s\n' "${samples[@]}" | sort -n | tail -n1)
counters=$(curl -fsS "$origin/_fake/counters")
charged=$(grep -o '"charged":[0-9]*' <<<"$counters" | awk -F: '{s+=$2} END {print s+0}')
requests=$(grep -o '"requests":[0-9]*' <<<"$counters" | awk -F: '{s+=$2} END {print s+0}')
awk -v c0="$cpu0" -v c1="$cpu1" -v t0="$t0" -v t1="$t1" -v hz="$ticks" \
    -v med="$median_rss" -v max="$max_rss" -v n="$targets" -v prof="$label" \
    -v req="$requests" -v ch="$charged" 'BEGIN {
    secs = t1 - t0; cpu = (c1 - c0) / hz
    printf "idle service (%s), %d targets, %.0f s window\n", prof, n, secs
    printf "RESULT rss median %.1f MB, max %.1f MB\n", med / 1024, max / 1024
    printf "RESULT cpu %.3f s over %.0f s = %.3f %%\n", cpu, secs, 100 * cpu / secs
    printf "requests to the fake GitHub in the window: %d (charged %d)\n", req, ch
}'
if [[ -s $perf_out ]]; then
    awk -F, -v w="$window" '$3 == "task-clock" { ms = $1 } $3 == "context-switches" { cs = $1 }
        END { if (ms != "") {
            printf "RESULT cpu (perf task-clock) %.1f ms over %d s = %.3f %%\n", ms, w, ms / (10 * w)
            printf "context switches in the window: %d (%.1f/s)\n", cs, cs / w } }' "$perf_out"
fi
