"""Gateway approvals in the console, end to end: an agent (the official MCP Python client)
calls a tool a rule holds for a person; the person approves one call and refuses another, with
a reason, in a real browser — in `cordon serve`'s console for a `cordon gateway` registered
with that server (`--keys-dir DATA_DIR`), and in the gateway's own `/console` (`--listen`) —
and the agent sees the tool's result, or the refusal with the reason.

Attacks: no session (401), a key that is not an admin key — the agent's own — (403), a change
without the session's CSRF token or from another origin (403), arguments holding markup (shown
as text).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import anyio
import pytest
import requests
from playwright.sync_api import expect

REFUSED = -32003
HOSTILE = '<script>alert("args")</script><img src=x onerror=alert(2)>inbox'


def cordon_bin() -> str:
    path = os.environ.get("CORDON_BIN") or str(Path(__file__).resolve().parents[2] / "target" / "debug" / "cordon")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no cordon binary at {path}: run `cargo build -p cordon` or set CORDON_BIN")
    return path


def gateway_config(root: Path, name: str) -> Path:
    """A gateway (`name`: its config file's stem, what consoles call it) with one script tool,
    `wipe`, that a rule holds for a person's approval."""
    cfg = root / f"{name}.toml"
    cfg.write_text(
        f"""
[gateway]
default = "deny"
audit = "{root}/gateway-audit.jsonl"

[tools.wipe]
description = "Wipe a folder"
input = {{ type = "object", properties = {{ folder = {{ type = "string" }}, api_token = {{ type = "string" }} }}, required = ["folder"] }}
command = ["python3", "-c", "import json,sys; print('wiped ' + json.load(sys.stdin)['folder'])"]

[[rules]]
tool = "wipe"
approve = true
approve_timeout = "120s"
"""
    )
    return cfg


class Agent(threading.Thread):
    """The agent: the official MCP client calling `wipe` twice at once, on its own event loop
    (the browser is driven from the test's thread meanwhile). `results[folder]` is the tool's
    text, or the MCP error (code, message, data)."""

    def __init__(self, connect, folders: List[str]):
        super().__init__(daemon=True)
        self.connect = connect
        self.folders = folders
        self.results: Dict[str, Any] = {}
        self.failure: Optional[BaseException] = None

    def run(self) -> None:
        try:
            anyio.run(self.main)
        except BaseException as e:  # noqa: BLE001 (reported by the test)
            self.failure = e

    async def main(self) -> None:
        from mcp import ClientSession
        from mcp.shared.exceptions import MCPError

        async with self.connect() as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()

                async def one(folder: str) -> None:
                    try:
                        r = await s.call_tool("wipe", {"folder": folder, "api_token": "tok-secret-123"})
                        self.results[folder] = ("result", "\n".join(c.text for c in r.content if c.type == "text"))
                    except MCPError as e:
                        self.results[folder] = ("error", e.code, e.message, e.data)

                with anyio.fail_after(180):
                    async with anyio.create_task_group() as tg:
                        for f in self.folders:
                            tg.start_soon(one, f)


def stdio_gateway(cfg: Path, server_dir: Path):
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=cordon_bin(), args=["gateway", "--config", str(cfg), "--keys-dir", str(server_dir)]
    )
    return lambda: stdio_client(params)


def http_gateway(url: str, key: str):
    import httpx
    from mcp.client.streamable_http import streamable_http_client

    @asynccontextmanager
    async def connect():
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx.Timeout(30, read=180)) as c:
            async with streamable_http_client(url, http_client=c) as (read, write, *_):
                yield read, write

    return connect


def answer_in_the_page(page, gateway: str) -> None:
    """Approves the `spam` call and refuses the hostile one with a reason, as a person would."""
    section = page.locator(f'section[data-gateway="{gateway}"]')
    pending = section.locator("table.pending tr[data-call]")
    expect(pending).to_have_count(2, timeout=60_000)
    # The rule that asked, the arguments as text (markup and all), the secret masked.
    hostile_row = pending.filter(has_text="inbox")
    expect(hostile_row.locator("td.rule")).to_contain_text("rules[0]")
    assert json.dumps(HOSTILE) in hostile_row.locator("pre.args").inner_text()
    assert "tok-secret-123" not in page.content()
    assert page.locator("#approvals script, #approvals img").count() == 0

    # The reason is typed first, then the other call approved: the page re-draws the table when
    # that answer lands, and what was typed must survive it (it is kept by call id).
    hostile_row.locator("input.reason").fill("not the inbox, <b>ever</b>")
    pending.filter(has_text='"spam"').locator("button.approve").click()
    expect(pending).to_have_count(1, timeout=30_000)
    expect(hostile_row.locator("input.reason")).to_have_value("not the inbox, <b>ever</b>")
    hostile_row.locator("button.refuse").click()
    expect(section.locator("table.pending")).to_have_count(0, timeout=30_000)
    history = section.locator("table.history tr[data-call]")
    expect(history).to_have_count(2, timeout=30_000)
    expect(history.filter(has_text='"spam"').locator("td.outcome")).to_have_text("granted")
    refused = history.filter(has_text="inbox")
    expect(refused.locator("td.outcome")).to_have_text("refused")
    expect(refused.locator("td.reason")).to_have_text("not the inbox, <b>ever</b>")
    assert page.locator("#approvals b, #approvals script, #approvals img").count() == 0


def check_the_agent_saw_both(agent: Agent) -> None:
    agent.join(timeout=60)
    assert not agent.is_alive(), "the agent's calls did not end"
    assert agent.failure is None, repr(agent.failure)
    assert agent.results.get("spam") == ("result", "wiped spam"), agent.results
    kind, code, message, data = agent.results[HOSTILE]
    assert (kind, code) == ("error", REFUSED), agent.results
    assert "refused" in message and "not the inbox, <b>ever</b>" in message, message
    assert data["reason"] == "approval" and data["rule"].startswith("rules[0]"), data


def sign_in(page, url: str, key: str) -> None:
    page.goto(url + "/console")
    page.fill("#key", key)
    page.click("#signin")
    expect(page.locator("#who")).to_contain_text("key ")


def test_in_the_servers_console_a_person_approves_one_held_call_and_refuses_another(server, page, tmp_path):
    cfg = gateway_config(tmp_path, "gw-serve")
    agent = Agent(stdio_gateway(cfg, server.data_dir), ["spam", HOSTILE])
    agent.start()
    sign_in(page, server.url, server.api_key)
    expect(page.locator('#nav a[href="#/approvals"]')).to_be_visible()
    page.goto(server.url + "/console#/approvals")
    answer_in_the_page(page, "gw-serve")
    check_the_agent_saw_both(agent)
    # The server's audit trail has who answered, and the reason.
    r = requests.get(server.url + "/v1/audit", params={"q": "gateway.approval"},
                     headers={"Authorization": f"Bearer {server.api_key}"}, timeout=10)
    events = [x for x in r.json()["records"] if x["event"] == "gateway.approval"]
    assert {e["details"]["approve"] for e in events} >= {True, False}, events
    # The agent's session ended, and with it the stdio gateway: the console still shows its
    # history, as a gateway that is not running.
    expect(page.locator('section[data-gateway="gw-serve"] h2').first).to_contain_text("not running", timeout=20_000)
    expect(page.locator('section[data-gateway="gw-serve"] table.history tr[data-call]')).to_have_count(2)


def test_a_key_that_is_not_an_admin_key_does_not_see_held_calls_and_its_page_hides_them(server, page):
    other = server.new_key()
    r = requests.get(server.url + "/v1/gateway/approvals", headers={"Authorization": f"Bearer {other}"}, timeout=10)
    assert r.status_code == 403 and r.json()["error"]["code"] == "admin_only", r.text
    r = requests.post(server.url + "/v1/gateway/approvals/call-00", json={"approve": False},
                      headers={"Authorization": f"Bearer {other}"}, timeout=10)
    assert r.status_code == 403, r.text
    sign_in(page, server.url, other)
    expect(page.locator('#nav a[href="#/approvals"]')).to_be_hidden()


def _session(url: str, key: str) -> Tuple[requests.Session, str]:
    s = requests.Session()
    r = s.post(url + "/console/login", json={"key": key}, timeout=10)
    assert r.status_code == 200, r.text
    return s, r.json()["csrf"]


def attack(url: str, admin_key: str) -> None:
    """Held calls at `url` (a server or a gateway): 401 without a session, 403 without the
    CSRF token or from another origin; the same request with both reaches the handler (404:
    no such call)."""
    assert requests.get(url + "/v1/gateway/approvals", timeout=10).status_code == 401
    assert requests.post(url + "/v1/gateway/approvals/call-00", json={"approve": False}, timeout=10).status_code == 401
    forged = {"cordon_session": "0" * 64}
    assert requests.get(url + "/v1/gateway/approvals", cookies=forged, timeout=10).status_code == 401
    s, csrf = _session(url, admin_key)
    assert s.get(url + "/v1/gateway/approvals", timeout=10).status_code == 200
    call = url + "/v1/gateway/approvals/call-00"
    body = {"approve": False, "reason": "x"}
    # A refused request's body is left unread, and its connection closed: one each.
    close = {"Connection": "close"}
    assert s.post(call, json=body, headers=close, timeout=10).status_code == 403, "no token"
    assert s.post(call, json=body, headers={"X-Cordon-CSRF": "0" * 64, **close}, timeout=10).status_code == 403
    r = s.post(call, json=body, headers={"X-Cordon-CSRF": csrf, "Origin": "http://evil.test", **close}, timeout=10)
    assert r.status_code == 403, r.text
    r = s.post(call, json=body, headers={"X-Cordon-CSRF": csrf, "Origin": url, **close}, timeout=10)
    assert r.status_code == 404, r.text


def test_held_calls_of_the_server_refuse_no_session_and_cross_site_requests(server):
    attack(server.url, server.api_key)


@pytest.fixture
def listening_gateway(server, tmp_path):
    """`cordon gateway --listen` on loopback, accepting the server's keys; yields its base URL."""
    cfg = gateway_config(tmp_path, "gw-listen")
    proc = subprocess.Popen(
        [cordon_bin(), "gateway", "--config", str(cfg), "--listen", "127.0.0.1:0", "--keys-dir", str(server.data_dir)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline()
        assert "listening on http://127.0.0.1:" in line, line
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
        yield line.split("listening on ")[1].strip().removesuffix("/mcp")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_in_the_gateways_own_console_a_person_approves_one_held_call_and_refuses_another(server, page, listening_gateway):
    base = listening_gateway
    agent_key = server.new_key()
    agent = Agent(http_gateway(base + "/mcp", agent_key), ["spam", HOSTILE])
    agent.start()
    # The agent's own key cannot answer its held calls.
    r = requests.get(base + "/v1/gateway/approvals", headers={"Authorization": f"Bearer {agent_key}"}, timeout=10)
    assert r.status_code == 403, r.text
    r = requests.get(base + "/approvals", headers={"Authorization": f"Bearer {agent_key}"}, timeout=10)
    assert r.status_code == 403, r.text
    r = requests.get(base + "/console", timeout=10)
    assert "script-src 'self'" in r.headers["Content-Security-Policy"]
    sign_in(page, base, server.api_key)
    answer_in_the_page(page, "gw-listen")
    check_the_agent_saw_both(agent)


def test_held_calls_of_the_gateway_refuse_no_session_and_cross_site_requests(server, listening_gateway):
    attack(listening_gateway, server.api_key)
