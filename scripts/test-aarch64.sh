#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# test-aarch64.sh - build the fiber context-switch and stack tests for
# aarch64 with the cross compiler, statically, and run them under qemu user
# emulation. Proves src/rt/ctx_aarch64.S (and the ucontext fallback) on an
# x86-64 machine; a native aarch64 machine runs them through CMake instead.
#
# Needs the Debian packages gcc-aarch64-linux-gnu, libc6-dev-arm64-cross (only
# a Recommends of the compiler, so scripts/deps.sh names it) and qemu-user.
# Each build leaves its header dependencies (BIN.d) and the files the linker
# read (BIN.link) for scripts/check-deps. Skips, successfully, with a message
# when they are missing. Usage: scripts/test-aarch64.sh [BUILD_DIR]
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-/tmp/weir-aarch64}
cc=${AARCH64_CC:-aarch64-linux-gnu-gcc}
qemu=${QEMU_AARCH64:-qemu-aarch64}

for tool in "$cc" "$qemu"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "test-aarch64: SKIP: $tool not found" \
            "(apt-get install gcc-aarch64-linux-gnu qemu-user)"
        exit 0
    fi
done

mkdir -p "$out"
flags="-std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Wpedantic -Werror -fno-omit-frame-pointer
       -I$root/include -I$root/src -I$root/tests -static"
rt="$root/src/rt"
status=0
for ctx in asm ucontext; do
    if [ "$ctx" = asm ]; then
        defs="-DWEIR_CONTEXT_ASM=1"
        srcs="$rt/ctx_aarch64.S $rt/stack.c"
    else
        defs="-DWEIR_CONTEXT_UCONTEXT=1"
        srcs="$rt/ctx_ucontext.c $rt/stack.c"
    fi
    for t in test_ctx test_stack; do
        bin="$out/$t.$ctx"
        objs=""
        for src in "$root/tests/rt/$t.c" $srcs; do
            obj="$bin.$(basename "$src").o"
            # shellcheck disable=SC2086 # word splitting of the flag lists is intended
            "$cc" $flags $defs -c -MD -MF "$obj.d" "$src" -o "$obj"
            objs="$objs $obj"
        done
        # shellcheck disable=SC2086
        "$cc" $flags $objs -o "$bin" -lm -Wl,--trace >"$bin.link"
        echo "== $t ($ctx) under $qemu"
        if ! "$qemu" "$bin"; then
            echo "test-aarch64: FAIL: $t ($ctx)"
            status=1
        fi
    done
done
exit $status
