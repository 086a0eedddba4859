#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# ha.sh WEIR_COMMAND
#
# Two coordinators and two workers on loopback sharing one --ha-dir,
# started here:
#
#   - the first coordinator leads (epoch 1), the second stands by with its
#     ports closed, the workers find the leader through the directory;
#   - SIGKILL of the leader: the standby leads with epoch 2, announces its
#     port in active-leader.json, and both workers register with it and
#     are bound to epoch 2 (/api/v1/worker);
#   - a third coordinator, started while one leads, stands by; SIGTERM of
#     a standby ends it at once with exit 0;
#   - bad usage (exit 2) and an --ha-dir that is a file (exit 1, named).
#
# Every wait polls for its event (a line, a file's content) with a
# generous deadline; nothing sleeps for a fixed time to assume it.
set -eu
weir=$1
tmp=$(mktemp -d /tmp/weir-ha-XXXXXX)
pids=""
cleanup() {
    for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
[ -z "${KEEP:-}" ] || trap - EXIT

fail() {
    echo "ha.sh: FAIL: $*" >&2
    for f in "$tmp"/*.out "$tmp"/*.log "$tmp"/ha/active-leader.json; do
        [ -f "$f" ] || continue
        echo "--- $f" >&2
        tail -n 40 "$f" >&2
    done
    exit 1
}

# wait_for SECONDS COMMAND...: poll every 50 ms until COMMAND succeeds.
wait_for() {
    limit=$(($1 * 20))
    shift
    i=0
    while ! "$@" >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt $limit ] || return 1
        sleep 0.05
    done
}

ha="$tmp/ha"

# start_coordinator NAME: sets c_NAME to its pid.
start_coordinator() {
    WEIR_LOG=info "$weir" node --role=coordinator --bind-host 127.0.0.1 --port 0 --ha-dir "$ha" \
        >"$tmp/$1.out" 2>"$tmp/$1.log" &
    eval "c_$1=$!"
    pids="$pids $!"
}

start_worker() {
    WEIR_LOG=info "$weir" node --role=worker --id "$1" --ha-dir "$ha" --slots 2 --http-port 0 \
        >"$tmp/$1.out" 2>"$tmp/$1.log" &
    eval "w_$1=$!"
    pids="$pids $!"
}

leader_field() { # leader_field NAME: its value in active-leader.json
    sed -n "s/.*\"$1\":\\([^,}]*\\).*/\\1/p" "$ha/active-leader.json" | tr -d '"'
}
leader_is() { [ "$(leader_field epoch)" = "$1" ] && [ "$(leader_field port)" = "$2" ]; }
registered_with() { grep -q "registered with $2" "$tmp/$1.out"; }
worker_epoch_is() {
    port=$(sed -n 's/.*http on 127.0.0.1:\([0-9]*\)$/\1/p' "$tmp/$1.out")
    curl -s -m 5 "http://127.0.0.1:$port/api/v1/worker" | grep -q "\"epoch\": *$2[,}]"
}

# ---- bad usage and a bad directory ----
if "$weir" node --role=worker --id z --coordinator 127.0.0.1:1 --ha-dir "$ha" 2>"$tmp/usage.err"; then
    fail "a worker took both --coordinator and --ha-dir"
elif [ $? -ne 2 ] || ! grep -q "not both" "$tmp/usage.err"; then
    fail "--coordinator with --ha-dir: not refused as bad usage: $(cat "$tmp/usage.err")"
fi
if "$weir" node --role=coordinator --ha-allow-unsafe-locks 2>"$tmp/usage.err"; then
    fail "--ha-allow-unsafe-locks was taken without --ha-dir"
elif [ $? -ne 2 ] || ! grep -q "needs --ha-dir" "$tmp/usage.err"; then
    fail "--ha-allow-unsafe-locks alone: not refused as bad usage: $(cat "$tmp/usage.err")"
fi
: >"$tmp/plain"
if "$weir" node --role=coordinator --port 0 --ha-dir "$tmp/plain" >/dev/null 2>"$tmp/plain.err"; then
    fail "a coordinator stood for leader in a file"
elif [ $? -ne 1 ] || ! grep -q "$tmp/plain: not a directory" "$tmp/plain.err"; then
    fail "--ha-dir on a file: $(cat "$tmp/plain.err")"
fi

# ---- one leads, one stands by, the workers find the leader ----
start_coordinator a
wait_for 20 grep -q listening "$tmp/a.out" || fail "coordinator a did not lead"
port_a=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$tmp/a.out")
wait_for 20 leader_is 1 "$port_a" || fail "active-leader.json does not name a with epoch 1"
start_coordinator b
wait_for 20 grep -q "standing by in $ha" "$tmp/b.out" || fail "coordinator b did not stand by"
grep -q listening "$tmp/b.out" && fail "the standby opened its port"
start_worker x
start_worker y
for w in x y; do
    wait_for 20 registered_with $w "127.0.0.1:$port_a" || fail "worker $w did not register with a"
    wait_for 20 worker_epoch_is $w 1 || fail "worker $w is not bound to epoch 1"
done

# ---- the leader is killed: the standby takes over ----
t0=$(date +%s%N)
# shellcheck disable=SC2154 # set by start_coordinator's eval
kill -KILL "$c_a"
wait_for 20 grep -q listening "$tmp/b.out" || fail "the standby did not take over"
t1=$(date +%s%N)
port_b=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$tmp/b.out")
wait_for 20 leader_is 2 "$port_b" || fail "active-leader.json does not name b with epoch 2"
grep -q "leading from $ha with epoch 2" "$tmp/b.log" || fail "b's log does not say it leads"
for w in x y; do
    wait_for 30 registered_with $w "127.0.0.1:$port_b" || fail "worker $w did not register with b"
    wait_for 20 worker_epoch_is $w 2 || fail "worker $w is not bound to epoch 2"
done
echo "ha.sh: takeover in $(((t1 - t0) / 1000000)) ms (leader SIGKILLed to the standby listening)"

# ---- a standby ends cleanly on SIGTERM ----
start_coordinator c
wait_for 20 grep -q "standing by" "$tmp/c.out" || fail "coordinator c did not stand by"
# shellcheck disable=SC2154
kill -TERM "$c_c"
rc=0
wait "$c_c" || rc=$?
[ $rc -eq 0 ] || fail "a standby stopped by SIGTERM exited $rc"
leader_is 2 "$port_b" || fail "the standby's exit changed the leader file"
echo "ha.sh: ok"
