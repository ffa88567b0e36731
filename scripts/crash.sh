#!/usr/bin/env bash
# The crash suite's long form: `kill -9` of `cordon serve` (and of `cordon keys`) at N random
# points of each operation — sandbox create, exec, file upload, image pull and unpack, key
# creation and revocation, audit append — each followed by a restart and checks from outside
# (crates/cordon/tests/crash_points.rs). CI runs 21 points each; this runs more, root and
# then (when run as root) as the unprivileged user `cordontest`, and prints each table.
#   scripts/crash.sh [POINTS]     (default 100; CORDON_CRASH_SEED=N replays a sequence)
set -euo pipefail
cd "$(dirname "$0")/.."
points=${1:-100}
export CORDON_CRASH_POINTS=$points
bin=$(cargo test --locked -p cordon --test crash_points --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import sys, json
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])')
echo "== crash points: $points per operation, as $(id -un)"
"$bin" --test-threads=1 --nocapture 2>&1 | grep -E '^ *(point|[0-9]+ )|points tried|CORDON_CRASH_SEED|test result|panicked|leaks:'
if [ "$(id -u)" -eq 0 ] && id cordontest >/dev/null 2>&1; then
  d=$(dirname "$bin"); while [ "$d" != "/" ]; do chmod o+rx "$d" 2>/dev/null || true; d=$(dirname "$d"); done
  echo "== crash points: $points per operation, as cordontest (rootless)"
  (cd /tmp && runuser -u cordontest -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp TMPDIR=/tmp \
    CORDON_CRASH_POINTS="$points" ${CORDON_CRASH_SEED:+CORDON_CRASH_SEED=$CORDON_CRASH_SEED} \
    "$bin" --test-threads=1 --nocapture 2>&1) | grep -E '^ *(point|[0-9]+ )|points tried|CORDON_CRASH_SEED|test result|panicked|leaks:'
fi
