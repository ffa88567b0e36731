"""The router's cost, side by side in one run: the same call through the router and straight to
the node holding the sandbox (as a router would send it), p50 over N calls each, interleaved.
Not collected by the suite; run it with `scripts/cluster-e2e.sh bench_router.py -s`.
On one machine with two cores this measures the router's overhead, not scaling."""

from __future__ import annotations

import statistics
import time

import httpx
from conftest import ClusterUnderTest, node_of

N = 200


def test_bench_router_vs_node_p50(cluster: ClusterUnderTest) -> None:
    h = {"Authorization": f"Bearer {cluster.api_key}"}
    with httpx.Client(base_url=cluster.front.url, headers=h, timeout=30) as front:
        sid = front.post("/v1/sandboxes", json={"ttl": "5m"}).json()["id"]
        node = [n for n in cluster.status() if n["node"] == node_of(sid)][0]
        direct = httpx.Client(base_url=f"http://{node['addr']}", timeout=30,
                              headers={**h, "X-Cordon-Cluster-Secret": cluster.node_secret(node["node"])})
        calls = {
            "info": ("GET", f"/v1/sandboxes/{sid}", None),
            "exec true": ("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]}),
        }
        for name, (method, path, body) in calls.items():
            t = {"router": [], "node": []}
            for _ in range(N):
                for label, c in (("router", front), ("node", direct)):
                    t0 = time.perf_counter()
                    r = c.request(method, path, json=body)
                    t[label].append(time.perf_counter() - t0)
                    assert r.status_code == 200, r.text
                time.sleep(0.025)  # under the key's rate limit (100/s), shared by both paths
            pr, pn = statistics.median(t["router"]) * 1e3, statistics.median(t["node"]) * 1e3
            print(f"\n{name}: p50 through the router {pr:.2f} ms, straight to the node {pn:.2f} ms, "
                  f"router adds {pr - pn:+.2f} ms (N={N})")
        front.delete(f"/v1/sandboxes/{sid}")
        direct.close()
