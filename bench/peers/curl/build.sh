#!/usr/bin/env bash
# Build the libcurl peer into OUTDIR: curl_http_client. Needs libcurl4-openssl-dev.
set -euo pipefail
out=${1:?usage: build.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
cc=${CC:-cc}
flags=(-O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra)
read -r -a curl <<<"$(pkg-config --cflags --libs libcurl)"
"$cc" "${flags[@]}" -o "$out/curl_http_client" "$here/http_client.c" "${curl[@]}"
