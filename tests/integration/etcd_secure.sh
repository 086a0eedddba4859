#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# etcd_secure.sh WEIR_COMMAND
#
# Coordinators electing through an etcd reached over https and through
# one with auth enabled (Debian's etcd-server, started here on loopback;
# certificates made with the openssl command):
#
#   - https with client certificates (etcd --client-cert-auth): the first
#     coordinator (--etcd-ca, --etcd-cert, --etcd-key) leads, the second
#     stands by and leads once the first is stopped; one whose --etcd-ca is
#     another authority stands by, its log saying the certificate is not
#     signed by that CA file;
#   - auth: with --etcd-user and --etcd-password env://VAR the coordinator
#     leads, and the password is in none of its output; a wrong password
#     stops the node with a message that authentication failed for that
#     user (the password nowhere), an unset variable is refused at start
#     (exit 2) naming the variable.
set -eu
weir=$1
me=etcd_secure.sh
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

t_start=$(date +%s)
step() { echo "etcd_secure.sh: [$(($(date +%s) - t_start)) s] $*" >&2; }

[ -x /usr/bin/etcd ] || fail "etcd not found: run scripts/deps.sh (etcd-server)"
command -v openssl >/dev/null 2>&1 || fail "openssl not found: run scripts/deps.sh (openssl)"

# ---- certificates (ca, cert: lib.sh) ----
ca ca
ca other-ca
cert server ca "DNS:localhost,IP:127.0.0.1"
cert client ca "DNS:weir-coordinator"

# ---- etcd: start_etcd SCHEME [ARGS...] sets eport, etcd_pid, ctl ----
start_etcd() {
    scheme=$1
    shift
    tries=0
    while :; do
        tries=$((tries + 1))
        [ $tries -le 5 ] || fail "etcd did not start"
        eport=$((20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 20000))
        pport=$((eport + 1))
        rm -rf "$tmp/etcd"
        /usr/bin/etcd --name weir-test --data-dir "$tmp/etcd" \
            --listen-client-urls "$scheme://127.0.0.1:$eport" \
            --advertise-client-urls "$scheme://127.0.0.1:$eport" \
            --listen-peer-urls "http://127.0.0.1:$pport" \
            --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
            --initial-cluster "weir-test=http://127.0.0.1:$pport" "$@" >"$tmp/etcd.log" 2>&1 &
        etcd_pid=$!
        pids="$pids $etcd_pid"
        ctl="etcdctl --endpoints=$scheme://127.0.0.1:$eport"
        [ "$scheme" = http ] ||
            ctl="$ctl --cacert=$tmp/ca.crt --cert=$tmp/client.crt --key=$tmp/client.key"
        if wait_for 30 etcd_up && kill -0 "$etcd_pid" 2>/dev/null; then
            return 0
        fi
        echo "etcd_secure.sh: etcd on port $eport did not start; trying another port:" >&2
        tail -n 5 "$tmp/etcd.log" >&2
        kill -KILL "$etcd_pid" 2>/dev/null || true
    done
}
etcd_up() { # etcd answers, or it has exited (its port taken, say): no use waiting
    kill -0 "$etcd_pid" 2>/dev/null || return 0
    # shellcheck disable=SC2086 # $ctl is a command line
    $ctl --dial-timeout=1s --command-timeout=1s endpoint health
}
stop_etcd() {
    kill -TERM "$etcd_pid" 2>/dev/null || true
    reap 30 "$etcd_pid"
}

ha="$tmp/ha"
start_coordinator() { # start_coordinator NAME FLAGS...: sets c_NAME to its pid
    name=$1
    shift
    WEIR_LOG=info "$weir" node --role=coordinator --bind-host 127.0.0.1 --port 0 --ha-dir "$ha" \
        --etcd-lease-ttl-s 2 --etcd-cluster "t$eport" "$@" >"$tmp/$name.out" 2>"$tmp/$name.log" &
    eval "c_$name=\$!"
    pids="$pids $!"
}
leads() { grep -q "listening on 127.0.0.1:" "$tmp/$1.out"; }
stands_by() { grep -q "standing by in $ha" "$tmp/$1.out"; }

# ---- https with client certificates ----
step "starting etcd over https"
start_etcd https --cert-file "$tmp/server.crt" --key-file "$tmp/server.key" \
    --trusted-ca-file "$tmp/ca.crt" --client-cert-auth
eps="https://127.0.0.1:$eport"
tlsflags="--etcd-endpoints $eps --etcd-ca $tmp/ca.crt --etcd-cert $tmp/client.crt --etcd-key $tmp/client.key"
# shellcheck disable=SC2086 # $tlsflags is a list of flags
start_coordinator a $tlsflags
step "etcd up on $eport; waiting for coordinator a to lead"
wait_for 30 leads a || fail "coordinator a did not lead over https"
# shellcheck disable=SC2086
start_coordinator b $tlsflags
wait_for 30 stands_by b || fail "coordinator b did not stand by"
start_coordinator x --etcd-endpoints "$eps" --etcd-ca "$tmp/other-ca.crt" \
    --etcd-cert "$tmp/client.crt" --etcd-key "$tmp/client.key"
wait_for 30 grep -q "is not signed by the configured CA file $tmp/other-ca.crt" "$tmp/x.log" ||
    fail "a coordinator with the wrong --etcd-ca did not say so"
leads x && fail "a coordinator with the wrong --etcd-ca leads"
step "stopping a and x"
# shellcheck disable=SC2154 # c_a, c_x: set by start_coordinator
kill -TERM "$c_a" "$c_x"
reap 30 "$c_a"
reap 30 "$c_x"
wait_for 30 leads b || fail "coordinator b did not lead after a stopped"
# shellcheck disable=SC2154
kill -TERM "$c_b"
reap 30 "$c_b"
stop_etcd
echo "etcd_secure.sh: https with client certificates: ok"

# ---- auth ----
ha="$tmp/ha-auth" # this etcd's revisions start again: a directory of its own
step "starting etcd for auth"
start_etcd http
for c in "user add root:rootpw" "role add weir" \
    "role grant-permission weir --prefix=true readwrite /weir/" \
    "user add tester:pw-Xq7-tester" "user grant-role tester weir" "auth enable"; do
    # shellcheck disable=SC2086 # $ctl and $c are command lines
    $ctl $c >/dev/null 2>&1 || fail "etcdctl $c"
done
step "auth enabled on $eport"
eps="http://127.0.0.1:$eport"
WEIR_ETCD_PW=pw-Xq7-tester
export WEIR_ETCD_PW
start_coordinator a --etcd-endpoints "$eps" --etcd-user tester --etcd-password env://WEIR_ETCD_PW
wait_for 30 leads a || fail "coordinator a did not lead with etcd's auth"
WEIR_ETCD_PW=wrong-Zk9-password
start_coordinator w --etcd-endpoints "$eps" --etcd-user tester --etcd-password env://WEIR_ETCD_PW
step "waiting for the coordinator with a wrong password to stop"
# shellcheck disable=SC2154 # c_w: set by start_coordinator
reap 60 "$c_w"
[ $rc -ne 0 ] || fail "a coordinator with a wrong password did not stop"
grep -q 'authentication as user "tester" failed' "$tmp/w.log" ||
    fail "a wrong password: no 'authentication as user \"tester\" failed'"
unset WEIR_ETCD_PW
"$weir" node --role=coordinator --ha-dir "$ha" --etcd-endpoints "$eps" --etcd-user tester \
    --etcd-password env://WEIR_ETCD_PW >"$tmp/u.out" 2>"$tmp/u.log" &
pids="$pids $!"
reap 30 $!
[ $rc -eq 2 ] || fail "an unset password variable: exit $rc, not 2"
grep -q 'WEIR_ETCD_PW' "$tmp/u.log" || fail "an unset password variable is not named"
step "stopping a"
kill -TERM "$c_a"
reap 30 "$c_a"
if grep -l -e pw-Xq7 -e Zk9 "$tmp"/*.out "$tmp"/*.log >/dev/null 2>&1; then
    fail "a password is in the output: $(grep -l -e pw-Xq7 -e Zk9 "$tmp"/*.out "$tmp"/*.log)"
fi
stop_etcd
echo "etcd_secure.sh: auth: ok"
