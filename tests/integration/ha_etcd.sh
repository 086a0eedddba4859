#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# ha_etcd.sh WEIR_COMMAND JOB_EO_PLUGIN
#
# Leader election through etcd (Debian's etcd-server, started here on
# loopback) with coordinators and workers sharing one --ha-dir for the
# records:
#
#   - the first coordinator leads with etcd's revision as its epoch, the
#     second stands by; a coordinator whose etcd cannot be reached stands
#     by too, retrying, and a SIGTERM ends it;
#   - a zombie leader: SIGSTOP of the leader under a checkpointed job
#     (tests/job/job_eo.c) past its lease (2 s): the standby leads with a
#     higher epoch, the workers follow the leader file to it, and the job
#     waits for its checkpoint directory, which the frozen leader still
#     holds; SIGCONT of the old leader: it finds its lease gone and steps
#     down (exit 1) without cancelling anything, and the job goes on from
#     its latest completed checkpoint; the output is exactly an
#     uninterrupted `weir run`'s;
#   - SIGKILL of the leader under another job: a third coordinator takes
#     over the same way and the output is again exact.
#
# Every wait polls for its event with a generous deadline.
set -eu
weir=$1
plugin=$2
me=ha_etcd.sh
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"
fail_extra="$tmp/ha/active-leader.json"

[ -x /usr/bin/etcd ] || fail "etcd not found: run scripts/deps.sh (etcd-server)"

# ---- etcd on two free loopback ports (a few tries: a port may be taken) ----
etcd_up() { curl -s -m 2 "http://127.0.0.1:$eport/health" | grep -q '"health":"true"'; }
tries=0
while :; do
    tries=$((tries + 1))
    [ $tries -le 5 ] || fail "etcd did not start"
    eport=$((20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 20000))
    pport=$((eport + 1))
    rm -rf "$tmp/etcd"
    /usr/bin/etcd --name weir-test --data-dir "$tmp/etcd" \
        --listen-client-urls "http://127.0.0.1:$eport" --advertise-client-urls "http://127.0.0.1:$eport" \
        --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
        --initial-cluster "weir-test=http://127.0.0.1:$pport" >"$tmp/etcd.log" 2>&1 &
    etcd_pid=$!
    pids="$pids $etcd_pid"
    if wait_for 20 etcd_up; then
        break
    fi
    kill -KILL "$etcd_pid" 2>/dev/null || true
done
endpoints="http://127.0.0.1:1,http://127.0.0.1:$eport" # the first is dead: fail over

ha="$tmp/ha"
# start_coordinator NAME [ENDPOINTS]: sets c_NAME to its pid.
start_coordinator() {
    WEIR_LOG=info "$weir" node --role=coordinator --bind-host 127.0.0.1 --port 0 --ha-dir "$ha" \
        --etcd-endpoints "${2:-$endpoints}" --etcd-lease-ttl-s 2 --etcd-cluster "t$eport" \
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
port_of() { sed -n 's/.*listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$tmp/$1.out"; }
registered_with() { grep -q "registered with 127.0.0.1:$2" "$tmp/$1.out"; }
fenced() { # fenced WORKER: its weir_worker_fenced_frames_total
    p=$(sed -n 's/.*http on 127.0.0.1:\([0-9]*\)$/\1/p' "$tmp/$1.out")
    curl -s -m 5 "http://127.0.0.1:$p/metrics" | sed -n 's/^weir_worker_fenced_frames_total //p'
}
check_output() { # check_output DIR
    cat "$1"/part-* 2>/dev/null | sort >"$tmp/got"
    cmp -s "$tmp/got" "$tmp/want" ||
        fail "$1: the output differs from weir run's: $(wc -l <"$tmp/got") lines," \
            "$(comm -23 "$tmp/got" "$tmp/want" | wc -l) extra," \
            "$(comm -13 "$tmp/got" "$tmp/want" | wc -l) missing"
}
has_completed() {
    for f in "$1"/COMPLETED-*; do
        [ -e "$f" ] && return 0
    done
    return 1
}

# ---- an unreachable etcd: stand by, retrying; SIGTERM ends it ----
start_coordinator lost http://127.0.0.1:1
wait_for 30 grep -q "campaigning in etcd: .*(retrying)" "$tmp/lost.log" ||
    fail "a coordinator without etcd does not say it retries"
grep -q listening "$tmp/lost.out" && fail "a coordinator led without etcd"
# shellcheck disable=SC2154 # set by start_coordinator's eval
kill -TERM "$c_lost"
rc=0
wait "$c_lost" || rc=$?
[ $rc -eq 0 ] || fail "SIGTERM of a coordinator standing by: exit $rc"
rm -rf "$ha"

# ---- one leads, one stands by ----
start_coordinator a
wait_for 30 grep -q listening "$tmp/a.out" || fail "coordinator a did not lead"
port_a=$(port_of a)
epoch_a=$(sed -n 's/.*leading from .* with epoch \([0-9]*\), elected in etcd.*/\1/p' "$tmp/a.log")
[ -n "$epoch_a" ] || fail "a's log does not say it leads through etcd"
wait_for 20 test "$(leader_field epoch)" = "$epoch_a" || fail "the leader file lacks a's epoch"
start_coordinator b
wait_for 30 grep -q "standing by in $ha" "$tmp/b.out" || fail "coordinator b did not stand by"
start_worker x
start_worker y
for w in x y; do
    wait_for 30 registered_with $w "$port_a" || fail "worker $w did not register with a"
done

n=400000
"$weir" run "$plugin" --parallelism 2 --no-progress --quiet --checkpoint-dir "$tmp/ref-ckpt" \
    --checkpoint-interval-ms 100 -- "$tmp/ref" $n || fail "the reference run failed"
cat "$tmp"/ref/part-* | sort >"$tmp/want"

# ---- a zombie leader ----
"$weir" submit "$plugin" --ha-dir "$ha" --parallelism 2 --detach \
    --checkpoint-dir "$tmp/ckpt1" --checkpoint-interval-ms 100 -- "$tmp/out1" $n \
    >"$tmp/submit1.out" 2>"$tmp/submit1.log" || fail "submitting job 1 failed"
wait_for 60 has_completed "$tmp/ckpt1" || fail "no checkpoint of job 1 completed"
t0=$(date +%s%N)
# shellcheck disable=SC2154
kill -STOP "$c_a"
wait_for 30 grep -q listening "$tmp/b.out" || fail "b did not take over from the frozen a"
port_b=$(port_of b)
epoch_b=$(sed -n 's/.*leading from .* with epoch \([0-9]*\), elected in etcd.*/\1/p' "$tmp/b.log")
[ "$epoch_b" -gt "$epoch_a" ] || fail "b's epoch $epoch_b is not above a's $epoch_a"
for w in x y; do
    wait_for 30 registered_with $w "$port_b" || fail "worker $w did not follow the leader to b"
done
t1=$(date +%s%N)
wait_for 30 grep -q "job 1 waits for its directories: checkpoint directory" "$tmp/b.log" ||
    fail "b did not wait for the directory the frozen a holds"
kill -CONT "$c_a"
rc=0
wait "$c_a" || rc=$?
[ $rc -eq 1 ] || fail "the superseded leader exited $rc, not 1"
grep -q "stepping down, epoch $epoch_a: etcd says this leader's lease is gone" "$tmp/a.log" ||
    fail "a does not say why it stepped down"
grep -q "shutting down" "$tmp/a.log" && fail "the superseded leader cancelled its jobs"
grep -q "the leader's key in etcd is gone: campaigning" "$tmp/b.log" ||
    fail "b, watching the leader's key, did not see it go"
grep -q "job 1 left to the next leader: this coordinator lost the leadership" "$tmp/a.log" ||
    fail "the superseded leader does not say it left job 1 to the next leader"
echo "ha_etcd.sh: zombie takeover in $(((t1 - t0) / 1000000)) ms (SIGSTOP to both workers with b)"
wait_for 120 grep -q '"state":"succeeded"' "$ha/history/1.json" || fail "job 1 did not succeed on b"
check_output "$tmp/out1"
echo "ha_etcd.sh: fenced frames: x $(fenced x), y $(fenced y)"

# ---- the same failover by SIGKILL ----
start_coordinator c
wait_for 30 grep -q "standing by in $ha" "$tmp/c.out" || fail "coordinator c did not stand by"
"$weir" submit "$plugin" --ha-dir "$ha" --parallelism 2 --detach \
    --checkpoint-dir "$tmp/ckpt2" --checkpoint-interval-ms 100 -- "$tmp/out2" $n \
    >"$tmp/submit2.out" 2>"$tmp/submit2.log" || fail "submitting job 2 failed"
wait_for 60 has_completed "$tmp/ckpt2" || fail "no checkpoint of job 2 completed"
# shellcheck disable=SC2154
kill -KILL "$c_b"
wait_for 30 grep -q listening "$tmp/c.out" || fail "c did not take over from the killed b"
port_c=$(port_of c)
for w in x y; do
    wait_for 30 registered_with $w "$port_c" || fail "worker $w did not follow the leader to c"
done
wait_for 120 grep -q '"state":"succeeded"' "$ha/history/2.json" || fail "job 2 did not succeed on c"
check_output "$tmp/out2"

# A leader that stops resigns: the key is gone at once, no TTL to wait.
# shellcheck disable=SC2154
kill -TERM "$c_c"
rc=0
wait "$c_c" || rc=$?
[ $rc -eq 0 ] || fail "SIGTERM of the leader: exit $rc"
echo "ha_etcd.sh: ok"
