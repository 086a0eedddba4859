#!/usr/bin/env bash
# Build the Tokio peer into OUTDIR/tokioperf, offline, against Debian's
# vendored crates in /usr/share/cargo/registry (librust-tokio-dev). The crate
# is copied to OUTDIR/src and built there (cargo reads .cargo/config.toml from
# the directory it runs in, and writes Cargo.lock next to Cargo.toml), with
# CARGO_HOME and the target dir under OUTDIR: nothing lands in the source tree.
set -euo pipefail
out=${1:?usage: build.sh OUTDIR}
out=$(mkdir -p "$out" && cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
if ! ls -d /usr/share/cargo/registry/tokio-1.* >/dev/null 2>&1; then
  echo "tokio peer: /usr/share/cargo/registry has no tokio (apt-get install librust-tokio-dev)" >&2
  exit 1
fi
mkdir -p "$out/src"
cp -R "$here/Cargo.toml" "$here/src" "$here/.cargo" "$out/src/"
cd "$out/src"
CARGO_HOME="$out/cargo-home" CARGO_TARGET_DIR="$out/target" \
  cargo build --release --offline --quiet
# copy then rename, so a tokioperf still running keeps its old file
cp "$out/target/release/tokioperf" "$out/tokioperf.new"
mv -f "$out/tokioperf.new" "$out/tokioperf"
