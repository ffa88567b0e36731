"""A node lost (its raylet killed, and with it its cordon): its sandboxes answer
`sandbox_lost` (the E2B SDK's NotFoundException) within the stated bound, a call in flight to
it fails instead of hanging, it drops out of listings, and new creates land on the others.
Runs last: it leaves the cluster a node short."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from conftest import ClusterUnderTest, node_of

# The node actor's missed reports (3 s; Ray's own health check, 1 s x 5 here, comes later),
# plus the router's membership period (0.5 s).
LOSS_BOUND = 5.0


def test_a_lost_nodes_sandboxes_say_sandbox_lost_and_creates_avoid_it(cluster: ClusterUnderTest) -> None:
    from e2b import NotFoundException, Sandbox

    worker = cluster.workers[-1]  # type: ignore[attr-defined]
    doomed = "n" + worker.node_id[:12]
    assert doomed in {n["node"] for n in cluster.status()}
    on_doomed, others, also_lost = None, [], []
    for _ in range(24):
        s = Sandbox.create(timeout=120)
        if node_of(s.sandbox_id) != doomed:
            others.append(s)
        elif on_doomed is None:
            on_doomed = s
        else:
            also_lost.append(s.sandbox_id)
        if on_doomed is not None and len(others) >= 2:
            break
    assert on_doomed is not None, f"no sandbox landed on {doomed}"
    lost_id = on_doomed.sandbox_id

    # A call in flight when the node goes.
    inflight: dict = {}

    def long_call() -> None:
        t = time.time()
        try:
            on_doomed.commands.run("sleep 60", timeout=90)
            inflight["result"] = "returned"
        except Exception as e:  # noqa: BLE001 - any error will do, as long as it comes
            inflight["result"] = repr(e)
        inflight["took"] = time.time() - t

    th = threading.Thread(target=long_call, daemon=True)
    th.start()
    time.sleep(1.0)
    t0 = time.time()
    cluster.ray.remove_node(worker, allow_graceful=False)  # type: ignore[attr-defined]

    th.join(LOSS_BOUND + 5)
    assert not th.is_alive(), "a call in flight to the lost node hung"
    assert inflight["result"] != "returned"

    # Through the E2B SDK: the exception it raises for a sandbox that is gone.
    got = None
    while time.time() - t0 < LOSS_BOUND + 5:
        call_t = time.time()
        try:
            on_doomed.commands.run("true")
        except NotFoundException as e:
            got = e
            break
        except Exception:  # noqa: BLE001 - before membership knows, the node may fail otherwise
            pass
        assert time.time() - call_t < 5, "a call to the lost node took too long"
        time.sleep(0.2)
    assert got is not None, "the lost sandbox never said it was gone"
    assert time.time() - t0 < LOSS_BOUND + 1, time.time() - t0
    with pytest.raises(NotFoundException):
        Sandbox.connect(lost_id)

    # The reason, said in each door's own shape.
    h = {"Authorization": f"Bearer {cluster.api_key}"}
    r = httpx.get(cluster.front.url + "/v1/sandboxes/" + lost_id, headers=h)
    assert r.status_code == 404 and r.json()["error"]["code"] == "sandbox_lost", r.text
    r = httpx.get(cluster.front.url + "/sandboxes/" + lost_id, headers={"X-API-KEY": cluster.api_key})
    assert r.status_code == 404 and "sandbox_lost" in r.json()["message"], r.text

    ids = {s["id"] for s in httpx.get(cluster.front.url + "/v1/sandboxes",
                                      headers={"Authorization": f"Bearer {cluster.api_key}"}).json()["sandboxes"]}
    assert lost_id not in ids and not ids & set(also_lost)
    assert {s.sandbox_id for s in others} <= ids

    fresh = [Sandbox.create(timeout=60) for _ in range(6)]
    try:
        assert all(node_of(s.sandbox_id) != doomed for s in fresh)
        assert fresh[0].commands.run("echo alive").stdout.strip() == "alive"
    finally:
        for s in fresh + others:
            s.kill()
        # The tests after this one count alive nodes: Ray's own verdict on the removed node
        # (its health check, later than cordon's) must be in before they start.
        cluster.ray.wait_for_nodes(timeout=60)  # type: ignore[attr-defined]
