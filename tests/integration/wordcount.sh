#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# wordcount.sh WEIR_COMMAND WORDCOUNT_PLUGIN
#
# Run examples/wordcount_job.c under `weir run` on a file of 20000
# distinct words (word i appearing i % 7 + 1 times, across lines and in
# mixed case), at parallelism 1 and 3, and compare what it prints with
# sort | uniq -c: exactly one "<word> <count>" line per word.
set -eu
weir=$1
plugin=$2
tmp=$(mktemp -d /tmp/weir-wordcount-XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM

awk 'BEGIN {
    for (r = 0; r < 7; r++) {
        line = ""
        for (i = 0; i < 20000; i++) {
            if (i % 7 < r)
                continue
            w = (i % 2 ? "Word" : "word") i
            line = line " " w
            if (length(line) > 200) { print line; line = "" }
        }
        if (line != "") print line
    }
}' >"$tmp/in.txt"
tr 'A-Z' 'a-z' <"$tmp/in.txt" | tr -s ' ' '\n' | grep -v '^$' | sort | uniq -c |
    awk '{ print $2, $1 }' >"$tmp/want.txt"
test "$(wc -l <"$tmp/want.txt")" -eq 20000

for par in 1 3; do
    "$weir" run "$plugin" --parallelism "$par" "$tmp/in.txt" >"$tmp/out.txt" 2>"$tmp/err.txt" ||
        { cat "$tmp/err.txt" >&2; exit 1; }
    sort "$tmp/out.txt" >"$tmp/got.txt"
    if ! cmp -s "$tmp/want.txt" "$tmp/got.txt"; then
        echo "wordcount at parallelism $par: output differs from sort | uniq -c" >&2
        diff "$tmp/want.txt" "$tmp/got.txt" | head -20 >&2
        exit 1
    fi
done
echo "wordcount: 20000 words counted right at parallelism 1 and 3"
