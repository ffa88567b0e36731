#!/usr/bin/env bash
# The cluster suite (clients/cluster-e2e): a three-node Ray cluster on this machine
# (ray.cluster_utils.Cluster), `cordon cluster up` on it, the published E2B SDK and cordon's SDK
# through the router. Ray's agents probe cloud metadata and DNS as they start, so everything
# runs inside a network namespace of its own that holds only loopback: no test traffic leaves
# this machine. Needs root (unshare --net) and a built cordon ($CORDON_BIN, default
# $CARGO_TARGET_DIR/debug/cordon or target/debug/cordon).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
export CORDON_BIN=${CORDON_BIN:-$target/debug/cordon}
venv=${CORDON_CLUSTER_VENV:-$target/cluster-e2e-venv}
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q -r "$root/clients/cluster-e2e/requirements.txt"
# The SDK from this tree (its `ray` package is what the nodes and the router run).
"$venv/bin/pip" install -q --no-deps -e "$root/clients/python"
cd "$root/clients/cluster-e2e"
exec unshare --net -- bash -c 'ip link set lo up && exec "$0" -m pytest -q -p no:cacheprovider "$@"' \
    "$venv/bin/python" "$@"
