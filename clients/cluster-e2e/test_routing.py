"""Through the router, the published E2B SDK and cordon's SDK do what they do against one
`cordon serve`, while their sandboxes land on different nodes of the cluster."""

from __future__ import annotations

import httpx
import pytest
from conftest import ClusterUnderTest, node_of


def test_e2b_sdk_creates_execs_moves_files_runs_code_and_kills_through_the_router(cluster: ClusterUnderTest) -> None:
    from e2b_code_interpreter import Sandbox

    sbx = Sandbox.create(timeout=120)
    try:
        r = sbx.commands.run("echo hello from $(cat /etc/hostname 2>/dev/null || echo sandbox)")
        assert r.exit_code == 0 and "hello from" in r.stdout
        sbx.files.write("/home/user/data.txt", "cluster bytes")
        assert sbx.files.read("/home/user/data.txt") == "cluster bytes"
        ex = sbx.run_code("x = 6\nx * 7")
        assert ex.text == "42"
        assert node_of(sbx.sandbox_id) in {n["node"] for n in cluster.status()}
    finally:
        sbx.kill()
    from e2b import NotFoundException

    with pytest.raises(NotFoundException):
        Sandbox.connect(sbx.sandbox_id).commands.run("true")


def test_cordon_sdk_works_through_the_router(cluster: ClusterUnderTest) -> None:
    from cordon_sdk import Sandbox

    with Sandbox.create(base_url=cluster.front.url, api_key=cluster.api_key, ttl="2m") as sb:
        sb.files.write("/workspace/hello.py", "print('hi from a node')")
        out = sb.commands.run(["python3", "/workspace/hello.py"])
        assert out.exit_code == 0 and out.stdout.strip() == "hi from a node"
        assert sb.code.run("6 * 7").text == "42"
        assert node_of(sb.id) in {n["node"] for n in cluster.status()}


def test_sandboxes_spread_over_the_nodes_and_the_listing_covers_them_all(cluster: ClusterUnderTest) -> None:
    from e2b import Sandbox

    boxes = [Sandbox.create(timeout=120, metadata={"spread": "yes"}) for _ in range(6)]
    try:
        nodes = {node_of(b.sandbox_id) for b in boxes}
        assert len(nodes) >= 2, f"six sandboxes all on {nodes}"
        pages = Sandbox.list()
        listed = {s.sandbox_id for s in pages.next_items()}
        while pages.has_next:
            listed |= {s.sandbox_id for s in pages.next_items()}
        r = httpx.get(cluster.front.url + "/v1/sandboxes", headers={"Authorization": f"Bearer {cluster.api_key}"})
        assert r.status_code == 200, r.text
        native = {s["id"] for s in r.json()["sandboxes"]}
        assert {b.sandbox_id for b in boxes} <= native
        assert {b.sandbox_id for b in boxes} <= listed
    finally:
        for b in boxes:
            b.kill()


def test_a_node_refuses_a_client_that_lacks_the_cluster_secret(cluster: ClusterUnderTest) -> None:
    nodes = cluster.status()
    for n in nodes:
        for path in ("/healthz", "/v1/sandboxes", "/sandboxes"):
            r = httpx.get(f"http://{n['addr']}{path}", headers={"Authorization": f"Bearer {cluster.api_key}",
                                                                 "X-API-KEY": cluster.api_key,
                                                                 "X-Cordon-Cluster-Secret": "guess"})
            assert r.status_code == 403, (path, r.status_code, r.text)
            assert "cluster" in r.text


def test_a_key_unknown_to_the_cluster_is_refused_on_every_node(cluster: ClusterUnderTest) -> None:
    r = httpx.post(cluster.front.url + "/v1/sandboxes", json={}, headers={"Authorization": "Bearer cdn_forged"})
    assert r.status_code == 401, r.text
