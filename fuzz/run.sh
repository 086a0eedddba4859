#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# run.sh - run every libFuzzer target of a WEIR_FUZZ build for a bounded
# time each, starting from the seed corpus committed in fuzz/corpus/<name>/.
# New inputs the fuzzer finds go to BUILD_DIR/fuzz-corpus/<name>/ (kept
# between runs, never committed); a crashing input is written to
# BUILD_DIR/fuzz-artifacts/ and the script exits non-zero, so `make test`
# fails. Reproduce one with: BUILD_DIR/fuzz/fuzz_<name> <artifact file>.
#
# Usage: fuzz/run.sh BUILD_DIR [SECONDS_PER_TARGET]   (default 20)
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: fuzz/run.sh BUILD_DIR [SECONDS]}
secs=${2:-20}

found=0
status=0
for bin in "$build"/fuzz/fuzz_*; do
    [ -x "$bin" ] || continue
    found=$((found + 1))
    name=$(basename "$bin")
    short=${name#fuzz_}
    seeds="$root/fuzz/corpus/$short"
    work="$build/fuzz-corpus/$short"
    artifacts="$build/fuzz-artifacts"
    mkdir -p "$work" "$artifacts"
    [ -d "$seeds" ] || seeds=""
    echo "== $name for ${secs}s (seeds: ${seeds:-none})"
    # -timeout: one input running past 10 s is a hang, reported as a crash.
    # shellcheck disable=SC2086 # an empty $seeds must vanish
    if ! "$bin" -max_total_time="$secs" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$artifacts/$name-" "$work" $seeds; then
        echo "fuzz: FAIL: $name found a crash; inputs in $artifacts/"
        status=1
    fi
done
if [ "$found" -eq 0 ]; then
    echo "fuzz: FAIL: no fuzz targets in $build/fuzz (configure with -DWEIR_FUZZ=ON)"
    exit 1
fi
exit $status
