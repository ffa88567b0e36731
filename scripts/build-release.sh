#!/usr/bin/env bash
# Builds cordon's release binary as it is installed and benchmarked, and prints its path.
#
# On glibc hosts the binary is linked statically (static-pie: still position-independent, so
# ASLR holds). A dynamically linked cordon spends about half a millisecond of every cold start
# in the dynamic loader — four libraries, their symbol lookups, libgcc_s's CPU probe (each
# CPUID a trap in a VM) — which `cordon bench` measures at ~10 % of a sandbox's start. The
# target is named explicitly so that the static flag stays off build scripts and proc macros.
set -euo pipefail
cd "$(dirname "$0")/.."
host=$(rustc -vV | sed -n 's/^host: //p')
case "$host" in
  *-linux-gnu)
    RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
      cargo build --release --locked -p cordon --target "$host" >&2
    built="target/$host/release/cordon"
    ;;
  *)
    cargo build --release --locked -p cordon >&2
    built="target/release/cordon"
    ;;
esac
mkdir -p target/dist
cp "$built" target/dist/cordon
echo target/dist/cordon
