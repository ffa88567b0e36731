#!/usr/bin/env bash
# Builds cordon's release binary as it is installed and benchmarked, and prints its path.
#
# Profile `dist` (Cargo.toml): release plus whole-program optimisation.
#
# On glibc hosts the binary is linked statically (static-pie: still position-independent, so
# ASLR holds). A dynamically linked cordon spends about half a millisecond of every cold start
# in the dynamic loader — four libraries, their symbol lookups, libgcc_s's CPU probe (each
# CPUID a trap in a VM) — which `cordon bench` measures at ~10 % of a sandbox's start. The
# target is named explicitly so that the static flag stays off build scripts and proc macros.
# Where the linker can pack relative relocations (DT_RELR: binutils 2.38, glibc 2.36), the
# binary's 400 KB relocation table shrinks to ~2 KB, which every start no longer reads.
set -euo pipefail
cd "$(dirname "$0")/.."
host=$(rustc -vV | sed -n 's/^host: //p')
case "$host" in
  *-linux-gnu)
    flags="-C target-feature=+crt-static"
    probe=$(mktemp -d)
    if echo 'int main(void) { return 0; }' >"$probe/p.c" &&
      cc -static-pie -Wl,-z,pack-relative-relocs "$probe/p.c" -o "$probe/p" 2>/dev/null &&
      "$probe/p"; then
      flags="$flags -C link-arg=-Wl,-z,pack-relative-relocs"
    fi
    rm -rf "$probe"
    RUSTFLAGS="${RUSTFLAGS:-} $flags" \
      cargo build --profile dist --locked -p cordon --target "$host" >&2
    built="target/$host/dist/cordon"
    ;;
  *)
    cargo build --profile dist --locked -p cordon >&2
    built="target/dist/cordon"
    ;;
esac
mkdir -p target/install
cp "$built" target/install/cordon
echo target/install/cordon
