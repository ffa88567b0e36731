"""Keys are the cluster's: created once, accepted on every node, revoked everywhere within the
stated bound. A drained node takes no new sandboxes; its sandboxes run on."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import httpx
from conftest import ClusterUnderTest, node_of

# Node actors report every 0.5 s and sync keys when the cluster's key version moved.
REVOCATION_BOUND = 3.0


def _cluster(c: ClusterUnderTest, *args: str) -> str:
    return subprocess.run(
        [str(c.cordon), "cluster", *args, "--ray", c.address, "--python", sys.executable],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout


def _accepted_on(c: ClusterUnderTest, secret: str) -> dict:
    """Whether each node accepts the key, asked straight (as its router would ask it)."""
    out = {}
    for n in c.status():
        if n["alive"]:
            r = httpx.get(f"http://{n['addr']}/v1/sandboxes", timeout=10,
                          headers={"Authorization": f"Bearer {secret}",
                                   "X-Cordon-Cluster-Secret": c.node_secret(n["node"])})
            assert r.status_code in (200, 401), r.text
            out[n["node"]] = r.status_code == 200
    return out


def test_a_cluster_key_works_on_every_node_and_its_revocation_reaches_them_all(cluster: ClusterUnderTest) -> None:
    made = subprocess.run(
        [str(cluster.cordon), "cluster", "keys", "create", "--name", "temp", "--ray", cluster.address,
         "--python", sys.executable], capture_output=True, text=True, timeout=60, check=True,
    )
    secret = made.stdout.strip()
    assert secret.startswith("cdn_")
    key_id = re.search(r"created key (key_[0-9a-f]+)", made.stderr).group(1)  # type: ignore[union-attr]
    t0 = time.time()
    while not all(_accepted_on(cluster, secret).values()):
        assert time.time() - t0 < REVOCATION_BOUND, _accepted_on(cluster, secret)
        time.sleep(0.1)
    r = httpx.post(cluster.front.url + "/v1/sandboxes", json={"ttl": "1m"},
                   headers={"Authorization": f"Bearer {secret}"}, timeout=30)
    assert r.status_code in (200, 201), r.text
    httpx.delete(f"{cluster.front.url}/v1/sandboxes/{r.json()['id']}", headers={"Authorization": f"Bearer {secret}"})

    _cluster(cluster, "keys", "revoke", key_id)
    t0 = time.time()
    while any(_accepted_on(cluster, secret).values()):
        assert time.time() - t0 < REVOCATION_BOUND, _accepted_on(cluster, secret)
        time.sleep(0.1)
    r = httpx.get(cluster.front.url + "/v1/sandboxes", headers={"Authorization": f"Bearer {secret}"})
    assert r.status_code == 401


def test_a_drained_node_takes_no_new_sandbox_and_its_sandboxes_run_on(cluster: ClusterUnderTest) -> None:
    from e2b import Sandbox

    # A sandbox on the node about to be drained.
    nodes = [n["node"] for n in cluster.status() if n["alive"]]
    target = nodes[-1]
    held = []
    mine = None
    for _ in range(20):
        s = Sandbox.create(timeout=120)
        if node_of(s.sandbox_id) == target:
            mine = s
            break
        held.append(s)
    assert mine is not None, f"no sandbox landed on {target} in 20 creates"
    try:
        _cluster(cluster, "drain", target)
        time.sleep(1.5)  # the router's view is at most a membership period (0.5 s) old
        for _ in range(8):
            s = Sandbox.create(timeout=60)
            held.append(s)
            assert node_of(s.sandbox_id) != target
        assert mine.commands.run("echo still here").stdout.strip() == "still here"
        assert [n for n in cluster.status() if n["node"] == target][0]["draining"]
    finally:
        _cluster(cluster, "drain", target, "--undo")
        for s in held + [mine]:
            s.kill()
