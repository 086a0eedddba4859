#!/usr/bin/env bash
# Build the Go peer into OUTDIR/goperf with Debian's golang-go, standard
# library only, fully offline. GOCACHE and GOPATH live under OUTDIR.
set -euo pipefail
out=${1:?usage: build.sh OUTDIR}
out=$(mkdir -p "$out" && cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
GO111MODULE=on GOTOOLCHAIN=local GOPROXY=off GOFLAGS='' GOWORK=off \
  GOCACHE="$out/gocache" GOPATH="$out/gopath" \
  go build -trimpath -o "$out/goperf" .
