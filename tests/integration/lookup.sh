#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# lookup.sh WEIR_COMMAND LOOKUP_SERVICE LOOKUP_PLUGIN
#
# Start examples/lookup_service.c, run examples/lookup_job.c against it
# under `weir run` (unordered at parallelism 1 and 3, ordered at 2) and
# check that every one of 3000 ids is enriched exactly once with the
# service's answer; then once more against a port nobody listens on, where
# every id must come out "unknown" (the lookups fail; the job does not).
set -eu
weir=$1
service=$2
plugin=$3
tmp=$(mktemp -d /tmp/weir-lookup-XXXXXX)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM

"$service" "$tmp/port" &
pid=$!
i=0
while [ ! -s "$tmp/port" ]; do # until the service says where it listens
    i=$((i + 1))
    [ "$i" -lt 1000 ] || { echo "lookup_service did not start" >&2; exit 1; }
    kill -0 "$pid" || { echo "lookup_service died" >&2; exit 1; }
    sleep 0.01
done
base="http://127.0.0.1:$(cat "$tmp/port")"
n=3000
awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) print i, "user-" i, (i % 3 ? "silver" : "gold") }' |
    sort >"$tmp/want.txt"

for run in "1 unordered" "3 unordered" "2 ordered"; do
    set -- $run
    "$weir" run "$plugin" --parallelism "$1" -- "$base" "$n" "$2" >"$tmp/out.txt" 2>"$tmp/err.txt" ||
        { cat "$tmp/err.txt" >&2; exit 1; }
    sort "$tmp/out.txt" >"$tmp/got.txt"
    if ! cmp -s "$tmp/want.txt" "$tmp/got.txt"; then
        echo "lookup at parallelism $1 ($2): output differs" >&2
        diff "$tmp/want.txt" "$tmp/got.txt" | head -20 >&2
        exit 1
    fi
done

kill "$pid"
wait "$pid" 2>/dev/null || true
pid=
# The service is gone: its port refuses, every lookup ends "unknown".
"$weir" run "$plugin" --parallelism 2 -- "$base" 200 >"$tmp/out.txt" 2>"$tmp/err.txt" ||
    { cat "$tmp/err.txt" >&2; exit 1; }
test "$(grep -c ' unknown ' "$tmp/out.txt")" -eq 200
echo "lookup: $n ids enriched once each at parallelism 1, 3 (unordered) and 2 (ordered); a dead service gives 'unknown'"
