"""`SandboxPool.map` over the cluster: a few hundred short Python programs, one node removed
midway; every result is there, in input order, each exactly once. Runs after the node-loss test
(which leaves the cluster a node short): it adds a node first, and removes that one."""

from __future__ import annotations

import threading
import time

from conftest import ClusterUnderTest, node_of

ITEMS = 300


def test_pool_map_survives_a_node_removed_midway_with_every_result_in_order_once(cluster: ClusterUnderTest) -> None:
    from cordon_sdk.ray import SandboxPool

    # Ray has settled on every node added and removed before (see the node-loss test).
    cluster.ray.wait_for_nodes(timeout=60)  # type: ignore[attr-defined]
    alive = sum(1 for n in cluster.status() if n["alive"])
    extra = cluster.ray.add_node(num_cpus=1, object_store_memory=80 << 20)  # type: ignore[attr-defined]
    cluster.ray.wait_for_nodes(timeout=60)  # type: ignore[attr-defined]
    cluster.wait_nodes(alive + 1)
    doomed = "n" + extra.node_id[:12]
    # The router sees the new node once its health counts it.
    import httpx

    deadline = time.time() + 20
    while httpx.get(cluster.front.url + "/healthz").json()["nodes_alive"] != alive + 1:
        assert time.time() < deadline
        time.sleep(0.2)

    pool = SandboxPool(per_node=2, size=2 * (alive + 1), base_url=cluster.front.url, api_key=cluster.api_key,
                       ttl="5m", progress=True)
    # Each program prints its own number and a per-run token; a duplicate would show twice.
    programs = [f"print({i} * {i})" for i in range(ITEMS)]
    out: dict = {}
    seen_on_doomed: list = []

    def run() -> None:
        out["results"] = pool.map(lambda sb, code: sb.commands.run(["python3", "-c", code]).stdout.strip(), programs)

    t = threading.Thread(target=run, daemon=True)
    t0 = time.time()
    t.start()
    while pool.stats["completed"] < ITEMS // 3:
        assert t.is_alive() or "results" in out
        time.sleep(0.05)
    seen_on_doomed = [s for s in pool.sandbox_ids() if node_of(s) == doomed]
    cluster.ray.remove_node(extra, allow_graceful=False)  # type: ignore[attr-defined]
    t.join(60)
    assert not t.is_alive(), f"map hung: {pool.stats}"
    results = out["results"]
    assert results == [str(i * i) for i in range(ITEMS)]
    assert seen_on_doomed, "no pool sandbox was on the removed node"
    assert pool.stats["retried"] >= 1, pool.stats
    assert pool.stats["completed"] == ITEMS
    assert pool.sandbox_ids() == []
    print(f"{ITEMS} items in {time.time() - t0:.1f}s, {pool.stats}")


def test_pool_imap_unordered_with_fresh_sandboxes_gives_each_item_its_own(cluster: ClusterUnderTest) -> None:
    from cordon_sdk.ray import SandboxPool

    pool = SandboxPool(size=3, fresh=True, base_url=cluster.front.url, api_key=cluster.api_key, progress=False)
    got = sorted(pool.imap_unordered(lambda sb, i: (i, sb.id), range(12)))
    assert [i for i, _ in got] == list(range(12))
    assert len({sid for _, sid in got}) == 12, got
    assert pool.sandbox_ids() == []
