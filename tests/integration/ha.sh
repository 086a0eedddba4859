#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# ha.sh WEIR_COMMAND JOB_EO_PLUGIN
#
# Two coordinators and two workers on loopback sharing one --ha-dir,
# started here:
#
#   - the first coordinator leads (epoch 1), the second stands by with its
#     ports closed, the workers find the leader through the directory;
#   - a job (tests/job/job_eo.c: a keyed count into the exactly-once file
#     sink) is submitted and kept in the directory (jobs/1.json, its
#     plugin under plugins/);
#   - SIGKILL of the leader once a checkpoint completed: the standby
#     leads with epoch 2, announces its port in active-leader.json, both
#     workers register with it and are bound to epoch 2 (/api/v1/worker),
#     and it runs the job on from its latest completed checkpoint to the
#     end: the output is exactly an uninterrupted `weir run`'s, the job's
#     record moves to history/ as succeeded;
#   - a job without checkpoints, its leader SIGKILLed: the next leader
#     (epoch 3) does not run it again - nothing to go on from - and its
#     record moves to history/ as failed, saying why, and the new leader
#     lists both jobs (weir jobs) from the history;
#   - a coordinator started while one leads stands by; SIGTERM of a
#     standby ends it at once with exit 0;
#   - SIGTERM of the leader under a checkpointed job: it exits 0 and
#     leaves the job's record, the next leader runs the job on to exactly
#     `weir run`'s output, and the waiting `weir submit --ha-dir` follows
#     the job to it and exits 0 with its end;
#   - the leader and a worker SIGKILLed together under a checkpointed job
#     that needs both workers' slots: the next leader records the restore
#     point and its first checkpoint id in the job's record, parks the job
#     until the worker is back, then runs it on to `weir run`'s output,
#     its checkpoints numbered above the recorded floor;
#   - bad usage (exit 2) and an --ha-dir that is a file (exit 1, named).
#
# The nodes run with WEIR_AUTH_TOKEN set: the workers' HTTP servers are
# asked with it, and once without (401, the health check too).
#
# Every wait polls for its event (a line, a file's content) with a
# generous deadline; nothing sleeps for a fixed time to assume it.
set -eu
weir=$1
plugin=$2
me=ha.sh
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"
fail_extra="$tmp/ha/active-leader.json"

WEIR_AUTH_TOKEN=ha-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export WEIR_AUTH_TOKEN

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
    curl -s -m 5 -H "Authorization: Bearer $WEIR_AUTH_TOKEN" "http://127.0.0.1:$port/api/v1/worker" |
        grep -q "\"epoch\": *$2[,}]"
}

# ---- bad usage and a bad directory ----
if "$weir" jobs --ha-dir "$ha" 2>"$tmp/usage.err"; then
    fail "weir jobs found a leader in an empty directory"
elif [ $? -ne 1 ] || ! grep -q "no coordinator leads in $ha yet" "$tmp/usage.err"; then
    fail "weir jobs --ha-dir with no leader: $(cat "$tmp/usage.err")"
fi
if "$weir" jobs --ha-dir "$ha" --coordinator 127.0.0.1:1 2>"$tmp/usage.err"; then
    fail "weir jobs took both --ha-dir and --coordinator"
elif [ $? -ne 2 ]; then
    fail "weir jobs --ha-dir --coordinator: not bad usage: $(cat "$tmp/usage.err")"
fi
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
# A worker's HTTP routes without the token: 401, the health check too.
wport=$(sed -n 's/.*http on 127.0.0.1:\([0-9]*\)$/\1/p' "$tmp/x.out")
for p in /api/v1/health /api/v1/worker /metrics; do
    code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$wport$p")
    [ "$code" = 401 ] || fail "worker x: $p without the token: $code, not 401"
done
code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $WEIR_AUTH_TOKEN" \
    "http://127.0.0.1:$wport/api/v1/health")
[ "$code" = 200 ] || fail "worker x: the health check with the token: $code, not 200"

# ---- a job, kept in the directory ----
n=400000
"$weir" run "$plugin" --parallelism 2 --no-progress --quiet --checkpoint-dir "$tmp/ref-ckpt" \
    --checkpoint-interval-ms 100 -- "$tmp/ref" $n || fail "the reference run failed"
cat "$tmp"/ref/part-* | sort >"$tmp/want"
"$weir" submit "$plugin" --coordinator "127.0.0.1:$port_a" --parallelism 2 \
    --checkpoint-dir "$tmp/ckpt" --checkpoint-interval-ms 100 -- "$tmp/out" $n \
    >"$tmp/submit.out" 2>"$tmp/submit.log" &
sub=$!
pids="$pids $sub"
wait_for 20 test -f "$ha/jobs/1.json" || fail "the job's record is not in $ha/jobs"
ls "$ha/plugins/"*.so >/dev/null 2>&1 || fail "the job's plugin is not in $ha/plugins"
has_completed() {
    for f in "$tmp"/ckpt/COMPLETED-*; do
        [ -e "$f" ] && return 0
    done
    return 1
}
wait_for 60 has_completed || fail "no checkpoint of the job completed"

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
# The client's connection went with the leader: it says so and fails.
rc=0
wait "$sub" || rc=$?
[ $rc -ne 0 ] || fail "weir submit succeeded though its coordinator was killed"
wait_for 20 grep -q "job 1 (.*) recovered" "$tmp/b.log" || fail "b did not recover the job"
wait_for 20 grep -q "job 1 attempt 1 running: .* restored from checkpoint [1-9]" "$tmp/b.log" ||
    fail "the recovered job did not restore a checkpoint"
wait_for 120 grep -q '"state":"succeeded"' "$ha/history/1.json" || fail "the recovered job did not succeed"
[ ! -f "$ha/jobs/1.json" ] || fail "the ended job's record is still in $ha/jobs"
cat "$tmp"/out/part-* 2>/dev/null | sort >"$tmp/got"
cmp -s "$tmp/got" "$tmp/want" ||
    fail "the output differs from weir run's: $(wc -l <"$tmp/got") lines," \
        "$(comm -23 "$tmp/got" "$tmp/want" | wc -l) extra," \
        "$(comm -13 "$tmp/got" "$tmp/want" | wc -l) missing"

# ---- a job without checkpoints cannot be taken over ----
start_coordinator c
wait_for 20 grep -q "standing by" "$tmp/c.out" || fail "coordinator c did not stand by"
"$weir" submit "$plugin" --coordinator "127.0.0.1:$port_b" --parallelism 2 -- "$tmp/out2" 100000000 \
    >"$tmp/submit2.out" 2>"$tmp/submit2.log" &
pids="$pids $!"
wait_for 20 test -f "$ha/jobs/2.json" || fail "job 2's record is not in $ha/jobs"
wait_for 20 grep -q "job 2 attempt 0 running" "$tmp/b.log" || fail "job 2 did not start"
# shellcheck disable=SC2154
kill -KILL "$c_b"
wait_for 20 grep -q listening "$tmp/c.out" || fail "coordinator c did not take over"
port_c=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$tmp/c.out")
wait_for 20 leader_is 3 "$port_c" || fail "active-leader.json does not name c with epoch 3"
# A job submitted while c still waits for the workers to settle (1 s
# after the last registration) is its own, numbered above the kept ones,
# and not taken for one to recover.
for w in x y; do
    wait_for 30 registered_with $w "127.0.0.1:$port_c" || fail "worker $w did not register with c"
done
"$weir" submit "$plugin" --coordinator "127.0.0.1:$port_c" --parallelism 2 \
    --checkpoint-dir "$tmp/ckpt3" --checkpoint-interval-ms 100 -- "$tmp/out3" $n \
    >"$tmp/submit3.out" 2>"$tmp/submit3.log" || fail "job 3: weir submit failed"
grep -q "job 3 submitted" "$tmp/submit3.log" || fail "the job submitted to c is not job 3"
wait_for 60 grep -q '"state":"succeeded"' "$ha/history/3.json" || fail "job 3's end is not recorded"
wait_for 20 grep -q "job 2 (eo) was not recovered: it takes no checkpoints" "$tmp/c.log" ||
    fail "c did not refuse to run job 2 again"
wait_for 20 grep -q '"state":"failed"' "$ha/history/2.json" || fail "job 2's end is not recorded"
grep -q "takes no checkpoints" "$ha/history/2.json" || fail "job 2's record does not say why"
[ ! -f "$ha/jobs/2.json" ] || fail "job 2's record is still in $ha/jobs"
wait_for 20 grep -q "took over 0 of 1 jobs" "$tmp/c.log" || fail "c's takeover did not end"
grep -q "job 3 (eo)" "$tmp/c.log" && fail "c took the job submitted to it for one to recover"
grep -q '"state":"succeeded"' "$ha/history/3.json" || fail "job 3's record was overwritten"
# The new leader lists the jobs its predecessors ran, from the history
# (weir jobs finds it through the directory).
wait_for 20 sh -c "'$weir' jobs --ha-dir '$ha' | grep -q '^ *1  eo  *succeeded'" ||
    fail "c's job list lacks job 1: $("$weir" jobs --ha-dir "$ha" 2>&1)"
"$weir" jobs --coordinator "127.0.0.1:$port_c" | grep -q '^ *2  eo  *failed .*not recovered' ||
    fail "c's job list lacks job 2: $("$weir" jobs --coordinator "127.0.0.1:$port_c" 2>&1)"

# ---- a standby ends cleanly on SIGTERM ----
start_coordinator d
wait_for 20 grep -q "standing by" "$tmp/d.out" || fail "coordinator d did not stand by"
# shellcheck disable=SC2154
kill -TERM "$c_d"
rc=0
wait "$c_d" || rc=$?
[ $rc -eq 0 ] || fail "a standby stopped by SIGTERM exited $rc"
leader_is 3 "$port_c" || fail "the standby's exit changed the leader file"

# ---- SIGTERM of the leader: its job is the next leader's ----
start_coordinator e
wait_for 20 grep -q "standing by" "$tmp/e.out" || fail "coordinator e did not stand by"
"$weir" submit "$plugin" --ha-dir "$ha" --parallelism 2 \
    --checkpoint-dir "$tmp/ckpt4" --checkpoint-interval-ms 100 -- "$tmp/out4" $n \
    >"$tmp/submit4.out" 2>"$tmp/submit4.log" &
sub4=$!
pids="$pids $sub4"
wait_for 20 test -f "$ha/jobs/4.json" || fail "job 4's record is not in $ha/jobs"
has_completed4() {
    for f in "$tmp"/ckpt4/COMPLETED-*; do
        [ -e "$f" ] && return 0
    done
    return 1
}
wait_for 60 has_completed4 || fail "no checkpoint of job 4 completed"
# shellcheck disable=SC2154
kill -TERM "$c_c"
rc=0
wait "$c_c" || rc=$?
[ $rc -eq 0 ] || fail "the leader stopped by SIGTERM exited $rc"
[ -f "$ha/jobs/4.json" ] || fail "the stopped leader dropped job 4's record"
wait_for 20 grep -q listening "$tmp/e.out" || fail "coordinator e did not take over"
wait_for 30 grep -q "job 4 (eo) recovered" "$tmp/e.log" || fail "e did not recover job 4"
wait_for 120 grep -q '"state":"succeeded"' "$ha/history/4.json" || fail "job 4 did not succeed"
cat "$tmp"/out4/part-* 2>/dev/null | sort >"$tmp/got4"
cmp -s "$tmp/got4" "$tmp/want" || fail "job 4's output differs from weir run's"
# Its weir submit (--ha-dir) was not told the job was cancelled: it
# followed the job to e and reports its end there.
rc=0
wait "$sub4" || rc=$?
[ $rc -eq 0 ] || fail "weir submit --ha-dir did not follow job 4 (exit $rc): $(cat "$tmp/submit4.log")"
grep -q "job 4: following it to the leader at 127.0.0.1:" "$tmp/submit4.log" ||
    fail "weir submit does not say it followed job 4: $(cat "$tmp/submit4.log")"
grep -q "job 4 succeeded" "$tmp/submit4.log" || fail "weir submit: $(cat "$tmp/submit4.log")"

# ---- the leader and a worker SIGKILLed together: the job is parked ----
# Job 5's four subtasks fill both workers' slots. With y gone the new
# leader has room for half of them: it records the restore point and the
# first new checkpoint id in the job's record, parks the job, and runs it
# once y is back (the same id, a new process).
start_coordinator f
wait_for 20 grep -q "standing by" "$tmp/f.out" || fail "coordinator f did not stand by"
port_e=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$tmp/e.out")
for w in x y; do
    wait_for 30 registered_with $w "127.0.0.1:$port_e" || fail "worker $w did not register with e"
done
"$weir" submit "$plugin" --ha-dir "$ha" --parallelism 2 \
    --checkpoint-dir "$tmp/ckpt5" --checkpoint-interval-ms 100 -- "$tmp/out5" $n \
    >"$tmp/submit5.out" 2>"$tmp/submit5.log" &
pids="$pids $!"
wait_for 20 test -f "$ha/jobs/5.json" || fail "job 5's record is not in $ha/jobs"
has_completed5() {
    for f in "$tmp"/ckpt5/COMPLETED-*; do
        [ -e "$f" ] && return 0
    done
    return 1
}
wait_for 60 has_completed5 || fail "no checkpoint of job 5 completed"
# shellcheck disable=SC2154
kill -KILL "$c_e" "$w_y"
wait_for 20 grep -q listening "$tmp/f.out" || fail "coordinator f did not take over"
wait_for 30 grep -q "job 5 parked: " "$tmp/f.log" || fail "f did not park job 5"
grep -q "job 5 attempt 1 running" "$tmp/f.log" && fail "job 5 ran without room"
restored=$(sed -n 's/.*"restore_checkpoint": *\([0-9]*\).*/\1/p' "$ha/jobs/5.json")
floor=$(sed -n 's/.*"checkpoint_floor": *\([0-9]*\).*/\1/p' "$ha/jobs/5.json")
if [ -z "$restored" ] || [ -z "$floor" ] || [ "$restored" -lt 1 ] || [ "$floor" -lt "$restored" ]; then
    fail "job 5's record lacks its restore point ($restored) and checkpoint floor ($floor)"
fi
[ -e "$tmp/ckpt5/COMPLETED-$restored" ] || fail "job 5's restore point $restored never completed"
start_worker y
wait_for 120 grep -q "job 5 attempt 1 running: .* restored from checkpoint $restored\$" "$tmp/f.log" ||
    fail "job 5 did not run from checkpoint $restored once y came back"
wait_for 120 grep -q '"state":"succeeded"' "$ha/history/5.json" || fail "job 5 did not succeed"
for f in "$tmp"/ckpt5/COMPLETED-*; do
    id=${f##*-}
    [ "$id" -le "$restored" ] || [ "$id" -gt "$floor" ] ||
        fail "f numbered checkpoint $id at or below its recorded floor $floor"
done
cat "$tmp"/out5/part-* 2>/dev/null | sort >"$tmp/got5"
cmp -s "$tmp/got5" "$tmp/want" || fail "job 5's output differs from weir run's"
echo "ha.sh: ok"
