"""MCP over HTTP through the router, with the official MCP Python SDK: a session's id names the
node that holds it (and its sandbox), so every request of the session — through this router or
another replica — reaches that node, and the sandbox's state carries from call to call."""

from __future__ import annotations

import json
import time

import anyio
from conftest import ClusterUnderTest, node_of, start_front

CALL_TIMEOUT = 60


def _httpx():
    try:
        import httpx2 as httpx  # the HTTP library of mcp >= 2
    except ImportError:  # pragma: no cover - mcp 1.x
        import httpx
    return httpx


def _texts(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


def _answer(body: str) -> dict:
    """A JSON-RPC answer, sent as JSON or as one SSE event."""
    if body.lstrip().startswith("{"):
        return json.loads(body)
    data = [line[5:].strip() for line in body.splitlines() if line.startswith("data:")]
    return json.loads([d for d in data if d][-1])


def test_an_mcp_session_through_the_router_stays_on_its_node_even_through_another_router(
    cluster: ClusterUnderTest,
) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    httpx = _httpx()
    auth = {"Authorization": f"Bearer {cluster.api_key}"}
    nodes = {n["node"] for n in cluster.status() if n["alive"]}
    second, _ = start_front(["router", "--ray", cluster.address, "--listen", "127.0.0.1:0"], want_key=False)
    deadline = time.time() + 30
    while httpx.get(second.url + "/healthz").json().get("nodes_alive") != len(nodes):
        assert time.time() < deadline, "the second router never saw the cluster"
        time.sleep(0.2)
    seen: dict = {}

    async def on_response(resp) -> None:
        sid = resp.headers.get("mcp-session-id")
        if sid:
            seen["session"] = sid

    async def on_request(req) -> None:
        v = req.headers.get("mcp-protocol-version")
        if v:
            seen["version"] = v

    async def main() -> None:
        before = set(s["id"] for s in httpx.get(cluster.front.url + "/v1/sandboxes", headers=auth).json()["sandboxes"])
        async with httpx.AsyncClient(headers=auth, timeout=httpx.Timeout(30, read=120),
                                     event_hooks={"response": [on_response], "request": [on_request]}) as client:
            async with streamable_http_client(cluster.front.url + "/mcp", http_client=client) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    r = await session.call_tool("run_code", {"code": "x = 21"})
                    assert not getattr(r, "is_error", getattr(r, "isError", False)), _texts(r)
                    for _ in range(3):
                        r = await session.call_tool("run_code", {"code": "x * 2"})
                        assert "42" in _texts(r), _texts(r)
                    sid = seen["session"]
                    node, _, inner = sid.partition(".")
                    assert node in nodes and inner, sid
                    now = httpx.get(cluster.front.url + "/v1/sandboxes", headers=auth).json()["sandboxes"]
                    mine = [s["id"] for s in now if s["id"] not in before]
                    assert [node_of(s) for s in mine] == [node], (sid, mine)

                    # The same session through another router replica: same node, same state.
                    async with httpx.AsyncClient(timeout=30) as other:
                        resp = await other.post(
                            second.url + "/mcp",
                            headers={**auth, "mcp-session-id": sid, "mcp-protocol-version": seen["version"],
                                     "accept": "application/json, text/event-stream",
                                     "content-type": "application/json"},
                            content=json.dumps({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                                                "params": {"name": "run_code", "arguments": {"code": "x * 3"}}}),
                        )
                        assert resp.status_code == 200, resp.text
                        assert "63" in json.dumps(_answer(resp.text)), resp.text
                    # A session id that names no node, or a node with no such session: 404, on
                    # which MCP clients start a new session.
                    async with httpx.AsyncClient(timeout=30) as other:
                        for forged in ("nosuchnode." + inner, inner):
                            resp = await other.post(second.url + "/mcp", content="{}", headers={
                                **auth, "mcp-session-id": forged, "content-type": "application/json",
                                "accept": "application/json, text/event-stream"})
                            assert resp.status_code == 404, (forged, resp.status_code, resp.text)
        # The session is over (the SDK sends DELETE, through the router to its node): its
        # sandbox is gone.
        deadline = time.time() + 10
        while True:
            now = {s["id"] for s in httpx.get(cluster.front.url + "/v1/sandboxes", headers=auth).json()["sandboxes"]}
            if not (now - before):
                break
            assert time.time() < deadline, now - before
            await anyio.sleep(0.2)

    async def guarded() -> None:
        with anyio.fail_after(CALL_TIMEOUT):
            await main()

    try:
        anyio.run(guarded)
    finally:
        second.stop()
