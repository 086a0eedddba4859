#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# cluster.sh WEIR_COMMAND JOB_EO_PLUGIN [CASE...]
#
# A coordinator and three workers on loopback, started here, run
# tests/job/job_eo.c (a keyed running count into the exactly-once file
# sink) and must give exactly what an uninterrupted `weir run` gives:
#
#   basic        submit and wait: the same committed lines, exit 0
#   kill         SIGKILL a worker once a checkpoint completed: the job
#                restarts from it and the output is still exact
#   kill2        SIGKILL one worker, then (after the restart) another
#   stop         a SIGSTOPped worker is declared lost within 2.5 s and its
#                job restarts
#   nocheckpoint a job without checkpoints fails fast on a worker loss,
#                naming the lost worker
#   term         SIGTERM of a worker while checkpoints run: its subtasks are
#                cancelled and reported, the job restarts elsewhere and the
#                output is still exact; then SIGTERM of the coordinator
#                under a running job: it exits 0, the job's subtasks are
#                cancelled everywhere, and what the sink committed is a
#                prefix of the reference (no line twice, none made up)
#
# Every node runs with WEIR_AUTH_TOKEN set, so every HTTP request here
# presents it (api); basic also checks the coordinator's 401s without it,
# and every case that a node refuses an empty token at start.
#
# No case sleeps for a fixed time to assume something happened: each
# polls for the event (a line in a log, a COMPLETED marker) with a
# generous deadline.
set -eu
weir=$1
plugin=$2
shift 2
cases=${*:-basic kill kill2 stop nocheckpoint term}
me=cluster.sh
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh" # its fail is replaced below, by one that says more

# A token for the nodes' HTTP servers, presented by every request here.
WEIR_AUTH_TOKEN=cluster-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export WEIR_AUTH_TOKEN
# api PATH [curl flags]: GET http://$http$PATH with the token.
api() {
    p=$1
    shift
    curl -s -m 5 -H "Authorization: Bearer $WEIR_AUTH_TOKEN" "$@" "http://$http$p"
}

fail() {
    echo "cluster.sh: FAIL: $*" >&2
    # What the coordinator is doing, for a hang: its jobs and its threads.
    if [ -n "${http:-}" ]; then
        echo "--- /api/v1/jobs" >&2
        api /api/v1/jobs >&2 || true
        echo >&2
    fi
    if [ -n "${cpid:-}" ] && command -v gdb >/dev/null 2>&1; then
        echo "--- the coordinator's threads" >&2
        timeout 60 gdb -p "$cpid" -batch -ex "thread apply all bt" 2>&1 | grep -E "^#|^Thread" |
            head -n 200 >&2 || true
    fi
    for f in "$tmp"/*.log; do
        [ -f "$f" ] || continue
        echo "--- $f" >&2
        tail -n 60 "$f" >&2
    done
    exit 1
}

start_coordinator() {
    rm -f "$tmp/coord.out" # a new coordinator's line, not the last one's
    # Two settings off their defaults, harmless here: /api/v1/config must
    # report them.
    WEIR_LOG=info "$weir" node --role=coordinator --bind-host 127.0.0.1 --port 0 --http-port 0 \
        --restart-drain-timeout-ms 90000 --max-outbound-bulk-bytes 536870912 \
        >"$tmp/coord.out" 2>"$tmp/coord.log" &
    cpid=$!
    pids="$pids $cpid"
    wait_for 20 grep -q listening "$tmp/coord.out" || fail "the coordinator did not start"
    coord=$(sed -n 's/.*listening on \(.*\)$/\1/p' "$tmp/coord.out")
    http=$(sed -n 's/.*http on \(.*\)$/\1/p' "$tmp/coord.out")
}

# start_worker ID: sets the variable w_ID to its pid. Worker c runs a
# runtime of one scheduler thread (--threads 1), a and b the default.
start_worker() {
    rm -f "$tmp/$1.out"
    threads=""
    [ "$1" != c ] || threads="--threads 1"
    # shellcheck disable=SC2086 # $threads is empty or two words
    "$weir" node --role=worker --id "$1" --coordinator "$coord" --slots 4 $threads \
        --cache-dir "$tmp/cache-$1" >"$tmp/$1.out" \
        2>>"$tmp/$1.log" &
    eval "w_$1=$!"
    pids="$pids $!"
    wait_for 20 grep -q registered "$tmp/$1.out" || fail "worker $1 did not register"
}

latest_completed() {
    ls "$1" 2>/dev/null | sed -n 's/^COMPLETED-\([0-9]*\)$/\1/p' | sort -n | tail -n 1
}
has_completed() { [ -n "$(latest_completed "$1")" ]; }

# --threads takes 1..256.
for t in 0 257 x; do
    if "$weir" node --role=worker --id z --coordinator 127.0.0.1:1 --threads $t 2>"$tmp/usage.err"; then
        fail "--threads $t was taken"
    elif [ $? -ne 2 ] || ! grep -q -- "--threads" "$tmp/usage.err"; then
        fail "--threads $t: not refused as bad usage: $(cat "$tmp/usage.err")"
    fi
done

# A token set but empty is a configuration error at start, not "no auth";
# so is one a header cannot carry. Both roles, before anything listens.
for role in "--role=coordinator --port 0" "--role=worker --id z --coordinator 127.0.0.1:1"; do
    for t in "" "two words"; do
        # shellcheck disable=SC2086 # $role is several words
        if WEIR_AUTH_TOKEN=$t "$weir" node $role --http-port 0 >/dev/null 2>"$tmp/empty.err"; then
            fail "$role took WEIR_AUTH_TOKEN='$t'"
        elif [ $? -ne 2 ] || ! grep -q "WEIR_AUTH_TOKEN: " "$tmp/empty.err"; then
            fail "$role, WEIR_AUTH_TOKEN='$t': not refused at start: $(cat "$tmp/empty.err")"
        fi
    done
done

# A zero outbound bound is refused at start (every worker would be lost at
# its first frame), naming the flag; a suspicious timeout only warns.
if "$weir" node --role=coordinator --port 0 --max-outbound-control-frames 0 \
    >"$tmp/zero.out" 2>"$tmp/zero.err"; then
    fail "a coordinator started with --max-outbound-control-frames 0"
elif [ $? -ne 2 ] || ! grep -q "error: --max-outbound-control-frames 0 refuses" "$tmp/zero.err" ||
    grep -q listening "$tmp/zero.out"; then
    fail "--max-outbound-control-frames 0: not refused at start: $(cat "$tmp/zero.err")"
fi

n=600000
# The reference: an uninterrupted weir run.
"$weir" run "$plugin" --parallelism 3 --no-progress --quiet --checkpoint-dir "$tmp/ref-ckpt" \
    --checkpoint-interval-ms 100 -- "$tmp/ref" $n || fail "the reference run failed"
cat "$tmp"/ref/part-* | sort >"$tmp/want"
[ "$(wc -l <"$tmp/want")" -eq $n ] || fail "the reference has $(wc -l <"$tmp/want") lines, not $n"

start_coordinator
start_worker a
start_worker b
start_worker c

check_output() {
    cat "$1"/part-* 2>/dev/null | sort >"$tmp/got"
    cmp -s "$tmp/got" "$tmp/want" ||
        fail "$2: the output differs from weir run's: $(wc -l <"$tmp/got") lines," \
            "$(comm -23 "$tmp/got" "$tmp/want" | wc -l) extra," \
            "$(comm -13 "$tmp/got" "$tmp/want" | wc -l) missing"
}

# submit NAME RECORDS [extra flags]: in the background; sets sub (its pid)
submit() {
    name=$1
    records=$2
    shift 2
    "$weir" submit "$plugin" --coordinator "$coord" --parallelism 3 "$@" -- "$tmp/$name" $records \
        >"$tmp/$name.submit.out" 2>"$tmp/$name.submit.log" &
    sub=$!
}

for c in $cases; do
    case $c in
    basic)
        submit basic $n --checkpoint-dir "$tmp/basic-ckpt" --checkpoint-interval-ms 100
        wait $sub || fail "basic: weir submit failed"
        grep -q "finished in" "$tmp/basic.submit.log" || fail "basic: no summary line"
        check_output "$tmp/basic" basic
        # The job ended through one final checkpoint across the workers: the
        # latest, marked final, and the tail was committed through it (the
        # newest part files carry its id).
        fin=$(latest_completed "$tmp/basic-ckpt")
        grep -q '"final": true' "$tmp/basic-ckpt/chk-$fin/MANIFEST.json" ||
            fail "basic: checkpoint $fin is not marked final"
        last=$(ls "$tmp/basic" | sed -n 's/^part-[0-9]*-\([0-9]*\)$/\1/p' | sort -n | tail -n 1)
        [ "$last" = "$fin" ] || fail "basic: the newest part is of checkpoint '$last', not the final $fin"
        # The HTTP API tells the same story.
        id=$(sed -n 's/.*job \([0-9]*\) submitted.*/\1/p' "$tmp/basic.submit.log")
        api "/api/v1/jobs/$id" -f | grep -q '"state":"succeeded"' ||
            fail "basic: /api/v1/jobs/$id does not say succeeded"
        api /api/v1/workers -f | grep -q '"id":"a"' ||
            fail "basic: /api/v1/workers does not list worker a"
        api /metrics -f | grep -q 'weir_coordinator_jobs_ended_total{state="succeeded"} 1' ||
            fail "basic: /metrics does not count the job"
        api /api/v1/health -f | grep -q '"status":"ok"' || fail "basic: not healthy"
        api /api/v1/config -f >"$tmp/config.json" || fail "basic: no /api/v1/config"
        for kv in '"restart_drain_timeout_ms":90000' '"max_outbound_bulk_bytes":536870912' \
            '"heartbeat_timeout_ms":2000' '"outbound_stall_timeout_ms":10000'; do
            grep -q "$kv" "$tmp/config.json" || fail "basic: /api/v1/config lacks $kv: $(cat "$tmp/config.json")"
        done
        # Without the token (or with another, or another scheme) every
        # route is 401, the health check too, and so is an unknown path.
        for p in /api/v1/health /api/v1/jobs "/api/v1/jobs/$id" /api/v1/workers /api/v1/config \
            /metrics /nope; do
            code=$(curl -s -m 5 -o "$tmp/401.body" -D "$tmp/401.head" -w '%{http_code}' "http://$http$p")
            [ "$code" = 401 ] || fail "basic: $p without the token: $code, not 401"
            grep -qi '^WWW-Authenticate: Bearer' "$tmp/401.head" || fail "basic: $p: no WWW-Authenticate"
            grep -q 'missing bearer token' "$tmp/401.body" || fail "basic: $p: $(cat "$tmp/401.body")"
            for h in "Authorization: Bearer wrong-$WEIR_AUTH_TOKEN" "Authorization: Basic eDp5"; do
                code=$(curl -s -m 5 -o "$tmp/401.body" -w '%{http_code}' -H "$h" "http://$http$p")
                [ "$code" = 401 ] || fail "basic: $p with a wrong token: $code, not 401"
                ! grep -q "$WEIR_AUTH_TOKEN" "$tmp/401.body" || fail "basic: $p: the 401 echoes the token"
            done
        done
        [ "$(api /api/v1/health -o /dev/null -w '%{http_code}')" = 200 ] ||
            fail "basic: the health check with the token is not 200"
        ! grep -q "$WEIR_AUTH_TOKEN" "$tmp"/*.log "$tmp"/*.out || fail "basic: a log holds the token"
        ;;
    kill | kill2)
        submit $c $n --checkpoint-dir "$tmp/$c-ckpt" --checkpoint-interval-ms 100
        wait_for 60 has_completed "$tmp/$c-ckpt" || fail "$c: no checkpoint completed"
        lost=$(grep -c "worker lost: b" "$tmp/coord.log" || true)
        kill -KILL "$w_b"
        wait_for 20 sh -c "[ \$(grep -c 'worker lost: b' '$tmp/coord.log') -gt $lost ]" ||
            fail "$c: b not declared lost"
        start_worker b
        if [ $c = kill2 ]; then
            # The second kill once the restarted attempt runs (it may end
            # before it completes another checkpoint: it restored late).
            id=$(sed -n 's/.*job \([0-9]*\) submitted.*/\1/p' "$tmp/$c.submit.log")
            wait_for 60 grep -q "job $id attempt 1 running" "$tmp/coord.log" ||
                fail "$c: the job did not run again after the first kill"
            lost=$(grep -c "worker lost: c" "$tmp/coord.log" || true)
            kill -KILL "$w_c"
            wait_for 20 sh -c "[ \$(grep -c 'worker lost: c' '$tmp/coord.log') -gt $lost ]" ||
                fail "$c: c not declared lost"
            start_worker c
        fi
        wait $sub || fail "$c: weir submit failed"
        check_output "$tmp/$c" $c
        grep -q "restart" "$tmp/$c.submit.log" || fail "$c: the summary does not count restarts"
        api /metrics -f | grep -q 'weir_coordinator_workers_lost_total{cause="' ||
            fail "$c: /metrics does not count the lost worker"
        ;;
    stop)
        submit stop $n --checkpoint-dir "$tmp/stop-ckpt" --checkpoint-interval-ms 100
        wait_for 60 has_completed "$tmp/stop-ckpt" || fail "stop: no checkpoint completed"
        lost_before=$(grep -c "worker lost: a" "$tmp/coord.log" || true)
        kill -STOP "$w_a"
        t0=$(date +%s%N)
        wait_for 10 sh -c "[ \$(grep -c 'worker lost: a (heartbeat timeout' '$tmp/coord.log') -gt 0 ]" ||
            fail "stop: a not declared lost"
        t1=$(date +%s%N)
        ms=$(((t1 - t0) / 1000000))
        [ $ms -le 2500 ] || fail "stop: declared lost after $ms ms (limit 2500)"
        kill -KILL "$w_a"
        kill -CONT "$w_a" 2>/dev/null || true
        start_worker a
        wait $sub || fail "stop: weir submit failed"
        check_output "$tmp/stop" stop
        ;;
    nocheckpoint)
        submit nockpt 100000000
        wait_for 20 sh -c "ls -A '$tmp/nockpt' | grep -q ." || fail "nocheckpoint: the job did not start"
        kill -KILL "$w_c"
        if wait $sub; then fail "nocheckpoint: the job succeeded after losing a worker"; fi
        grep -q "worker c lost" "$tmp/nockpt.submit.log" ||
            fail "nocheckpoint: the failure does not name the lost worker"
        start_worker c
        ;;
    term)
        submit term $n --checkpoint-dir "$tmp/term-ckpt" --checkpoint-interval-ms 50
        wait_for 60 has_completed "$tmp/term-ckpt" || fail "term: no checkpoint completed"
        kill -TERM "$w_a"
        wait "$w_a" || fail "term: worker a did not exit 0 on SIGTERM"
        start_worker a
        wait $sub || fail "term: weir submit failed"
        check_output "$tmp/term" term
        # The coordinator stopped under a running job.
        submit term2 100000000 --checkpoint-dir "$tmp/term2-ckpt" --checkpoint-interval-ms 50
        wait_for 60 has_completed "$tmp/term2-ckpt" || fail "term: no checkpoint completed"
        kill -TERM $cpid
        wait $cpid || fail "term: the coordinator did not exit 0 on SIGTERM"
        if wait $sub; then fail "term: the submit succeeded with its coordinator gone"; fi
        cat "$tmp"/term2/part-* 2>/dev/null | sort >"$tmp/got"
        [ "$(sort -u "$tmp/got" | wc -l)" -eq "$(wc -l <"$tmp/got")" ] ||
            fail "term: a committed line appears twice"
        grep -v -q '^k=[0-9]* n=[0-9]*$' "$tmp/got" && fail "term: a committed line is malformed"
        # Each key's counts are 1..its last: nothing lost before what was kept.
        awk '{ split($1, a, "="); split($2, b, "="); cnt[a[2]]++
               if (b[2] + 0 > mx[a[2]]) mx[a[2]] = b[2] + 0 }
             END { for (k in cnt) if (cnt[k] != mx[k]) exit 1 }' "$tmp/got" ||
            fail "term: a key's committed counts have a gap"
        # The workers cancel the job's subtasks and register again.
        start_coordinator
        for w in a b c; do
            eval "p=\$w_$w"
            kill -TERM "$p"
            wait "$p" || fail "worker $w did not exit cleanly on SIGTERM"
            start_worker $w
        done
        ;;
    *)
        fail "unknown case $c"
        ;;
    esac
    echo "cluster.sh: $c ok"
done
# SIGTERM ends every node cleanly (exit 0; under ASan, LeakSanitizer runs
# at their exit and fails it on a leak).
for w in a b c; do
    eval "p=\$w_$w"
    kill -TERM "$p"
    wait "$p" || fail "worker $w did not exit cleanly on SIGTERM"
done
kill -TERM $cpid
wait $cpid || fail "the coordinator did not exit cleanly on SIGTERM"
