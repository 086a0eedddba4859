#!/usr/bin/env bash
# Build the libuv peers into OUTDIR: uv_timers, uv_http. Needs libuv1-dev.
set -euo pipefail
out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
cc=${CC:-cc}
flags=(-O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra)
read -r -a uv <<<"$(pkg-config --cflags --libs libuv)"
"$cc" "${flags[@]}" -o "$out/uv_timers" "$here/timers.c" "${uv[@]}"
"$cc" "${flags[@]}" -o "$out/uv_http" "$here/http.c" "${uv[@]}"
