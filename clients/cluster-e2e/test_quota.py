"""A key's sandbox quota is the cluster's, not each node's: under 50 concurrent creates spread
over two routers (the native API through one, the published E2B SDK through the other), exactly
the quota's worth succeed, the rest are refused the way each door refuses a full quota, and
the slots come back once the sandboxes are killed."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from conftest import LEASE, ClusterUnderTest, node_of, start_front

QUOTA = 5
CREATES = 50
# Node actors report every 0.5 s; a killed sandbox leaves its key's count with the next report.
FREED_WITHIN = 3.0


def _new_key(c: ClusterUnderTest, max_sandboxes: int) -> str:
    made = subprocess.run(
        [str(c.cordon), "cluster", "keys", "create", "--name", "quota", "--max-sandboxes", str(max_sandboxes),
         "--ray", c.address, "--python", sys.executable], capture_output=True, text=True, timeout=60, check=True,
    )
    secret = made.stdout.strip()
    # Listings ask every node: 200 once every node has the key.
    deadline = time.time() + 10
    while httpx.get(c.front.url + "/v1/sandboxes", headers={"Authorization": f"Bearer {secret}"}).status_code != 200:
        assert time.time() < deadline, "the new key did not reach every node"
        time.sleep(0.1)
    return secret


def _wait_router(url: str) -> None:
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            r = httpx.get(url + "/healthz")
            if r.status_code == 200 and r.json()["nodes_alive"] == 3:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"router {url} never saw the cluster")


def test_a_keys_quota_holds_across_the_cluster_under_concurrent_creates_on_two_routers(
    cluster: ClusterUnderTest,
) -> None:
    from e2b import RateLimitException, Sandbox

    secret = _new_key(cluster, QUOTA)
    second, _ = start_front(["router", "--ray", cluster.address, "--listen", "127.0.0.1:0"], want_key=False)
    try:
        _wait_router(second.url)

        def native(_: int) -> tuple:
            r = httpx.post(cluster.front.url + "/v1/sandboxes", json={"ttl": "2m"},
                           headers={"Authorization": f"Bearer {secret}"}, timeout=60)
            if r.status_code in (200, 201):
                return ("ok", r.json()["id"])
            assert r.status_code == 429 and r.json()["error"]["code"] == "quota_exceeded", r.text
            return ("refused", None)

        def e2b(_: int) -> tuple:
            try:
                return ("ok", Sandbox.create(api_url=second.url, api_key=secret, timeout=120).sandbox_id)
            except RateLimitException:
                return ("refused", None)

        with ThreadPoolExecutor(CREATES) as pool:
            futures = [pool.submit(native if i % 2 else e2b, i) for i in range(CREATES)]
            results = [f.result() for f in futures]
        made = [sid for what, sid in results if what == "ok"]
        assert len(made) == QUOTA, results
        assert sum(1 for what, _ in results if what == "refused") == CREATES - QUOTA
        listed = httpx.get(second.url + "/v1/sandboxes", headers={"Authorization": f"Bearer {secret}"}).json()
        assert len(listed["sandboxes"] if isinstance(listed, dict) else listed) == QUOTA, listed
        assert len({node_of(s) for s in made}) >= 1

        for sid in made:
            r = httpx.delete(f"{cluster.front.url}/v1/sandboxes/{sid}", headers={"Authorization": f"Bearer {secret}"})
            assert r.status_code in (200, 204), r.text
        t0 = time.time()
        again = []
        while len(again) < QUOTA:
            r = httpx.post(second.url + "/v1/sandboxes", json={"ttl": "1m"},
                           headers={"Authorization": f"Bearer {secret}"}, timeout=60)
            if r.status_code in (200, 201):
                again.append(r.json()["id"])
                continue
            assert r.status_code == 429, r.text
            assert time.time() - t0 < FREED_WITHIN, f"quota not freed within {FREED_WITHIN}s: {len(again)}"
            time.sleep(0.1)
        for sid in again:
            httpx.delete(f"{cluster.front.url}/v1/sandboxes/{sid}", headers={"Authorization": f"Bearer {secret}"})
    finally:
        second.stop()


def test_slots_taken_by_a_router_that_died_mid_create_come_back_after_the_lease(cluster: ClusterUnderTest) -> None:
    secret = _new_key(cluster, 2)
    # A "router" that takes both of the key's slots from the control actor, then dies before
    # it can confirm or release them.
    taker = (
        "import sys, ray\n"
        "ray.init(address=sys.argv[1], namespace='cordon', logging_level='ERROR', log_to_driver=False)\n"
        "c = ray.get_actor('cordon-control', namespace='cordon')\n"
        "print([ray.get(c.reserve.remote(sys.argv[2]))['ok'] for _ in range(2)])\n"
    )
    key_hash = hashlib.sha256(secret.encode()).hexdigest()
    out = subprocess.run([sys.executable, "-c", taker, cluster.address, key_hash], capture_output=True,
                         text=True, timeout=60, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[True, True]", out.stdout
    t0 = time.time()
    auth = {"Authorization": f"Bearer {secret}"}
    r = httpx.post(cluster.front.url + "/v1/sandboxes", json={"ttl": "1m"}, headers=auth, timeout=60)
    assert r.status_code == 429, r.text
    while True:
        r = httpx.post(cluster.front.url + "/v1/sandboxes", json={"ttl": "1m"}, headers=auth, timeout=60)
        if r.status_code == 201:
            break
        assert r.status_code == 429, r.text
        assert time.time() - t0 < LEASE + 5, "the dead router's slots never came back"
        time.sleep(0.2)
    assert time.time() - t0 >= LEASE - 1.5, "a slot came back before its lease ran out"
    httpx.delete(f"{cluster.front.url}/v1/sandboxes/{r.json()['id']}", headers=auth)
