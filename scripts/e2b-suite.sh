#!/usr/bin/env bash
# E2B's own Python test suites, unmodified (../shared/e2b-suite: sdk-tests for e2b==2.45.1,
# ci-tests for e2b-code-interpreter==2.9.1), against a real `cordon serve`: a ratchet.
#   scripts/e2b-suite.sh CORDON_BINARY [SUITE...]      (SUITE: sdk-tests, ci-tests; default both)
# Each suite runs from a scratch copy of its folder, against a server of its own (fresh data dir,
# fresh API key), and both the server and pytest run inside a network namespace that holds only
# loopback: nothing a test or a sandbox does can reach another address. Tests listed in
# excluded.txt (beside the suites) are deselected. Prints pass/fail counts per suite, writes a
# JUnit XML and a summary to $E2B_SUITE_OUT (default: a scratch dir, printed), and exits non-zero
# when a test fails that clients/e2b-e2e/suite-known-failures.txt does not list (that list may
# only shrink: listed tests that now pass are reported, to be taken off it).
# Needs root (unshare -n -m). Environment:
#   E2B_SUITE_DIR   the suites (default: shared/e2b-suite beside the repository)
#   E2B_SUITE_VENV  a venv with clients/e2b-e2e/suite-requirements.txt (default: a new one)
#   E2B_SUITE_JOBS  pytest-xdist workers (default 2)
#   E2B_SUITE_ARGS  pytest arguments instead of `tests` (split on spaces: paths, node ids, -x, …);
#                   the ratchet then judges only what ran
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

# The images E2B's Template SDK and the suite's template tests start from: `e2bdev/base`
# (`from_base_image()`, and the `base` template, which is the host's system directories here)
# and `ubuntu:22.04`. Neither can be pulled offline, so both are one busybox root made here
# (busybox from scripts/test.sh's apt list): the commands those tests run, a /bin/bash that
# hands over to busybox's sh, and a user database with root and user.
base_images() {
  local data=$1 ctx t
  ctx=$(mktemp -d)
  mkdir -p "$ctx/rootfs/bin" "$ctx/rootfs/etc" "$ctx/rootfs/root"
  cp "$(command -v busybox)" "$ctx/rootfs/bin/busybox"
  for t in $("$ctx/rootfs/bin/busybox" --list); do
    [ -e "$ctx/rootfs/bin/$t" ] || ln -s busybox "$ctx/rootfs/bin/$t"
  done
  [ -e "$ctx/rootfs/bin/bash" ] || printf '#!/bin/sh\nexec /bin/sh "$@"\n' >"$ctx/rootfs/bin/bash"
  chmod 755 "$ctx/rootfs/bin/bash"
  printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n' >"$ctx/rootfs/etc/passwd"
  printf 'root:x:0:\nuser:x:1000:\n' >"$ctx/rootfs/etc/group"
  echo rootfs >"$ctx/.dockerignore"
  echo 'FROM ./rootfs' >"$ctx/Dockerfile"
  "$CORDON" image build -t e2bdev/base:latest -t ubuntu:22.04 --data-dir "$data" "$ctx" >/dev/null 2>"$data.base-images.log" \
    || { cat "$data.base-images.log" >&2; exit 1; }
  rm -rf "$ctx"
}

if [ "${_E2B_SUITE_INNER:-}" = 1 ]; then
  # Inside the namespace: loopback up, one server, one pytest run.
  suite=$1 copy=$2 out=$3
  ip link set lo up
  data=$out/$suite.data
  key=$("$CORDON" keys create --name e2b-suite --rps 100000 --max-sandboxes 200 --data-dir "$data" | tail -1)
  base_images "$data"
  "$CORDON" serve --listen 127.0.0.1:0 --data-dir "$data" >"$out/$suite.serve.out" 2>"$out/$suite.serve.err" &
  server=$!
  trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
  url=
  for _ in $(seq 300); do
    # The background job makes the file: it may not exist yet (and `set -e` would end us).
    url=$(sed -n 's/^cordon serving on //p' "$out/$suite.serve.out" 2>/dev/null || true)
    [ -n "$url" ] && break
    sleep 0.1
  done
  [ -n "$url" ] || { echo "cordon serve did not start: $(cat "$out/$suite.serve.err")" >&2; exit 1; }
  # Sandboxes' ports (`get_host`): `<port>-<id>.localhost:<server port>`, over TLS signed by
  # the server's ports CA. Names under localhost resolve to loopback through a DNS server of
  # this namespace (this mount namespace's /etc/resolv.conf points at it); the CA is what
  # httpx trusts (SSL_CERT_FILE).
  printf 'nameserver 127.0.0.1\n' >"$out/$suite.resolv.conf"
  mount --bind "$out/$suite.resolv.conf" /etc/resolv.conf
  "$VENV/bin/python" "$here/clients/e2b-e2e/wildcard_dns.py" localhost 2>"$out/$suite.dns.err" &
  dns=$!
  trap 'kill "$server" "$dns" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
  ca=
  for _ in $(seq 50); do
    ca=$(sed -n 's/^sandbox ports: .*(TLS CA: \(.*\))$/\1/p' "$out/$suite.serve.out" 2>/dev/null || true)
    [ -n "$ca" ] && break
    sleep 0.1
  done
  [ -f "$ca" ] || { echo "cordon serve named no ports CA: $(cat "$out/$suite.serve.out")" >&2; exit 1; }
  deselect=()
  while read -r id _; do
    case "$id" in "$suite"/*) deselect+=(--deselect "${id#"$suite"/}") ;; esac
  done < <(grep -v '^#' "$E2B_SUITE_DIR/excluded.txt")
  # Tests that need no server and expect E2B_* unset: deselected here, run in a second pass.
  clean=()
  while read -r id _; do
    case "$id" in "$suite"/*) clean+=("${id#"$suite"/}"); deselect+=(--deselect "${id#"$suite"/}") ;; esac
  done < <(grep -v '^#' "$here/clients/e2b-e2e/suite-clean-env.txt")
  extra=()
  # The code-interpreter suite sets no per-test timeout of its own; a hung test must not hang
  # the run (the SDK suite's pytest.ini sets 30 s).
  [ "$suite" = ci-tests ] && extra+=(--timeout=120)
  cd "$copy"
  # shellcheck disable=SC2086 # E2B_SUITE_ARGS is split on purpose
  E2B_API_URL=$url E2B_SANDBOX_URL=$url E2B_VOLUME_API_URL=$url E2B_API_KEY=$key \
    E2B_VALIDATE_API_KEY=false E2B_TESTS_TEMPLATE=code-interpreter-v1 \
    SSL_CERT_FILE=$ca E2B_SUITE_REPORT=$out/$suite.json PYTHONPATH=$here/clients/e2b-e2e \
    "$VENV/bin/python" -m pytest -q -p no:cacheprovider -p suite_report -n "$JOBS" \
    --junitxml="$out/$suite.junit.xml" "${deselect[@]}" "${extra[@]}" ${E2B_SUITE_ARGS:-tests} \
    >"$out/$suite.pytest.log" 2>&1 || true
  if [ ${#clean[@]} -gt 0 ] && [ -z "${E2B_SUITE_ARGS:-}" ]; then
    env -u E2B_API_URL -u E2B_SANDBOX_URL -u E2B_VOLUME_API_URL -u E2B_API_KEY \
      -u E2B_VALIDATE_API_KEY -u E2B_DOMAIN -u E2B_DEBUG \
      E2B_SUITE_REPORT=$out/$suite.clean.json PYTHONPATH=$here/clients/e2b-e2e \
      "$VENV/bin/python" -m pytest -q -p no:cacheprovider -p suite_report "${clean[@]}" \
      >"$out/$suite.clean.log" 2>&1 || true
  fi
  exit 0
fi

[ "$(id -u)" -eq 0 ] || { echo "e2b-suite.sh needs root (unshare -n -m)" >&2; exit 2; }
export CORDON
CORDON=$(realpath "${1:?usage: scripts/e2b-suite.sh CORDON_BINARY [SUITE...]}")
shift
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(sdk-tests ci-tests)
if [ -z "${E2B_SUITE_DIR:-}" ]; then
  # shared/ lies beside the repository (CI's clone), or beside its worktrees' folder.
  for d in "$here/../shared/e2b-suite" "$here/../../shared/e2b-suite"; do
    [ -d "$d" ] && { E2B_SUITE_DIR=$d; break; }
  done
fi
export E2B_SUITE_DIR=${E2B_SUITE_DIR:?no ../shared/e2b-suite beside the repository: set E2B_SUITE_DIR}
E2B_SUITE_DIR=$(realpath "$E2B_SUITE_DIR")
export JOBS=${E2B_SUITE_JOBS:-2}
out=${E2B_SUITE_OUT:-$(mktemp -d)}
mkdir -p "$out"
out=$(realpath "$out")
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

export VENV=${E2B_SUITE_VENV:-}
if [ -z "$VENV" ]; then
  VENV=$scratch/venv
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$here/clients/e2b-e2e/suite-requirements.txt"
fi

for suite in "${suites[@]}"; do
  [ -d "$E2B_SUITE_DIR/$suite" ] || { echo "no suite $E2B_SUITE_DIR/$suite" >&2; exit 2; }
  cp -r "$E2B_SUITE_DIR/$suite" "$scratch/$suite"
  chmod -R u+w "$scratch/$suite"
  rm -f "$out/$suite.json" "$out/$suite.clean.json"
  start=$(date +%s)
  # A mount namespace too: /etc/resolv.conf is replaced inside it (see above).
  _E2B_SUITE_INNER=1 unshare -n -m -- "$0" "$suite" "$scratch/$suite" "$out"
  echo "$suite: $(($(date +%s) - start)) s wall" >"$out/$suite.time"
  [ -s "$out/$suite.json" ] || { echo "$suite: pytest wrote no results:" >&2; tail -30 "$out/$suite.pytest.log" >&2; exit 1; }
done

"$VENV/bin/python" - "$out" "$here/clients/e2b-e2e/suite-known-failures.txt" "${suites[@]}" <<'EOF'
import json, sys
out, known_path, suites = sys.argv[1], sys.argv[2], sys.argv[3:]
known = {}
for line in open(known_path):
    line = line.strip()
    if line and not line.startswith("#"):
        test, _, cause = line.partition(" ")
        known[test] = cause.strip()
new_failures, now_passing, summary = [], [], []
for suite in suites:
    results = json.load(open(f"{out}/{suite}.json"))
    try:
        # The second pass: tests that need no server, run with E2B_* unset.
        results.update(json.load(open(f"{out}/{suite}.clean.json")))
    except FileNotFoundError:
        pass
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for nodeid, outcome in sorted(results.items()):
        counts[outcome] += 1
        test = f"{suite}/{nodeid}"
        if outcome == "failed" and test not in known:
            new_failures.append(test)
        if outcome == "passed" and test in known:
            now_passing.append(test)
    wall = open(f"{out}/{suite}.time").read().strip()
    ran = counts["passed"] + counts["failed"]
    summary.append(f"{suite}: {counts['passed']} passed, {counts['failed']} failed, "
                   f"{counts['skipped']} skipped ({100 * counts['passed'] // max(ran, 1)} % of those run; {wall})")
with open(f"{out}/summary.txt", "w") as f:
    f.write("\n".join(summary) + "\n")
    f.write("".join(f"NEW FAILURE {t}\n" for t in new_failures))
    f.write("".join(f"NOW PASSES (take it off the known failures) {t}\n" for t in now_passing))
print(open(f"{out}/summary.txt").read(), end="")
print(f"details: {out} (<suite>.pytest.log, .junit.xml, .json)")
sys.exit(1 if new_failures else 0)
EOF
