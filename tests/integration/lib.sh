# SPDX-License-Identifier: Apache-2.0
# lib.sh - what the scripts of tests/integration share. Source it with the
# script's name in `me` (for the messages and the temporary directory):
#
#   me=tls.sh
#   . "$(dirname "$0")/lib.sh"
#
# It makes $tmp (/tmp/weir-NAME-XXXXXX), keeps the pids of what the script
# starts in $pids, and kills them and removes $tmp at the end (KEEP=1
# keeps both, for a look afterwards; a process left stopped is continued
# before it is killed). Then:
#
#   fail MSG...            "ME: FAIL: MSG" and the last 40 lines of every
#                          $tmp/*.out and $tmp/*.log (and of the files in
#                          $fail_extra, when the script sets it), exit 1
#   wait_for SECS CMD...   poll every 50 ms until CMD succeeds (1 when
#                          SECS pass first: a wall-clock deadline, as a
#                          poll on a loaded machine may take far longer
#                          than 50 ms)
#   reap SECS PID          wait for PID to exit, its status in $rc; fail
#                          with the logs when it still runs after SECS
#   refused WHAT GREP CMD...
#                          CMD must exit 2 saying GREP on stderr, and not
#                          start a node (no "listening" or "registered")
#   ca NAME                a self-signed authority $tmp/NAME.crt and .key
#   cert NAME CA SAN       $tmp/NAME.crt and .key signed by CA, naming SAN
#                          (openssl's subjectAltName, "DNS:x,IP:127.0.0.1")

# shellcheck shell=sh disable=SC2154,SC2034 # me: the sourcing script's; rc: for it
tmp=$(mktemp -d "/tmp/weir-${me%.sh}-XXXXXX")
pids=""
cleanup() {
    # (CONT first: a test may leave a process stopped.)
    for p in $pids; do kill -CONT "$p" 2>/dev/null || true; kill -KILL "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
[ -z "${KEEP:-}" ] || trap - EXIT

fail() {
    echo "$me: FAIL: $*" >&2
    for f in "$tmp"/*.out "$tmp"/*.log ${fail_extra:-}; do
        [ -f "$f" ] || continue
        echo "--- $f" >&2
        tail -n 40 "$f" >&2
    done
    exit 1
}

wait_for() {
    end=$(($(date +%s) + $1))
    shift
    while ! "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt $end ] || return 1
        sleep 0.05
    done
}

reap() {
    end=$(($(date +%s) + $1))
    while kill -0 "$2" 2>/dev/null; do
        [ "$(date +%s)" -lt $end ] || fail "process $2 still running after $1 s"
        sleep 0.05
    done
    rc=0
    wait "$2" || rc=$?
}

refused() {
    what=$1
    want=$2
    shift 2
    if "$@" >"$tmp/refused.out" 2>"$tmp/refused.err"; then
        fail "$what was taken"
    else
        rc=$?
        if [ $rc -ne 2 ] || ! grep -q -- "$want" "$tmp/refused.err"; then
            fail "$what: exit $rc, not 2 with \"$want\": $(cat "$tmp/refused.err")"
        fi
    fi
    ! grep -q -e listening -e registered "$tmp/refused.out" || fail "$what: the node started"
}

ca() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj "/CN=weir test $1" -keyout "$tmp/$1.key" -out "$tmp/$1.crt" 2>/dev/null ||
        fail "openssl could not make the authority $1"
}

cert() {
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
        -keyout "$tmp/$1.key" -out "$tmp/$1.csr" 2>/dev/null || fail "openssl: request for $1"
    printf 'subjectAltName=%s\n' "$3" >"$tmp/$1.ext"
    openssl x509 -req -in "$tmp/$1.csr" -CA "$tmp/$2.crt" -CAkey "$tmp/$2.key" \
        -CAcreateserial -days 2 -extfile "$tmp/$1.ext" -out "$tmp/$1.crt" 2>/dev/null ||
        fail "openssl: signing $1"
}
