# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=sh
#
# bench/cluster_common.sh - what the cluster benchmarks (bench/soak,
# bench/recovery, bench/cluster_nexmark) share, sourced by each: the
# Release build, a coordinator and workers on loopback started and always
# stopped (a trap kills every process started here), polling of the
# coordinator's log, and medians / percentiles.
#
# Environment:
#   BUILD=DIR         the Release build to use (default build/bench, as bench/run)
#   BENCH_NO_BUILD=1  use BUILD as it is (bench/run passes it: it just built)
#   KEEP=1            keep the scratch directory (logs, outputs) for a look
#   WORKER_THREADS=N  start each worker with --threads N (default: none, so
#                     the runtime's default, WEIR_THREADS or the online cores)
#
# The coordinator runs with WEIR_LOG=info: its stderr (coord.log) carries
# "worker lost: ID (cause)" and "job J attempt K running: ..." lines, which
# the scripts poll every 10 ms (there are no timestamps in the log, so a
# time is when the poll first saw a line: up to ~10 ms plus one poll's cost
# late).

# shellcheck disable=SC2034,SC2154  # cl_name is set by the script; it uses examples
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
BUILD=${BUILD:-build/bench}
weir=$BUILD/weir
examples=$BUILD/examples

cl_log() { printf '%s: %s\n' "$cl_name" "$*" >&2; }

# cl_build: configure and build Release in $BUILD (a no-op when up to date).
cl_build() {
    if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then
        cl_log "building weir (Release) in $BUILD"
        { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DWEIR_BUILD_TESTS=OFF \
            -DWEIR_WERROR=OFF && cmake --build "$BUILD" -j2; } >&2 || {
            cl_log "the build failed"
            exit 1
        }
    fi
    for f in "$weir" "$@"; do
        [ -e "$f" ] || {
            cl_log "missing $f (build $BUILD first)"
            exit 1
        }
    done
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/weir-$cl_name-XXXXXX")
pids=""
cl_cleanup() {
    for p in $pids; do
        kill -CONT "$p" 2>/dev/null || true
        kill -KILL "$p" 2>/dev/null || true
    done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
    if [ -n "${KEEP:-}" ]; then
        cl_log "kept $tmp"
    else
        rm -rf "$tmp"
    fi
}
trap cl_cleanup EXIT
trap 'exit 130' INT TERM

cl_fail() {
    cl_log "FAIL: $*"
    for f in "$tmp"/*.log; do
        [ -f "$f" ] || continue
        echo "--- $f" >&2
        tail -n 20 "$f" >&2
    done
    exit 1
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# wait_for SECONDS COMMAND...: poll every 10 ms until COMMAND succeeds.
wait_for() {
    _deadline=$(($(now_ms) + $1 * 1000))
    shift
    while ! "$@" >/dev/null 2>&1; do
        [ "$(now_ms)" -lt "$_deadline" ] || return 1
        sleep 0.01
    done
}

# coord_count PATTERN: lines of the coordinator's log matching PATTERN.
coord_count() { grep -c -- "$1" "$tmp/coord.log" 2>/dev/null || true; }

# wait_more SECONDS PATTERN N: poll every 10 ms until more than N lines of
# the coordinator's log match PATTERN; then seen_ms is when that was seen.
wait_more() {
    _deadline=$(($(now_ms) + $1 * 1000))
    while :; do
        seen_ms=$(now_ms)
        [ "$(coord_count "$2")" -le "$3" ] || return 0
        [ "$seen_ms" -lt "$_deadline" ] || return 1
        sleep 0.01
    done
}

# start_coordinator: sets coord (HOST:PORT) and cpid.
start_coordinator() {
    WEIR_LOG=info "$weir" node --role=coordinator --bind-host 127.0.0.1 --port 0 \
        >"$tmp/coord.out" 2>"$tmp/coord.log" &
    cpid=$!
    pids="$pids $cpid"
    wait_for 20 grep -q listening "$tmp/coord.out" || cl_fail "the coordinator did not start"
    coord=$(sed -n 's/.*listening on \(.*\)$/\1/p' "$tmp/coord.out")
}

# start_worker ID SLOTS [nowait]: sets w_ID to its pid; waits for it to
# register unless told not to. WORKER_THREADS, when set, is its --threads.
start_worker() {
    # shellcheck disable=SC2046 # no argument, or --threads N
    "$weir" node --role=worker --id "$1" --coordinator "$coord" --slots "$2" \
        $([ -z "${WORKER_THREADS:-}" ] || echo --threads "$WORKER_THREADS") \
        >"$tmp/$1.out" 2>>"$tmp/$1.log" &
    eval "w_$1=$!"
    pids="$pids $!"
    [ "${3:-}" = nowait ] ||
        wait_for 20 grep -q registered "$tmp/$1.out" || cl_fail "worker $1 did not register"
}

# kill_worker ID: SIGKILL it and reap it.
kill_worker() {
    eval "_p=\$w_$1"
    kill -KILL "$_p" 2>/dev/null || true
    wait "$_p" 2>/dev/null || true
    pids=$(echo "$pids" | tr ' ' '\n' | grep -vx "$_p" | tr '\n' ' ')
}

# stop_nodes: SIGKILL and reap every process started so far.
stop_nodes() {
    for _p in $pids; do kill -KILL "$_p" 2>/dev/null || true; done
    for _p in $pids; do wait "$_p" 2>/dev/null || true; done
    pids=""
}

# percentile P: the nearest-rank P-th percentile (0 < P <= 100) of the
# integers on stdin; median: percentile 50.
percentile() {
    sort -n | awk -v p="$1" '{ v[NR] = $1 } END {
        if (NR == 0) { print "nan"; exit }
        r = int((p * NR + 99) / 100); if (r < 1) r = 1; print v[r] }'
}
median() { percentile 50; }
