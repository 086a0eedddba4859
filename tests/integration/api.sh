#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# api.sh WEIR_COMMAND SEQUENCE_JOB_PLUGIN
#
# The operator's JSON API and terminal view (docs/api.md) on a coordinator
# and two workers on loopback, every request with the bearer token:
#
#   - POST /api/v1/jobs submits a multipart upload of the plugin and its
#     arguments, the settings in the query (201 {"id":N}); a malformed,
#     unknown or incoherent setting, a body without the plugin or with an
#     unknown field, and a file that is not a weir plugin are 400s naming
#     what was wrong; without the token, 401
#   - GET /api/v1/jobs/ID shows the plan (operators, a hash edge), per
#     operator the records per second rising, each subtask's worker, the
#     checkpoint history with completed checkpoints and their bytes
#   - GET /api/v1/jobs/ID/events streams the job as Server-Sent Events
#   - `weir job ID` prints the same as tables
#   - after a worker is SIGKILLed: a restart with its cause, in the API and
#     in `weir job`, and the attempt placed on the worker left
#   - DELETE /api/v1/jobs/ID cancels (202): the event stream ends with the
#     job cancelled; again, 409; an unknown job, 404
#   - `weir run --http-port 0` prints the URL of its own API, which shows
#     its job while it runs
#
# JSON is checked with node (scripts/deps.sh installs nodejs). Every wait
# polls for its condition with a generous deadline.
set -eu
weir=$1
plugin=$2
me=api.sh
# shellcheck source=tests/integration/lib.sh
. "$(dirname "$0")/lib.sh" # its fail is replaced below, by one that says more

WEIR_AUTH_TOKEN=api-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export WEIR_AUTH_TOKEN
api() {
    p=$1
    shift
    curl -s -m 10 -H "Authorization: Bearer $WEIR_AUTH_TOKEN" "$@" "http://$http$p"
}

fail() {
    echo "api.sh: FAIL: $*" >&2
    for f in "$tmp"/*.log "$tmp"/*.json; do
        [ -f "$f" ] || continue
        echo "--- $f" >&2
        tail -c 3000 "$f" >&2
        echo >&2
    done
    exit 1
}


# check FILE EXPR: the JSON in FILE, as d, makes the JavaScript EXPR true.
check() {
    node -e 'const d = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
process.exit((eval(process.argv[2])) ? 0 : 1);' "$1" "$2"
}
# job_has ID EXPR: GET /api/v1/jobs/ID into $tmp/job.json, and check EXPR.
job_has() {
    api "/api/v1/jobs/$1" -f >"$tmp/job.json" && check "$tmp/job.json" "$2"
}

WEIR_LOG=info "$weir" node --role=coordinator --bind-host 127.0.0.1 --port 0 --http-port 0 \
    >"$tmp/coord.out" 2>"$tmp/coord.log" &
pids="$pids $!"
wait_for 20 grep -q listening "$tmp/coord.out" || fail "the coordinator did not start"
coord=$(sed -n 's/.*listening on \(.*\)$/\1/p' "$tmp/coord.out")
http=$(sed -n 's/.*http on \(.*\)$/\1/p' "$tmp/coord.out")
for w in a b; do
    "$weir" node --role=worker --id $w --coordinator "$coord" --slots 4 --cache-dir "$tmp/cache-$w" \
        >"$tmp/$w.out" 2>"$tmp/$w.log" &
    eval "w_$w=\$!"
    pids="$pids $!"
    wait_for 20 grep -q registered "$tmp/$w.out" || fail "worker $w did not register"
done

# ---- POST /api/v1/jobs: refusals first, each naming what was wrong ----
# post QUERY [curl -F args...]: the answer's body in $tmp/post.json, the
# status in $code.
post() {
    q=$1
    shift
    code=$(api "/api/v1/jobs$q" -o "$tmp/post.json" -w '%{http_code}' "$@")
}
refused() { # refused WHAT WANT_TEXT QUERY [curl -F args...]
    what=$1
    want=$2
    shift 2
    post "$@"
    [ "$code" = 400 ] || fail "POST $what: $code, not 400: $(cat "$tmp/post.json")"
    grep -q "$want" "$tmp/post.json" || fail "POST $what: $(cat "$tmp/post.json") does not say $want"
}
refused "parallelism=x" "query parameter parallelism: x is not a number" "?parallelism=x" \
    -F "plugin=@$plugin"
refused "a misspelt setting" 'unknown query parameter \\"paralelism\\"' "?paralelism=2" \
    -F "plugin=@$plugin"
refused "an interval without a directory" "checkpoint_interval_ms needs checkpoint_dir" \
    "?checkpoint_interval_ms=100" -F "plugin=@$plugin"
refused "a relative directory" "checkpoint_dir: not an absolute path" "?checkpoint_dir=ck" \
    -F "plugin=@$plugin"
refused "no plugin" 'no \\"plugin\\" field' "" -F "arg=1"
refused "an unknown field" 'unknown field \\"plugins\\"' "" -F "plugins=@$plugin"
refused "not a plugin" "not a weir job plugin" "" -F "plugin=@$tmp/coord.out"
refused "not multipart" "the body: " "" -H "Content-Type: text/plain" --data-binary x
code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' -F "plugin=@$plugin" "http://$http/api/v1/jobs")
[ "$code" = 401 ] || fail "POST without the token: $code, not 401"

# ---- a running job: 2 x 2000 records per second for 60 s ----
post "?parallelism=2&checkpoint_dir=$tmp/ck&checkpoint_interval_ms=300" -F "plugin=@$plugin" \
    -F "arg=$tmp/out" -F "arg=240000" -F "arg=16" -F "arg=2"
[ "$code" = 201 ] || fail "POST the job: $code: $(cat "$tmp/post.json")"
id=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).id)' "$tmp/post.json")
[ -n "$id" ] || fail "no id in $(cat "$tmp/post.json")"

wait_for 30 job_has "$id" 'd.state === "running" && d.operators &&
    d.operators[0].records_out_per_s > 0 &&
    d.checkpoints.history.some(c => c.state === "completed" && c.bytes > 0)' ||
    fail "job $id: no rates or no completed checkpoint in the API"
check "$tmp/job.json" 'd.plan.operators.map(o => o.name).join() === "counter,one,count,line,out" &&
    d.plan.edges.some(e => e.partition === "hash" && e.from === 1 && e.to === 2) &&
    d.operators.every(o => o.subtasks.length === 2 &&
                           o.subtasks.every(s => s.worker === "a" || s.worker === "b")) &&
    d.plan.operators[0].kind === "source" && d.plan.operators[4].kind === "sink" &&
    typeof d.now_ms === "number" && d.restart_history.length === 0 && d.errors.length === 0' ||
    fail "job $id: the detail is not right"
cp "$tmp/job.json" "$tmp/first.json"
# records/s rising: the source's count grows between two readings
wait_for 20 job_has "$id" "d.operators[0].records_out > $(node -e '
console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).operators[0].records_out)' \
    "$tmp/first.json")" || fail "job $id: the source's count does not grow"

# the event stream: events, one a second
timeout 10 curl -s -N -H "Authorization: Bearer $WEIR_AUTH_TOKEN" \
    "http://$http/api/v1/jobs/$id/events" >"$tmp/events.txt" || true
[ "$(grep -c '^event: job$' "$tmp/events.txt")" -ge 3 ] ||
    fail "the event stream: $(head -c 600 "$tmp/events.txt")"
grep '^data: {' "$tmp/events.txt" | tail -n 1 | sed 's/^data: //' >"$tmp/event.json"
check "$tmp/event.json" "d.id === $id && d.operators.length === 5" ||
    fail "the event stream's data is not the job"
code=$(api "/api/v1/jobs/999/events" -o /dev/null -w '%{http_code}')
[ "$code" = 404 ] || fail "events of an unknown job: $code, not 404"

# the terminal's view
"$weir" job "$id" --coordinator "$coord" >"$tmp/job.txt" 2>&1 || fail "weir job: $(cat "$tmp/job.txt")"
for want in "job $id \"sequence\": running" OPERATOR "counter   source" "checkpoints:" completed; do
    grep -q "$want" "$tmp/job.txt" || fail "weir job lacks '$want': $(cat "$tmp/job.txt")"
done
if "$weir" job 999 --coordinator "$coord" >/dev/null 2>"$tmp/nojob.txt"; then
    fail "weir job 999 succeeded"
fi
grep -q "no job 999" "$tmp/nojob.txt" || fail "weir job 999: $(cat "$tmp/nojob.txt")"

# ---- a worker lost: the restart and its cause ----
# shellcheck disable=SC2154 # w_b is set by the eval above
kill -KILL "$w_b"
wait_for 60 job_has "$id" 'd.restart_history.length >= 1 &&
    d.restart_history[0].cause.includes("worker b lost") && d.attempt >= 1 &&
    d.operators && d.operators.every(o => o.subtasks.every(s => s.worker === "a"))' ||
    fail "job $id: no restart with its cause after worker b was lost"
"$weir" job "$id" --coordinator "$coord" >"$tmp/job.txt" 2>&1 || fail "weir job after the loss"
grep -q "worker b lost" "$tmp/job.txt" || fail "weir job shows no restart: $(cat "$tmp/job.txt")"

# ---- cancel ----
timeout 60 curl -s -N -H "Authorization: Bearer $WEIR_AUTH_TOKEN" \
    "http://$http/api/v1/jobs/$id/events" >"$tmp/events2.txt" &
evs=$!
wait_for 20 grep -q '^event: job$' "$tmp/events2.txt" || fail "no event before the cancel"
code=$(api "/api/v1/jobs/$id" -X DELETE -o "$tmp/del.json" -w '%{http_code}')
[ "$code" = 202 ] || fail "DELETE: $code: $(cat "$tmp/del.json")"
wait $evs || fail "the event stream did not end with the job"
tail -n 3 "$tmp/events2.txt" | grep -q '^data: {"state":"cancelled"}$' ||
    fail "the stream's end: $(tail -c 300 "$tmp/events2.txt")"
code=$(api "/api/v1/jobs/$id" -X DELETE -o "$tmp/del.json" -w '%{http_code}')
[ "$code" = 409 ] || fail "DELETE again: $code, not 409"
code=$(api "/api/v1/jobs/999" -X DELETE -o "$tmp/del.json" -w '%{http_code}')
[ "$code" = 404 ] || fail "DELETE of an unknown job: $code, not 404"
job_has "$id" 'd.state === "cancelled" && d.message === "cancelled over the HTTP API" &&
    d.checkpoints.history.length > 0' || fail "job $id after the cancel"

# ---- weir run --http-port: its own API ----
"$weir" run "$plugin" --parallelism 2 --no-progress --quiet --http-port 0 -- \
    "$tmp/run-out" 40000 16 2 >"$tmp/run.out" 2>"$tmp/run.log" &
run=$!
pids="$pids $run"
wait_for 20 grep -q "console and API on http://" "$tmp/run.log" || fail "weir run printed no URL"
http=$(sed -n 's|.*console and API on http://\([^/]*\)/.*|\1|p' "$tmp/run.log")
wait_for 20 job_has 1 'd.state === "running" && d.operators && d.operators[0].records_out > 0' ||
    fail "weir run's API does not show its job"
wait $run || fail "weir run failed: $(cat "$tmp/run.log")"
echo "api.sh: ok"
