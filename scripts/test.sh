#!/usr/bin/env bash
# Installs test dependencies and runs every test: unit, integration (as root and as an
# unprivileged user), lints, and a short benchmark run. Needs root for apt and useradd.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

if [ "$(id -u)" -eq 0 ]; then
  pkgs=()
  command -v bwrap >/dev/null || pkgs+=(bubblewrap)
  command -v node >/dev/null || pkgs+=(nodejs)
  command -v curl >/dev/null || pkgs+=(curl)
  if [ ${#pkgs[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null
  fi
fi

echo "== fmt and clippy"
cargo fmt --all -- --check
cargo clippy --locked --workspace --all-targets -- -D warnings

echo "== tests (as $(id -un))"
cargo build --locked --workspace --all-targets
cargo test --locked --workspace -- --test-threads=4

if [ "$(id -u)" -eq 0 ]; then
  # The same integration suites, run by an unprivileged account (rootless mode).
  user=cordontest
  id "$user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
  echo "== integration tests as unprivileged user $user"
  bins=$(cargo test --locked -p cordon --tests --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import sys, json
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])')
  # The binaries and the cordon executable must be reachable by that user.
  chmod o+rx "$PWD" "$PWD/target" "$PWD/target/debug" "$PWD/target/debug/deps" 2>/dev/null || true
  d="$PWD"; while [ "$d" != "/" ]; do chmod o+x "$d" 2>/dev/null || true; d=$(dirname "$d"); done
  for b in $bins; do
    echo "-- $(basename "$b")"
    (cd /tmp && runuser -u "$user" -- env -i PATH=/usr/bin:/bin HOME=/tmp TMPDIR=/tmp "$b" --test-threads=4)
  done
fi

echo "== benchmark (short run; see README for the full one)"
cargo build --release --locked -p cordon
./target/release/cordon bench --iterations 10
