#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Build the ctx_switch peer programs (Boost.Context fcontext and plain
# ucontext) into OUTDIR (default /tmp). Needs g++, gcc and
# libboost-context-dev (Debian). Usage: build.sh [OUTDIR]
set -eu
out=${1:-/tmp}
here=$(cd "$(dirname "$0")" && pwd)
peers=$(dirname "$here")
mkdir -p "$out"
${CXX:-g++} -std=c++17 -O2 -Wall -Wextra -o "$out/ctx_switch_fcontext" \
    "$peers/fcontext/ctx_switch_fcontext.cpp" -lboost_context
${CC:-gcc} -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Wpedantic -o "$out/ctx_switch_ucontext" \
    "$peers/ucontext/ctx_switch_ucontext.c"
echo "built $out/ctx_switch_fcontext $out/ctx_switch_ucontext"
