#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install the Debian packages weir's build, tests, demo and benchmarks need,
# then the npm packages of tests/npm (test peers the tests start themselves:
# s3rver; playwright-core, which drives chromium for the console's test),
# from its package-lock.json with `npm ci`.
# Idempotent: packages already installed are skipped (dpkg -s), and apt-get
# runs only when something is missing; npm runs only when tests/npm's
# packages are not installed. Needs root (or sudo) on a Debian host.
#
# Packages are installed with --no-install-recommends, so name here every
# package whose files the build, tests, examples or benchmarks use, even
# one that another package here merely recommends. scripts/check-deps (run
# by `make test`) finds the files they really use and fails, naming the
# file and its package, when that package is neither listed here nor a
# hard Depends of one that is. `scripts/deps.sh --list` prints the list.
set -euo pipefail

pkgs=(
  # build
  build-essential cmake pkg-config clang
  # I/O backend; JSON for the HTTP server (jansson); key hashing (xxHash);
  # SHA-256 of plugins and S3 signatures, later TLS (OpenSSL's libcrypto);
  # XML of S3 listings (expat)
  liburing-dev libjansson-dev libxxhash-dev libssl-dev libexpat1-dev
  # the S3 store's tests: node runs s3rver (tests/npm, installed below)
  nodejs
  # sanitizer runtimes for clang builds (ASan/UBSan/TSan, libFuzzer); llvm
  # gives the llvm-ar / llvm-ranlib CMake picks for them (only a Recommends
  # of clang)
  libclang-rt-14-dev llvm
  # demo / benchmarks: load generator and peers
  wrk golang-go libuv1-dev libboost-context-dev g++ librust-tokio-dev
  # HTTP tests and benchmarks: nginx (the client's peer; the echo module
  # gives slow and chunked responses), curl (a real client for the server),
  # libcurl's multi interface (the http_client peer)
  nginx-light libnginx-mod-http-echo curl libcurl4-openssl-dev
  # the Redis store's tests start a real server (tests/state/test_storage_redis.c)
  redis-server
  # the etcd election's tests start a real etcd (tests/cluster/test_etcd.c,
  # tests/integration/ha_etcd.sh); etcdctl is the tests' independent reader
  etcd-server etcd-client
  # TLS tests generate their certificates with the openssl command
  openssl
  # the web console's browser test (tests/integration/console.sh): headless
  # chromium, driven by playwright-core (tests/npm); fonts-liberation (only
  # a Recommends of chromium-common) gives its pages and screenshots
  # legible text
  chromium fonts-liberation
  # aarch64 context switch: cross compiler, its C library headers (only a
  # Recommends of the compiler) + qemu user emulation (scripts/test-aarch64.sh)
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
)
# The Tokio peer builds with cargo; a rustup toolchain on PATH is fine,
# otherwise take Debian's.
command -v cargo >/dev/null 2>&1 || pkgs+=(cargo)
# npm is Debian's own package, unless the nodejs installed (NodeSource's)
# carries it and says so.
dpkg-query -W -f='${Provides}\n' nodejs 2>/dev/null | grep -qw npm || pkgs+=(npm)

if [ "${1:-}" = --list ]; then
  printf '%s\n' "${pkgs[@]}"
  exit 0
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps.sh: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The npm test peers, exactly as tests/npm/package-lock.json pins them.
root=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -e "$root/tests/npm/node_modules/.bin/s3rver" ] ||
  [ ! -e "$root/tests/npm/node_modules/playwright-core/package.json" ]; then
  echo "deps.sh: installing tests/npm (npm ci)"
  npm ci --prefix "$root/tests/npm" --no-audit --no-fund >/dev/null
fi
