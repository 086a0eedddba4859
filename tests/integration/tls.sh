#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tls.sh WEIR_COMMAND JOB_EO_PLUGIN
#
# TLS on the cluster port, with processes on loopback started here and
# certificates made here with the openssl command (scripts/deps.sh):
#
#   - a coordinator with mutual TLS (--tls-cert/--tls-key/--tls-client-ca),
#     two workers with --tls-ca and client certificates, and weir submit
#     over TLS: the job runs to its end with every record committed once;
#   - refused, each with the message that says what to do: a worker
#     without TLS, a worker without a client certificate, a worker whose
#     certificate another authority signed, a client without TLS;
#   - a coordinator whose certificate names another host: a worker
#     connecting by 127.0.0.1 is refused with the names the certificate
#     carries and how to fix it; --tls-no-verify-hostname gets it in;
#   - incoherent flags and unreadable files refused at start (exit 2),
#     and by weir lint.
#
# Every wait polls for its event with a generous deadline.
set -eu
weir=$1
plugin=$2
me=tls.sh
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

command -v openssl >/dev/null 2>&1 || fail "openssl not found: run scripts/deps.sh (openssl)"

# ---- certificates (ca, cert: lib.sh) -------------------------------------------------------
ca ca
ca other-ca
cert server ca "DNS:localhost,IP:127.0.0.1"
cert elsewhere ca "DNS:other.example"
cert client-a ca "DNS:worker-a"
cert client-b ca "DNS:worker-b"
cert client-x other-ca "DNS:worker-x"
tls_client() { # the flags of a worker or client with certificate $1
    echo "--tls-ca $tmp/ca.crt --tls-client-cert $tmp/$1.crt --tls-client-key $tmp/$1.key"
}

# ---- flags refused at start --------------------------------------------------------------
# (refused: lib.sh)
refused "--tls-cert without --tls-key" "--tls-cert without --tls-key" \
    "$weir" node --role=coordinator --port 0 --tls-cert "$tmp/server.crt"
refused "--tls-client-ca without a certificate" "--tls-client-ca without --tls-cert" \
    "$weir" node --role=coordinator --port 0 --tls-client-ca "$tmp/ca.crt"
refused "a worker's flag on the coordinator" "are for workers and clients" \
    "$weir" node --role=coordinator --port 0 --tls-ca "$tmp/ca.crt"
refused "--tls-client-cert without --tls-ca" "--tls-client-cert without --tls-ca" \
    "$weir" node --role=worker --id z --coordinator 127.0.0.1:1 \
    --tls-client-cert "$tmp/client-a.crt" --tls-client-key "$tmp/client-a.key"
refused "--tls-client-cert without its key" "--tls-client-cert without --tls-client-key" \
    "$weir" node --role=worker --id z --coordinator 127.0.0.1:1 --tls-ca "$tmp/ca.crt" \
    --tls-client-cert "$tmp/client-a.crt"
refused "a missing certificate file" "$tmp/nope.crt" \
    "$weir" node --role=coordinator --port 0 --tls-cert "$tmp/nope.crt" --tls-key "$tmp/server.key"
refused "a key that is not the certificate's" "does not match" \
    "$weir" node --role=coordinator --port 0 --tls-cert "$tmp/server.crt" \
    --tls-key "$tmp/client-a.key"
refused "weir jobs with a missing authority" "$tmp/nope-ca.crt" \
    "$weir" jobs --coordinator 127.0.0.1:1 --tls-ca "$tmp/nope-ca.crt"
# weir lint: the same refusals; an unreadable file is a problem found (1).
if "$weir" lint --role=coordinator --tls-cert "$tmp/nope.crt" --tls-key "$tmp/server.key" \
    >/dev/null 2>"$tmp/lint.err"; then
    fail "weir lint took a missing certificate"
elif [ $? -ne 1 ] || ! grep -q "nope.crt" "$tmp/lint.err"; then
    fail "weir lint, a missing certificate: $(cat "$tmp/lint.err")"
fi
"$weir" lint --role=coordinator --tls-cert "$tmp/server.crt" --tls-key "$tmp/server.key" \
    --tls-client-ca "$tmp/ca.crt" >"$tmp/lint.out" 2>&1 || fail "weir lint: $(cat "$tmp/lint.out")"

# ---- a cluster over mutual TLS -----------------------------------------------------------
# start_coordinator NAME CERT [flags]: sets coord (HOST:PORT) and cpid.
start_coordinator() {
    name=$1
    crt=$2
    shift 2
    WEIR_LOG=info "$weir" node --role=coordinator --bind-host 127.0.0.1 --port 0 \
        --tls-cert "$tmp/$crt.crt" --tls-key "$tmp/$crt.key" "$@" \
        >"$tmp/$name.out" 2>"$tmp/$name.log" &
    cpid=$!
    pids="$pids $cpid"
    wait_for 20 grep -q listening "$tmp/$name.out" || fail "coordinator $name did not start"
    coord=$(sed -n 's/.*listening on \(.*\)$/\1/p' "$tmp/$name.out")
}
# start_worker ID COORDINATOR [flags]: in the background; sets wpid.
start_worker() {
    id=$1
    at=$2
    shift 2
    WEIR_LOG=info "$weir" node --role=worker --id "$id" --coordinator "$at" --slots 4 --threads 1 \
        "$@" >"$tmp/$id.out" 2>"$tmp/$id.log" &
    wpid=$!
    pids="$pids $wpid"
}
registered() { grep -q registered "$tmp/$1.out"; }
# refused_worker ID GREP_WORKER GREP_COORD COORDINATOR [flags]: the worker
# does not get in, and both sides say why.
refused_worker() {
    id=$1
    wmsg=$2
    cmsg=$3
    shift 3
    start_worker "$id" "$@"
    wait_for 30 grep -q -- "$wmsg" "$tmp/$id.log" ||
        fail "worker $id: no \"$wmsg\" in its log"
    [ -z "$cmsg" ] || wait_for 30 grep -q -- "$cmsg" "$tmp/coord.log" ||
        fail "worker $id: the coordinator did not log \"$cmsg\""
    ! registered "$id" || fail "worker $id registered"
    kill -KILL "$wpid"
}

start_coordinator coord server --tls-client-ca "$tmp/ca.crt"
port=${coord##*:}
# shellcheck disable=SC2046 # the flags are several words
start_worker a "127.0.0.1:$port" $(tls_client client-a)
# shellcheck disable=SC2046
start_worker b "localhost:$port" $(tls_client client-b) # by its DNS name
wait_for 30 registered a || fail "worker a did not register over TLS"
wait_for 30 registered b || fail "worker b did not register over TLS (by name)"

n=200000
# shellcheck disable=SC2046
"$weir" submit "$plugin" --coordinator "$coord" $(tls_client client-a) --parallelism 2 \
    --checkpoint-dir "$tmp/ckpt" --checkpoint-interval-ms 100 -- "$tmp/out" $n \
    >"$tmp/submit.out" 2>"$tmp/submit.log" || fail "the job over TLS failed: $(cat "$tmp/submit.log")"
cat "$tmp"/out/part-* | sort >"$tmp/got"
[ "$(wc -l <"$tmp/got")" -eq $n ] || fail "the job committed $(wc -l <"$tmp/got") lines, not $n"
[ "$(sort -u "$tmp/got" | wc -l)" -eq $n ] || fail "the job committed a line twice"
# shellcheck disable=SC2046
"$weir" jobs --coordinator "$coord" $(tls_client client-b) >"$tmp/jobs.out" 2>"$tmp/jobs.log" ||
    fail "weir jobs over TLS: $(cat "$tmp/jobs.log")"
grep -q succeeded "$tmp/jobs.out" || fail "weir jobs does not list the job: $(cat "$tmp/jobs.out")"

# Refused: plain TCP; no client certificate; another authority's.
refused_worker plain "does it ask for TLS? give the worker --tls-ca" "rejected: TLS handshake" \
    "$coord"
refused_worker nocert "certificate" "" "$coord" --tls-ca "$tmp/ca.crt"
# shellcheck disable=SC2046
refused_worker stranger "TLS" "" "$coord" $(tls_client client-x)
if "$weir" jobs --coordinator "$coord" >/dev/null 2>"$tmp/plainjobs.log"; then
    fail "weir jobs without TLS got an answer from a TLS coordinator"
fi
# shellcheck disable=SC2046
if "$weir" jobs --coordinator "$coord" --tls-ca "$tmp/other-ca.crt" >/dev/null \
    2>"$tmp/wrongca.log"; then
    fail "weir jobs took a certificate its authority did not sign"
fi
grep -q "TLS handshake" "$tmp/wrongca.log" || fail "weir jobs, wrong authority: $(cat "$tmp/wrongca.log")"
kill -TERM "$cpid"
wait "$cpid" 2>/dev/null || true

# ---- a certificate for another host ------------------------------------------------------
start_coordinator coord2 elsewhere
refused_worker misnamed "names DNS:other.example but not 127.0.0.1" "" "$coord" \
    --tls-ca "$tmp/ca.crt"
grep -q "subjectAltName" "$tmp/misnamed.log" || fail "the refusal does not say how to fix it"
start_worker lax "$coord" --tls-ca "$tmp/ca.crt" --tls-no-verify-hostname
wait_for 30 registered lax || fail "--tls-no-verify-hostname: the worker did not register"
echo "tls.sh: ok"
