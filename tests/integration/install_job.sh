#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# install_job.sh BUILD_DIR SOURCE_DIR C_COMPILER
#
# Install a built weir into a temporary prefix, then build a job out of tree
# against it twice - with the CMake package (find_package + weir_add_job)
# and with pkg-config - and run both with the installed weir command; with
# the package, also a host program of the user's own (weir_link_host). The
# compiler is weir's own: the ABI gate refuses a plugin from another
# compiler family or with other sanitizer instrumentation.
set -eu
build=$1
src=$2
cc=$3
tmp=$(mktemp -d /tmp/weir-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log"
test -x "$prefix/bin/weir"
test -f "$prefix/include/weir/job.h"
test -f "$prefix/include/weir/abi.h"
pc=$(find "$prefix" -name weir.pc)
test -n "$pc"
test -n "$(find "$prefix" -name weirConfig.cmake)"
test -n "$(find "$prefix" -name libweir.a)"

# 1. The CMake package.
cmake -S "$src/tests/integration/outoftree" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$tmp/configure.log" 2>&1 ||
    { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/cmake" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
out=$("$prefix/bin/weir" run "$tmp/cmake/ootjob.so" --quiet 250)
test "$out" = "ootjob 250" || { echo "cmake-built job printed: $out"; exit 1; }
"$prefix/bin/weir" lint "$tmp/cmake/ootjob.so" | grep -q '^ok: job ootjob 0.1'
# ... and a host of the user's own (weir_link_host) loading it.
out=$("$tmp/cmake/oothost" "$tmp/cmake/ootjob.so" 42)
test "$out" = "ootjob 42" || { echo "oothost printed: $out"; exit 1; }

# 2. pkg-config: cflags only (a plugin does not link libweir).
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
# shellcheck disable=SC2046 # word splitting of the flags is wanted
"$cc" -shared -fvisibility=hidden $(pkg-config --cflags weir) -o "$tmp/pc.so" \
      "$src/tests/integration/outoftree/ootjob.c"
out=$("$prefix/bin/weir" run "$tmp/pc.so" --quiet 7)
test "$out" = "ootjob 7" || { echo "pkg-config-built job printed: $out"; exit 1; }

# 3. A plugin from another toolchain is refused, naming it: for an
#    instrumented weir a plain build; for a plain one, the other compiler
#    family (skipped when there is none).
other=
if "$prefix/bin/weir" version | grep -q 'toolchain .*/none'; then
    case $("$cc" --version) in
    *clang*) command -v gcc >/dev/null && other=gcc ;;
    *) command -v clang >/dev/null && other=clang ;;
    esac
else
    other=$cc
fi
if [ -z "$other" ]; then
    echo "install_job: ok (no second compiler for the toolchain check)"
    exit 0
fi
"$other" -shared -fPIC -fvisibility=hidden -I"$prefix/include" -o "$tmp/other.so" \
         "$src/tests/integration/outoftree/ootjob.c"
set +e
"$prefix/bin/weir" run "$tmp/other.so" 2>"$tmp/err"
rc=$?
set -e
test $rc -eq 2 || { echo "mismatched toolchain: exit $rc"; cat "$tmp/err"; exit 1; }
grep -q 'toolchain differs' "$tmp/err" || { cat "$tmp/err"; exit 1; }
echo "install_job: ok"
