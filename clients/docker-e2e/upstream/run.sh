#!/usr/bin/env bash
# docker-py's own integration tests for the endpoints cordon's Docker door serves
# (tests/integration/api_container_test.py, api_exec_test.py and api_image_test.py's CommitTest
# of docker-py 5.0.3's sdist,
# Debian's python3-docker version) against a real `cordon serve --docker-socket`, on an image
# loaded through the door and tagged as the suite's TEST_IMG (alpine:3.10: here busybox with
# its applets). A ratchet: the tests that fail by design (refused powers, daemon internals,
# what cordon does not serve) are listed with their reason in known-failures.txt beside this
# script; a failure not listed there fails the run, and a listed test that now passes is
# reported (take it off the list). The README's Docker section has the last count.
#
# Needs: the sdist from PyPI (pip download), a Python with docker-py 7 and pytest (5.0.3 under
# Python 3.11 trips over distutils), busybox. Usage:
#   CORDON_BIN=target/debug/cordon PYTHON=/tmp/agvenv/bin/python clients/docker-e2e/upstream/run.sh [pytest args]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
bin=${CORDON_BIN:-$repo/target/debug/cordon}
py=${PYTHON:-python3}
work=$(mktemp -d)
server=""
trap '[ -z "$server" ] || kill "$server" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
# Debian's Python: its setuptools prepares the sdist's metadata without a build venv.
"${PIP_PYTHON:-/usr/bin/python3}" -m pip download -q --no-deps --no-binary :all: --no-build-isolation docker==5.0.3 -d "$work"
tar xzf "$work"/docker-5.0.3.tar.gz -C "$work"
mkdir "$work/up" "$work/sock"
# Outside the sdist's root: `import docker` must find the installed docker-py.
cp -r "$work/docker-5.0.3/tests" "$work/up/"
"$bin" serve --listen 127.0.0.1:0 --data-dir "$work/data" --docker-socket "$work/sock/docker.sock" \
  --docker-bind-root /tmp >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 100); do [ -S "$work/sock/docker.sock" ] && break; sleep 0.1; done
export DOCKER_HOST=unix://$work/sock/docker.sock
"$py" - <<PY
import subprocess, sys
sys.path.insert(0, "$repo/clients/docker-e2e")
import docker, test_docker
applets = tuple(a for a in subprocess.run(["busybox", "--list"], capture_output=True, text=True).stdout.split() if a != "busybox")
# alpine's directories that the tests use (an exec's WorkingDir /var/opt)
dirs = ("home", "mnt", "opt", "root", "srv", "var", "var/opt", "var/tmp")
docker.from_env().images.load(test_docker._docker_archive("alpine:3.10", applets, dirs=dirs))
PY
cd "$work/up"
UPSTREAM_RESULTS=$work/results.json PYTHONPATH=$here "$py" -m pytest -q -p no:cacheprovider -p upstream_plugin \
  tests/integration/api_container_test.py tests/integration/api_exec_test.py \
  tests/integration/api_image_test.py::CommitTest "$@" || true
"$py" - "$work/results.json" "$here/known-failures.txt" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))
known = {}
for line in open(sys.argv[2]):
    line = line.strip()
    if line and not line.startswith("#"):
        test, _, cause = line.partition(" ")
        known[test] = cause.strip()
counts = {"passed": 0, "failed": 0, "skipped": 0}
for outcome in results.values():
    counts[outcome] += 1
print(f"docker-py upstream: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
new = sorted(t for t, o in results.items() if o == "failed" and t not in known)
passing = sorted(t for t, o in results.items() if o == "passed" and t in known)
for t in new:
    print(f"NEW FAILURE {t}")
for t in passing:
    print(f"NOW PASSES (take it off known-failures.txt) {t}")
sys.exit(1 if new else 0)
PY
