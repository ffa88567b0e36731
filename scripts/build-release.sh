#!/usr/bin/env bash
# Builds cordon's release binaries as they are installed and benchmarked, into target/install,
# and prints cordon's path (cordon-wasm goes beside it: cordon looks for it there).
#
# cordon: profile `dist` (Cargo.toml), release plus whole-program optimisation.
# cordon-bench (the benchmarks, which drive cordon from outside) and cordon-wasm (the
# WebAssembly runtime: wasmtime + Cranelift): profile `wasm-dist`, plain
# release settings — under fat LTO it alone took ~43 min from scratch on 2 cores.
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
    RUSTFLAGS="${RUSTFLAGS:-} $flags" \
      cargo build --profile wasm-dist --locked -p cordon-wasm -p cordon-bench --bin cordon-wasm --bin cordon-bench --target "$host" >&2
    built="target/$host/dist/cordon"
    built_wasm="target/$host/wasm-dist/cordon-wasm"
    built_bench="target/$host/wasm-dist/cordon-bench"
    ;;
  *)
    cargo build --profile dist --locked -p cordon >&2
    cargo build --profile wasm-dist --locked -p cordon-wasm -p cordon-bench --bin cordon-wasm --bin cordon-bench >&2
    built="target/dist/cordon"
    built_wasm="target/wasm-dist/cordon-wasm"
    built_bench="target/wasm-dist/cordon-bench"
    ;;
esac
mkdir -p target/install
cp "$built" target/install/cordon
cp "$built_wasm" target/install/cordon-wasm
cp "$built_bench" target/install/cordon-bench
echo target/install/cordon
