#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# console.sh WEIR_COMMAND CONSOLE_JOB_PLUGIN SCREENSHOT
#
# The web console in a real browser: a coordinator (serving the console
# built into weir) and two workers on loopback run examples/console_job.c
# with its slow operator, and tests/integration/console_test.mjs opens the
# job's page in headless chromium (playwright-core, tests/npm) and checks
# what it shows: the graph's operators, the operator upstream of "slow"
# marked backpressured, records/s rising, a completed checkpoint in the
# history; it saves a screenshot of the page to SCREENSHOT; then it
# SIGKILLs worker w2 and waits for the restart, with its cause, on the
# page. Every node runs with WEIR_AUTH_TOKEN set: the browser presents
# it once (?access_token=) and the server's cookie does the rest.
#
# Exit 0 passed, 1 failed, 77 skipped: chromium cannot start here (the
# CMake test treats 77 as skipped). No wait is a fixed sleep: each polls
# for its event with a generous deadline.
#
# The screenshot in docs/ is made the same way, once the sparklines hold
# 40 samples:
#   CONSOLE_SHOT_SAMPLES=40 tests/integration/console.sh build/release/weir \
#       build/release/examples/console_job.so docs/console-job.png
set -eu
weir=$1
plugin=$2
shot=$3
here=$(cd "$(dirname "$0")" && pwd)
me=console.sh
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh"

command -v node >/dev/null 2>&1 || fail "node is missing (run scripts/deps.sh)"
[ -d "$here/../npm/node_modules/playwright-core" ] ||
    fail "tests/npm has no playwright-core (run scripts/deps.sh)"
chromium=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
    echo "console.sh: SKIP: no chromium at $chromium (scripts/deps.sh installs it)"
    exit 77
fi

WEIR_AUTH_TOKEN=console-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export WEIR_AUTH_TOKEN
WEIR_LOG=info "$weir" node --role=coordinator --bind-host 127.0.0.1 --port 0 --http-port 0 \
    --heartbeat-timeout-ms 2000 >"$tmp/coord.out" 2>"$tmp/coord.log" &
pids="$pids $!"
wait_for 20 grep -q "http on" "$tmp/coord.out" || fail "the coordinator did not start"
coord=$(sed -n 's/.*listening on \(.*\)$/\1/p' "$tmp/coord.out")
http=$(sed -n 's/.*http on \(.*\)$/\1/p' "$tmp/coord.out")
query="?access_token=$WEIR_AUTH_TOKEN"
# The page and its API need the token: without it, 401; with it once in
# the query, a cookie for the rest.
code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://$http/jobs/1")
[ "$code" = 401 ] || fail "the console without the token: $code, not 401"
curl -s -m 5 -D - -o /dev/null "http://$http/$query" | grep -qi '^set-cookie: *weir_token=' ||
    fail "?access_token= got no weir_token cookie"

for w in w1 w2; do
    "$weir" node --role=worker --id $w --coordinator "$coord" --slots 4 --threads 1 \
        --cache-dir "$tmp/cache-$w" >"$tmp/$w.out" 2>"$tmp/$w.log" &
    pid=$!
    pids="$pids $pid"
    eval "pid_$w=$pid"
    wait_for 20 grep -q registered "$tmp/$w.out" || fail "worker $w did not register"
done

# The slow operator pays 500 µs a record against the 8 a millisecond each
# source subtask offers: its input waits for credits nearly all the time.
"$weir" submit "$plugin" --coordinator "$coord" --parallelism 2 --detach \
    --checkpoint-dir "$tmp/ckpt" --checkpoint-interval-ms 1000 -- 500 8 \
    >"$tmp/submit.out" 2>"$tmp/submit.log" || fail "weir submit failed: $(cat "$tmp/submit.log")"
id=$(grep -o '[0-9][0-9]*' "$tmp/submit.out" | head -n 1)
[ -n "$id" ] || fail "no job id from weir submit: $(cat "$tmp/submit.out")"

mkdir -p "$(dirname "$shot")"
rc=0
# shellcheck disable=SC2154 # pid_w2 is set by the eval above
node "$here/console_test.mjs" "http://$http" "$id" "$pid_w2" w2 "$shot" \
    "$query" || rc=$?
[ $rc -ne 77 ] || exit 77
[ $rc -eq 0 ] || fail "the browser's checks failed"
echo "console.sh: passed (job $id; screenshot $shot)"
