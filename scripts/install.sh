#!/usr/bin/env bash
# Installs what cordon needs on a Debian machine, builds it, and runs one real sandboxed program.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v bwrap >/dev/null || need_apt+=(bubblewrap)       # only for `cordon bench`
[ -x /usr/bin/python3 ] || need_apt+=(python3)
command -v node >/dev/null || need_apt+=(nodejs)
command -v gcc >/dev/null || need_apt+=(gcc libc6-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi
if ! command -v cargo >/dev/null; then
  echo "cordon needs a Rust toolchain (1.85+): install it with rustup, then run this again." >&2
  exit 1
fi
bin=$(./scripts/build-release.sh)
install -d "${CORDON_BIN_DIR:-$HOME/.local/bin}"
install -m 0755 "$bin" "${CORDON_BIN_DIR:-$HOME/.local/bin}/cordon"

echo "== cordon check"
"$bin" check
echo "== a sandboxed run (default profile: no network, read-only system, 512M, 30s)"
"$bin" run -- python3 -c 'import os, socket; print("hello from", socket.gethostname(), "as uid", os.getuid(), "seeing", sorted(os.listdir("/")))'
