#!/usr/bin/env bash
# schemathesis against /openapi.json of a real `cordon serve` on loopback: every operation
# fuzzed (coverage, fuzzing and stateful phases, every check; exceptions and their reasons in
# scripts/schemathesis.toml), failing on any failure. Bounded: 25 examples per operation, two
# workers, ~2 minutes on 2 cores, killed after 10.
#   scripts/schemathesis.sh CORDON_BINARY SCHEMATHESIS_EXECUTABLE
# SCHEMATHESIS_SEED picks another seed (default: a fixed one, so CI runs the same cases).
set -euo pipefail
cordon=$(realpath "$1")
st=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
server=
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# A key that the rate limit does not slow down, with room for the sandboxes the run creates.
key=$("$cordon" keys create --name schemathesis --rps 100000 --max-sandboxes 20 --data-dir "$work/data")
# Pulls only from a loopback port with no registry behind it: the fuzzer's image references must
# never make the server connect anywhere else (and port 9 refuses at once).
# Made first: the loop below may read it before the background job has opened it.
: >"$work/serve.out"
"$cordon" serve --listen 127.0.0.1:0 --data-dir "$work/data" --pull-from 127.0.0.1:9 >"$work/serve.out" 2>"$work/serve.err" &
server=$!
url=
for _ in $(seq 100); do
  url=$(sed -n 's/^cordon serving on //p' "$work/serve.out")
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || { echo "cordon serve did not start: $(cat "$work/serve.err")" >&2; exit 1; }

# From the scratch directory: schemathesis keeps a cache of past failures (and hypothesis its
# examples) in the working directory, which would make runs depend on earlier ones.
cd "$work"
timeout 600 "$st" --config-file "$here/schemathesis.toml" run "$url/openapi.json" \
  --header "Authorization: Bearer $key" --header "X-API-KEY: $key" \
  --phases examples,coverage,fuzzing,stateful \
  --max-examples 25 --workers 2 --seed "${SCHEMATHESIS_SEED:-20261124}" \
  --request-timeout 60
