#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# data_tls.sh WEIR_COMMAND JOB_EO_PLUGIN
#
# TLS on the data plane (the workers' channels to each other), with
# processes on loopback started here and certificates made here with the
# openssl command (scripts/deps.sh):
#
#   - refused at start (exit 2), naming what is missing or wrong: a worker
#     with --data-tls-cert alone, or without --data-tls-ca, a coordinator
#     given a data-plane flag, a file that cannot be read, a key that is not
#     the certificate's; weir lint --role=worker reports the same;
#   - a coordinator and two workers whose channels are mutual TLS run
#     tests/job/job_eo.so (its subtasks spread over both workers: two slots
#     each for four subtasks) to exactly the output of an uninterrupted
#     `weir run`, every line once;
#   - a worker with data-plane TLS and one without cannot run a job
#     together: it fails at once with the message that says what to do.
#
# Every wait polls for its event with a generous deadline.
set -eu
weir=$1
plugin=$2
me=data_tls.sh
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

command -v openssl >/dev/null 2>&1 || fail "openssl not found: run scripts/deps.sh (openssl)"

# ---- certificates (ca, cert: lib.sh) -------------------------------------------------------
ca ca
# Each worker's data host is 127.0.0.1 (the address the coordinator sees):
# its certificate names it.
cert worker-a ca "DNS:localhost,IP:127.0.0.1"
cert worker-b ca "DNS:localhost,IP:127.0.0.1"
data_tls() { # the data-plane flags of a worker with certificate $1
    echo "--data-tls-cert $tmp/$1.crt --data-tls-key $tmp/$1.key --data-tls-ca $tmp/ca.crt"
}

# ---- flags refused at start --------------------------------------------------------------
# (refused: lib.sh)
w="--role=worker --id z --coordinator 127.0.0.1:1"
# shellcheck disable=SC2086 # $w is several words
refused "--data-tls-cert alone" "--data-tls-key and --data-tls-ca missing" \
    "$weir" node $w --data-tls-cert "$tmp/worker-a.crt"
# shellcheck disable=SC2086
refused "--data-tls-cert and --data-tls-key without --data-tls-ca" "--data-tls-ca missing" \
    "$weir" node $w --data-tls-cert "$tmp/worker-a.crt" --data-tls-key "$tmp/worker-a.key"
# shellcheck disable=SC2086
refused "--data-tls-no-verify-hostname alone" "the data plane is plaintext" \
    "$weir" node $w --data-tls-no-verify-hostname
refused "a data-plane flag on the coordinator" "are for workers" \
    "$weir" node --role=coordinator --port 0 --data-tls-ca "$tmp/ca.crt"
# shellcheck disable=SC2086
refused "a missing certificate file" "$tmp/nope.crt" \
    "$weir" node $w --data-tls-cert "$tmp/nope.crt" --data-tls-key "$tmp/worker-a.key" \
    --data-tls-ca "$tmp/ca.crt"
# shellcheck disable=SC2086
refused "a key that is not the certificate's" "does not match" \
    "$weir" node $w --data-tls-cert "$tmp/worker-a.crt" --data-tls-key "$tmp/worker-b.key" \
    --data-tls-ca "$tmp/ca.crt"
# shellcheck disable=SC2086
refused "weir lint, --data-tls-cert alone" "--data-tls-key and --data-tls-ca missing" \
    "$weir" lint $w --data-tls-cert "$tmp/worker-a.crt"
# weir lint: an unreadable file is a problem found (1); good files pass.
# shellcheck disable=SC2086
if "$weir" lint $w --data-tls-cert "$tmp/worker-a.crt" --data-tls-key "$tmp/worker-a.key" \
    --data-tls-ca "$tmp/nope-ca.crt" >/dev/null 2>"$tmp/lint.err"; then
    fail "weir lint took a missing authority"
elif [ $? -ne 1 ] || ! grep -q "nope-ca.crt" "$tmp/lint.err"; then
    fail "weir lint, a missing authority: $(cat "$tmp/lint.err")"
fi
# shellcheck disable=SC2046,SC2086
"$weir" lint $w $(data_tls worker-a) >"$tmp/lint.out" 2>&1 ||
    fail "weir lint: $(cat "$tmp/lint.out")"

# ---- a cluster whose data plane is TLS ---------------------------------------------------
# start_coordinator NAME: sets coord (HOST:PORT) and cpid.
start_coordinator() {
    WEIR_LOG=info "$weir" node --role=coordinator --bind-host 127.0.0.1 --port 0 \
        >"$tmp/$1.out" 2>"$tmp/$1.log" &
    cpid=$!
    pids="$pids $cpid"
    wait_for 20 grep -q listening "$tmp/$1.out" || fail "coordinator $1 did not start"
    coord=$(sed -n 's/.*listening on \(.*\)$/\1/p' "$tmp/$1.out")
}
# start_worker ID [flags]: two slots, so that four subtasks take both
# workers; waits until it registered. $log: its log level (info).
log=info
start_worker() {
    id=$1
    shift
    WEIR_LOG=$log "$weir" node --role=worker --id "$id" --coordinator "$coord" --slots 2 \
        --threads 1 "$@" >"$tmp/$id.out" 2>"$tmp/$id.log" &
    pids="$pids $!"
    wait_for 30 grep -q registered "$tmp/$id.out" || fail "worker $id did not register"
}

n=200000
# The reference: an uninterrupted weir run.
"$weir" run "$plugin" --parallelism 2 --no-progress --quiet --checkpoint-dir "$tmp/ref-ckpt" \
    --checkpoint-interval-ms 100 -- "$tmp/ref" $n || fail "the reference run failed"
cat "$tmp"/ref/part-* | sort >"$tmp/want"
[ "$(wc -l <"$tmp/want")" -eq $n ] || fail "the reference has $(wc -l <"$tmp/want") lines, not $n"

start_coordinator coord
# shellcheck disable=SC2046 # the flags are several words
start_worker a $(data_tls worker-a)
log=debug
# shellcheck disable=SC2046
start_worker b $(data_tls worker-b)
log=info
"$weir" submit "$plugin" --coordinator "$coord" --parallelism 2 --max-restarts 0 \
    --checkpoint-dir "$tmp/ckpt" --checkpoint-interval-ms 100 -- "$tmp/out" $n \
    >"$tmp/submit.out" 2>"$tmp/submit.log" ||
    fail "the job over a TLS data plane failed: $(cat "$tmp/submit.log")"
cat "$tmp"/out/part-* | sort >"$tmp/got"
cmp -s "$tmp/got" "$tmp/want" ||
    fail "the output differs from weir run's: $(wc -l <"$tmp/got") lines," \
        "$(comm -23 "$tmp/got" "$tmp/want" | wc -l) extra," \
        "$(comm -13 "$tmp/got" "$tmp/want" | wc -l) missing"
[ "$(uniq -d "$tmp/got" | wc -l)" -eq 0 ] || fail "the job committed a line twice"
# The subtasks spanned both workers: b's consumers took their producers on
# a, over TLS.
grep -q "its producer is in, over TLS" "$tmp/b.log" ||
    fail "worker b took no channel over TLS: were the subtasks all on one worker?"
kill -TERM "$cpid"
wait "$cpid" 2>/dev/null || true

# ---- one worker with data-plane TLS, one without -----------------------------------------
# The TLS worker's producers fail their handshake with the plaintext
# worker's consumers, and the plaintext worker's producers are told by the
# TLS worker's consumers: the job fails at once (no restarts), saying what
# to do, rather than waiting out the channels' connect deadline.
start_coordinator coord2
# shellcheck disable=SC2046
start_worker c $(data_tls worker-a)
start_worker d
start=$(date +%s)
if "$weir" submit "$plugin" --coordinator "$coord" --parallelism 2 --max-restarts 0 \
    -- "$tmp/mixed" $n >"$tmp/mixed.out" 2>"$tmp/mixed.log"; then
    fail "a job over a TLS and a plaintext worker succeeded"
fi
took=$(($(date +%s) - start))
grep -q "is the data plane TLS on every worker? give every worker --data-tls-cert, --data-tls-key and --data-tls-ca" \
    "$tmp/mixed.log" || fail "the mixed job's failure does not say what to do: $(cat "$tmp/mixed.log")"
[ "$took" -lt 25 ] || fail "the mixed job took ${took}s to fail: it waited for a deadline"
echo "data_tls.sh: ok"
