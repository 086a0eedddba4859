#!/usr/bin/env bash
# Build the plain-threads peer into OUTDIR: eventfd_pingpong.
set -euo pipefail
out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
${CC:-cc} -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -pthread \
  -o "$out/eventfd_pingpong" "$here/eventfd_pingpong.c"
