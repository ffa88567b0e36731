"""cordon's MCP front end, driven by the official MCP Python SDK (`mcp` on PyPI).

  * `cordon mcp` over stdio, started by the SDK's stdio client;
  * `/mcp` (streamable HTTP) on a real `cordon serve`, behind `Authorization: Bearer KEY`.

The binary is $CORDON_BIN, or <repo>/target/debug/cordon (build it first: `cargo build -p cordon`).
The matplotlib test needs Debian's python3-matplotlib (the sandbox runs /usr/bin/python3).
Everything stays on loopback.

    python3 -m venv /tmp/mcpvenv
    /tmp/mcpvenv/bin/pip install -r clients/mcp-e2e/requirements.txt pytest
    /tmp/mcpvenv/bin/pytest clients/mcp-e2e -q
"""

from __future__ import annotations

import base64
import functools
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "clients"))
import payloads  # noqa: E402  (clients/payloads.py: the programs every door is tested with)
TOOLS = {
    "run_code", "run_command", "run_wasm", "read_file", "write_file", "list_files", "reset_sandbox",
    "save_snapshot", "list_snapshots", "restore_snapshot", "delete_snapshot",
}
CALL_TIMEOUT = 120  # seconds for one whole test's MCP conversation


def cordon_bin() -> str:
    path = os.environ.get("CORDON_BIN") or str(REPO / "target" / "debug" / "cordon")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no cordon binary at {path}: run `cargo build -p cordon` or set CORDON_BIN")
    return path


# ---------------------------------------------------------------------------------------------
# SDK-version-tolerant accessors (the 2.x SDK uses snake_case, 1.x camelCase)


def _a(obj, *names):
    for n in names:
        if hasattr(obj, n):
            return getattr(obj, n)
    raise AttributeError(f"{type(obj).__name__} has none of {names}")


def is_error(result) -> bool:
    return bool(_a(result, "is_error", "isError"))


def texts(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


def images(result) -> list[tuple[str, bytes]]:
    return [
        (_a(c, "mime_type", "mimeType"), base64.b64decode(c.data))
        for c in result.content
        if getattr(c, "type", None) == "image"
    ]


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n", f"not a PNG: {png[:16]!r}"
    assert png[12:16] == b"IHDR", "first chunk is not IHDR"
    return struct.unpack(">II", png[16:24])


async def call(session: ClientSession, tool: str, **args):
    return await session.call_tool(tool, args)


def run(main):
    """Runs an async test body with an overall deadline."""

    async def guarded():
        with anyio.fail_after(CALL_TIMEOUT):
            await main()

    anyio.run(guarded)


# ---------------------------------------------------------------------------------------------
# The scenario both transports go through


async def check_tools(session: ClientSession):
    listed = (await session.list_tools()).tools
    names = {t.name for t in listed}
    assert names == TOOLS, names
    for t in listed:
        assert t.description and len(t.description) > 20, f"{t.name}: {t.description!r}"
        schema = _a(t, "input_schema", "inputSchema")
        assert isinstance(schema, dict) and schema.get("type") == "object", f"{t.name}: {schema}"
    by_name = {t.name: _a(t, "input_schema", "inputSchema") for t in listed}
    assert by_name["run_code"]["required"] == ["code"]
    assert set(by_name["run_code"]["properties"]) >= {"code", "language", "context"}
    for p in by_name["run_code"]["properties"].values():
        assert p.get("description"), by_name["run_code"]
    assert by_name["run_command"]["required"] == ["command"]
    assert sorted(by_name["write_file"]["required"]) == ["content", "path"]
    assert by_name["read_file"]["required"] == ["path"]


async def check_state_and_image(session: ClientSession):
    r = await call(session, "run_code", code="x = 21")
    assert not is_error(r), texts(r)
    r = await call(session, "run_code", code="x * 2")
    assert not is_error(r), texts(r)
    assert "42" in texts(r), texts(r)

    r = await call(
        session,
        "run_code",
        code="import matplotlib.pyplot as plt\n"
        "plt.figure(figsize=(4,3), dpi=50); plt.plot([1,2,3]);",
    )
    assert not is_error(r), texts(r)
    imgs = images(r)
    assert len(imgs) == 1, r.content
    mime, png = imgs[0]
    assert mime == "image/png"
    assert png_size(png) == (200, 150)


async def scenario(session: ClientSession):
    init = await session.initialize()
    info = _a(init, "server_info", "serverInfo")
    assert info.name == "cordon", info
    await check_tools(session)
    await check_state_and_image(session)

    # Errors come back as tool errors with the traceback.
    r = await call(session, "run_code", code="def f():\n    return 1/0\nf()")
    assert is_error(r)
    assert "ZeroDivisionError" in texts(r) and "Traceback" in texts(r), texts(r)

    # Other languages through the same tool.
    r = await call(session, "run_code", code="const a = 20; a + 1", language="javascript")
    assert not is_error(r) and "21" in texts(r), texts(r)
    r = await call(session, "run_code", code="cd /tmp && B=bash", language="bash")
    assert not is_error(r), texts(r)
    r = await call(session, "run_code", code="echo $B $PWD", language="bash")
    assert "bash /tmp" in texts(r), texts(r)

    # Files: write, read back, list.
    content = "hello from mcp\nline 2 ✓\n"
    r = await call(session, "write_file", path="notes/hello.txt", content=content)
    assert not is_error(r), texts(r)
    r = await call(session, "read_file", path="notes/hello.txt")
    assert not is_error(r), texts(r)
    assert texts(r) == content
    r = await call(session, "read_file", path="/workspace/notes/hello.txt")
    assert texts(r) == content, "relative paths are under /workspace"
    r = await call(session, "list_files", path="notes")
    assert not is_error(r), texts(r)
    assert "hello.txt" in texts(r), texts(r)
    r = await call(session, "list_files")
    assert "notes" in texts(r), texts(r)
    r = await call(session, "read_file", path="does/not/exist")
    assert is_error(r), texts(r)

    # The code interpreter and the file tools see the same sandbox.
    r = await call(session, "run_code", code="open('/workspace/notes/hello.txt').read().count('line')")
    assert "1" in texts(r), texts(r)
    r = await call(
        session,
        "run_code",
        code="import matplotlib.pyplot as plt\nplt.figure(figsize=(1,1), dpi=32)\n"
        "plt.savefig('/workspace/chart.png'); plt.close('all')",
    )
    assert not is_error(r), texts(r)
    r = await call(session, "read_file", path="chart.png")
    imgs = images(r)
    assert len(imgs) == 1 and imgs[0][0] == "image/png", r.content
    assert png_size(imgs[0][1]) == (32, 32)

    # Commands.
    r = await call(session, "run_command", command="echo hi")
    assert not is_error(r), texts(r)
    assert "hi" in texts(r) and "exit code 0" in texts(r), texts(r)
    r = await call(session, "run_command", command="cat notes/hello.txt | wc -l")
    assert "2" in texts(r), texts(r)
    r = await call(session, "run_command", command="echo oops >&2; exit 3")
    assert is_error(r), texts(r)
    assert "exit code 3" in texts(r) and "oops" in texts(r), texts(r)

    # Reset: interpreter state and files are gone.
    r = await call(session, "reset_sandbox")
    assert not is_error(r), texts(r)
    r = await call(session, "run_code", code="x")
    assert is_error(r), texts(r)
    assert "NameError" in texts(r), texts(r)
    r = await call(session, "read_file", path="notes/hello.txt")
    assert is_error(r), texts(r)
    r = await call(session, "run_code", code="x = 1\nx + 1")
    assert not is_error(r) and "2" in texts(r), texts(r)
    await check_snapshots(session)


async def check_snapshots(session: ClientSession):
    """Save the files, change them, restore: the saved ones are back, processes start fresh."""
    r = await call(session, "list_snapshots")
    assert not is_error(r) and "no snapshots" in texts(r), texts(r)
    r = await call(session, "write_file", path="keep.txt", content="saved")
    assert not is_error(r), texts(r)
    r = await call(session, "save_snapshot", name="before")
    assert not is_error(r) and "saved snapshot 'before'" in texts(r), texts(r)
    r = await call(session, "save_snapshot", name="before")
    assert is_error(r) and "exists" in texts(r), texts(r)
    r = await call(session, "save_snapshot", name="../escape")
    assert is_error(r), texts(r)
    r = await call(session, "list_snapshots")
    assert "before" in texts(r), texts(r)
    r = await call(session, "write_file", path="keep.txt", content="changed")
    r = await call(session, "write_file", path="later.txt", content="after the snapshot")
    r = await call(session, "run_code", code="y = 5")
    r = await call(session, "restore_snapshot", name="nope")
    assert is_error(r) and "no snapshot 'nope'" in texts(r), texts(r)
    r = await call(session, "read_file", path="later.txt")
    assert not is_error(r), "a refused restore throws nothing away"
    r = await call(session, "restore_snapshot", name="before")
    assert not is_error(r), texts(r)
    r = await call(session, "read_file", path="keep.txt")
    assert texts(r) == "saved", texts(r)
    r = await call(session, "read_file", path="later.txt")
    assert is_error(r), "what came after the snapshot is gone"
    r = await call(session, "run_code", code="y")
    assert is_error(r) and "NameError" in texts(r), texts(r)
    r = await call(session, "delete_snapshot", name="before")
    assert not is_error(r), texts(r)
    r = await call(session, "delete_snapshot", name="before")
    assert is_error(r), texts(r)


# ---------------------------------------------------------------------------------------------
# stdio


def test_stdio_cordon_mcp():
    data_dir = tempfile.mkdtemp(prefix="cordon-mcp-e2e-")

    async def main():
        params = StdioServerParameters(command=cordon_bin(), args=["mcp", "--data-dir", data_dir])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await scenario(session)

    try:
        run(main)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def test_stdio_default_data_dir_and_exit():
    """Without --data-dir, `cordon mcp` works out of a temporary directory of its own and
    removes it when the session ends."""
    tmp = Path(tempfile.gettempdir())
    before = set(tmp.glob("cordon-mcp-*"))
    seen = set()

    async def main():
        params = StdioServerParameters(command=cordon_bin(), args=["mcp"])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                r = await call(session, "run_code", code="6 * 7")
                assert "42" in texts(r), texts(r)
                seen.update(set(tmp.glob("cordon-mcp-*")) - before)

    run(main)
    assert len(seen) == 1, f"expected one new data dir, saw {seen}"
    deadline = time.monotonic() + 10
    while any(p.exists() for p in seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(p.exists() for p in seen), f"{seen} outlived the session"


# ---------------------------------------------------------------------------------------------
# Streamable HTTP on `cordon serve`


class Server:
    def __init__(self):
        self.data_dir = tempfile.mkdtemp(prefix="cordon-serve-e2e-")
        self.proc = subprocess.Popen(
            [cordon_bin(), "serve", "--listen", "127.0.0.1:0", "--data-dir", self.data_dir],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        self.url = ""
        self.key = ""
        deadline = time.monotonic() + 20
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("cordon serving on "):
                self.url = line.removeprefix("cordon serving on ").strip()
            if "shown once): " in line:
                self.key = line.split("shown once): ", 1)[1].strip()
            if line.startswith(("API key", "authentication disabled")):
                break
        # Keep draining stdout so the server never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()
        if not self.url:
            self.stop()
            pytest.fail("cordon serve did not print its URL")
        assert self.url.startswith("http://127.0.0.1:"), self.url
        assert self.key, "cordon serve did not print an API key"

    def rest(self, method: str, path: str, key: str | None = None, body: bytes | None = None,
             headers: dict | None = None):
        req = urllib.request.Request(self.url + path, method=method, data=body)
        if key is not None:
            req.add_header("Authorization", f"Bearer {key}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def new_key(self, max_sandboxes: int, rps: int) -> tuple[str, str]:
        """A further API key of this server: (secret, key id)."""
        out = subprocess.run(
            [cordon_bin(), "keys", "create", "--data-dir", self.data_dir, "--name", "e2e",
             "--max-sandboxes", str(max_sandboxes), "--rps", str(rps)],
            capture_output=True, text=True, timeout=30, check=True,
        )
        key_id = out.stderr.split("created key ", 1)[1].split()[0]
        return out.stdout.strip(), key_id

    def running_sandboxes(self) -> set[str]:
        status, body = self.rest("GET", "/v1/sandboxes", key=self.key)
        assert status == 200, body
        return {s["id"] for s in json.loads(body)["sandboxes"] if s["state"] == "running"}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


def http_client_factory():
    """(module, AsyncClient) of the HTTP library the installed SDK uses."""
    try:
        import httpx2 as httpx  # mcp >= 2
    except ImportError:  # pragma: no cover - mcp 1.x
        import httpx
    return httpx


def open_http_session(server: Server, key: str | None):
    """An async context manager yielding an MCP ClientSession over streamable HTTP."""
    from contextlib import asynccontextmanager

    httpx = http_client_factory()
    try:
        from mcp.client.streamable_http import streamable_http_client as connect
        new_api = True
    except ImportError:  # pragma: no cover - mcp 1.x
        from mcp.client.streamable_http import streamablehttp_client as connect
        new_api = False

    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}

    @asynccontextmanager
    async def cm():
        if new_api:
            async with httpx.AsyncClient(
                headers=headers, timeout=httpx.Timeout(30, read=300)
            ) as client:
                async with connect(server.url + "/mcp", http_client=client) as (read, write):
                    async with ClientSession(read, write) as session:
                        yield session
        else:
            async with connect(server.url + "/mcp", headers=headers) as (read, write, _):
                async with ClientSession(read, write) as session:
                    yield session

    return cm()


def test_http_mcp(server: Server):
    before = server.running_sandboxes()

    async def main():
        async with open_http_session(server, server.key) as session:
            await session.initialize()
            await check_tools(session)
            assert server.running_sandboxes() == before, "the sandbox is created lazily"
            await check_state_and_image(session)
            mine = server.running_sandboxes() - before
            assert len(mine) == 1, mine

            r = await call(session, "write_file", path="a.txt", content="over http")
            assert not is_error(r), texts(r)
            r = await call(session, "read_file", path="a.txt")
            assert texts(r) == "over http"
            r = await call(session, "run_command", command="echo hi")
            assert "hi" in texts(r), texts(r)

    run(main)
    # The session is over (the SDK sends DELETE): its sandbox is deleted.
    deadline = time.monotonic() + 10
    while server.running_sandboxes() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not server.running_sandboxes() - before, "the session's sandbox outlived the session"


def test_http_sessions_are_isolated(server: Server):
    async def main():
        async with open_http_session(server, server.key) as a:
            await a.initialize()
            async with open_http_session(server, server.key) as b:
                await b.initialize()
                r = await call(a, "run_code", code="secret = 'a'")
                assert not is_error(r), texts(r)
                await call(a, "write_file", path="mine.txt", content="a")
                r = await call(b, "run_code", code="secret")
                assert is_error(r) and "NameError" in texts(r), texts(r)
                r = await call(b, "read_file", path="mine.txt")
                assert is_error(r), texts(r)
                r = await call(a, "run_code", code="secret")
                assert "'a'" in texts(r), texts(r)

    run(main)


INIT = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "e2e", "version": "0"},
        },
    }
).encode()
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def test_http_mcp_requires_the_key(server: Server):
    for key in (None, "cdn_not_a_real_key", ""):
        status, body = server.rest("POST", "/mcp", key=key, body=INIT, headers=MCP_HEADERS)
        assert status == 401, (key, status, body)
    status, body = server.rest("GET", "/mcp", key=None, headers={"Accept": "text/event-stream"})
    assert status == 401, (status, body)
    # The right key gets through (a sanity check of the request above).
    status, body = server.rest("POST", "/mcp", key=server.key, body=INIT, headers=MCP_HEADERS)
    assert status == 200, (status, body)

    # And the SDK's client, without the key, cannot start a session (the SDK reports the 401
    # as an internal error, so only the failure itself is checked here).
    async def main():
        async with open_http_session(server, None) as session:
            await session.initialize()

    with pytest.raises(BaseException):  # noqa: PT011 - the SDK wraps it in an ExceptionGroup
        run(main)


# ---------------------------------------------------------------------------------------------
# Many sessions at once: each session's calls run in the order sent, one sandbox per session.
# Everything about sandboxes is checked from the host: the server's registry (SQLite, read
# here directly) and the processes in /proc — never the server's own word.

SESSIONS = 20
BIG = 256 * 1024  # a write slow enough that a read racing it would finish first


def ppid_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    return int(stat.rsplit(")", 1)[1].split()[1])


def cmdline_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def children_of(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and ppid_of(int(p.name)) == pid:
            out.append(int(p.name))
    return out


def helpers_of(pid: int) -> list[int]:
    """The sandbox helpers a cordon process runs: one per sandbox, each the parent of that
    sandbox's init."""
    return [c for c in children_of(pid) if "__sandbox" in cmdline_of(c)]


def registry_rows(data_dir: str, key_id: str | None = None) -> list[dict]:
    import sqlite3

    con = sqlite3.connect(f"file:{data_dir}/cordon.db?mode=ro", uri=True, timeout=10)
    try:
        con.row_factory = sqlite3.Row
        sql = "SELECT id, key_id, state, metadata, helper_pid FROM sandboxes"
        rows = con.execute(sql + (" WHERE key_id = ?" if key_id else ""), (key_id,) if key_id else ())
        return [dict(r) for r in rows]
    finally:
        con.close()


def check_sandbox_process(row: dict, parent: int | None = None) -> int:
    """The row's sandbox is alive on the host: its helper runs (under `parent`) and holds an
    init. Returns the helper's parent."""
    helper = row["helper_pid"]
    assert "__sandbox" in cmdline_of(helper), f"{row}: helper {helper} is not running"
    up = ppid_of(helper)
    if parent is not None:
        assert up == parent, f"{row}: helper {helper} belongs to {up}, not {parent}"
    assert len(children_of(helper)) == 1, f"{row}: helper {helper} holds {children_of(helper)}"
    return up


async def write_then_read(session: ClientSession, tag: str) -> None:
    """`write_file` and then `read_file` of the same file, the read sent right after the
    write without waiting for its answer."""
    content = f"{tag}\n" + "w" * BIG
    results = {}

    async def do(name, **args):
        results[name] = await call(session, name, **args)

    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(do, "write_file", path=f"{tag}.txt", content=content))
        tg.start_soon(functools.partial(do, "read_file", path=f"{tag}.txt"))
    assert not is_error(results["write_file"]), texts(results["write_file"])
    r = results["read_file"]
    assert not is_error(r), f"{tag}: the read ran before its write: {texts(r)[:300]}"
    assert texts(r) == content, f"{tag}: read {len(texts(r))} bytes, not the {len(content)} written"


async def first_calls_together(session: ClientSession, tag: str) -> None:
    """A session whose first calls all arrive at once (no sandbox exists yet): they still run
    in the order sent, in one sandbox."""
    calls = [
        ("write_file", {"path": "a.txt", "content": f"{tag}-a\n" + "a" * BIG}),
        ("run_command", {"command": "cat a.txt | head -1; echo b >> a.txt"}),
        ("write_file", {"path": "c.txt", "content": "c"}),
        ("read_file", {"path": "a.txt"}),
        ("list_files", {}),
        ("run_code", {"code": "open('/workspace/c.txt').read() + '!'"}),
    ]
    results: list = [None] * len(calls)

    async def do(i, name, args):
        results[i] = await call(session, name, **args)

    async with anyio.create_task_group() as tg:
        for i, (name, args) in enumerate(calls):
            tg.start_soon(do, i, name, args)
    for (name, _), r in zip(calls, results):
        assert not is_error(r), f"{tag} {name}: {texts(r)[:300]}"
    assert f"{tag}-a" in texts(results[1]), texts(results[1])[:300]
    assert texts(results[3]) == f"{tag}-a\n" + "a" * BIG + "b\n", "the read did not see the command before it"
    assert "a.txt" in texts(results[4]) and "c.txt" in texts(results[4]), texts(results[4])
    assert "'c!'" in texts(results[5]), texts(results[5])


def test_stdio_concurrent_sessions_keep_order_and_get_one_sandbox_each():
    dirs = [tempfile.mkdtemp(prefix="cordon-mcp-conc-") for _ in range(SESSIONS + 1)]
    mcp_pids: dict[int, int] = {}

    async def one(i: int):
        params = StdioServerParameters(command=cordon_bin(), args=["mcp", "--data-dir", dirs[i]])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                if i == SESSIONS:
                    await first_calls_together(session, f"s{i}")
                else:
                    await write_then_read(session, f"s{i}")
                # From the host, while the session is open: one sandbox was ever created
                # (the registry keeps ended ones too), and it is the only one this `cordon mcp`
                # runs.
                rows = registry_rows(dirs[i])
                assert len(rows) == 1, f"session {i}: {len(rows)} sandboxes: {rows}"
                mcp = check_sandbox_process(rows[0])
                assert f"mcp --data-dir {dirs[i]}" in cmdline_of(mcp), cmdline_of(mcp)
                assert helpers_of(mcp) == [rows[0]["helper_pid"]], helpers_of(mcp)
                mcp_pids[i] = mcp

    async def main():
        async with anyio.create_task_group() as tg:
            for i in range(SESSIONS + 1):
                tg.start_soon(one, i)

    try:
        run(main)
        assert len(mcp_pids) == SESSIONS + 1
        # Every session ended: its server and sandbox are gone from the host.
        deadline = time.monotonic() + 20
        alive = lambda: [p for p in mcp_pids.values() if Path(f"/proc/{p}").exists() and "mcp" in cmdline_of(p)]
        while alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(), f"cordon mcp processes outlived their sessions: {alive()}"
    finally:
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


def test_http_concurrent_sessions_keep_order_and_get_one_sandbox_each(server: Server):
    # A key of its own: its sandboxes are this test's, and its rate limit fits the burst.
    key, key_id = server.new_key(max_sandboxes=SESSIONS + 5, rps=10_000)
    done = 0
    all_done = anyio.Event()
    checked = anyio.Event()

    async def one(i: int):
        nonlocal done
        async with open_http_session(server, key) as session:
            await session.initialize()
            if i == SESSIONS:
                await first_calls_together(session, f"h{i}")
            else:
                await write_then_read(session, f"h{i}")
            done += 1
            if done == SESSIONS + 1:
                all_done.set()
            # Keep the session open until the host has looked at every sandbox.
            await checked.wait()

    async def inspect():
        await all_done.wait()
        rows = registry_rows(server.data_dir, key_id)
        labels = [json.loads(r["metadata"]).get("mcp_session") for r in rows]
        assert len(rows) == SESSIONS + 1, f"{len(rows)} sandboxes for {SESSIONS + 1} sessions"
        assert len(set(labels)) == SESSIONS + 1 and None not in labels, labels
        for r in rows:
            assert r["state"] == "running", r
            check_sandbox_process(r, parent=server.proc.pid)
        checked.set()

    async def main():
        async with anyio.create_task_group() as tg:
            tg.start_soon(inspect)
            for i in range(SESSIONS + 1):
                tg.start_soon(one, i)

    run(main)
    # The sessions closed: their sandboxes are deleted, their helpers gone.
    deadline = time.monotonic() + 20
    live = lambda: [r for r in registry_rows(server.data_dir, key_id) if r["state"] == "running"]
    while live() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not live(), live()
    rows = registry_rows(server.data_dir, key_id)
    assert not any("__sandbox" in cmdline_of(r["helper_pid"]) for r in rows)


# ---------------------------------------------------------------------------------------------
# `cordon mcp` with cordon run's sandbox options: a profile file, a workspace, egress, limits


OUTCOME_FACTS = {"status", "exit_code", "signal", "error", "limits_hit", "usage", "enforcement",
                 "network", "stdout_truncated", "stderr_truncated"}


class Upstream:
    """A tiny HTTP server on 127.0.0.2 (loopback) for the sandbox to reach through its proxy."""

    def __init__(self):
        import http.server

        hits = self.hits = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                hits.append(self.path)
                body = b"hello from upstream\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_stdio_profile_file_workspace_network_and_limits():
    scratch = Path(tempfile.mkdtemp(prefix="cordon-mcp-profile-"))
    # Traversable by the sandbox's own host uid (when the test runs as root, cordon maps the
    # sandbox to an unprivileged uid).
    os.chmod(scratch, 0o755)
    ws = scratch / "ws"
    ws.mkdir(mode=0o755)
    (ws / "from-host.txt").write_text("hello from the host\n")
    profile = scratch / "agent.toml"
    profile.write_text(
        'name = "e2e-agent"\nextends = "default"\n\n'
        '[limits]\nmemory = "200M"\ntimeout = "4s"\ndisk = "16M"\n\n'
        '[env]\nset = { E2E_FROM_PROFILE = "yes" }\n'
    )
    up = Upstream()
    net = [f"allowed.test:{up.port}", "127.0.0.2:*"]
    args = ["mcp", "--data-dir", str(scratch / "data"), "--profile", str(profile),
            "--workspace", str(ws), "--add-host", "allowed.test:127.0.0.2", "--env", "E2E_PASSED"]
    for n in net:
        args += ["--allow-net", n]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "E2E_PASSED": "through"}

    async def main():
        params = StdioServerParameters(command=cordon_bin(), args=args, env=env)
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                instructions = _a(init, "instructions") or ""
                assert all(n in instructions for n in net), instructions

                # The workspace is the host directory, both ways.
                r = await call(session, "read_file", path="from-host.txt")
                assert texts(r) == "hello from the host\n", texts(r)
                r = await call(session, "write_file", path="from-agent.txt", content="hi host")
                assert not is_error(r), texts(r)
                assert (ws / "from-agent.txt").read_text() == "hi host"

                # The profile's environment, and a variable passed through from cordon's own.
                r = await call(session, "run_command", command='echo "$E2E_FROM_PROFILE $E2E_PASSED"')
                assert "yes through\n" in texts(r), texts(r)

                # Egress: the allowed host, through the proxy, with an ordinary client.
                r = await call(
                    session, "run_command",
                    command=f"python3 -c 'import urllib.request; print(urllib.request.urlopen("
                    f"\"http://allowed.test:{up.port}/\").read().decode(), end=\"\")'",
                )
                assert not is_error(r) and "hello from upstream" in texts(r), texts(r)
                assert up.hits, "the upstream saw no request"

                # The limits hold: wall clock (4 s), memory (200M), disk (16M).
                t0 = time.monotonic()
                r = await call(session, "run_command", command="sleep 30")
                assert is_error(r), texts(r)
                facts = _a(r, "structured_content", "structuredContent")
                assert facts["status"] == "timeout", facts
                # The same facts as every other door's Outcome (the output is in the text).
                assert OUTCOME_FACTS <= set(facts), set(facts) ^ OUTCOME_FACTS
                assert set(facts["usage"]) >= {"wall_ms", "cpu_user_ms", "cpu_system_ms",
                                               "peak_memory_bytes", "peak_pids"}, facts
                assert time.monotonic() - t0 < 20, "the 4 s timeout did not apply"
                r = await call(
                    session, "run_command",
                    command="python3 -c 'b = bytearray(400 << 20); b[::4096] = b\"x\" * len(b[::4096]); print(\"allocated\")'",
                )
                facts = _a(r, "structured_content", "structuredContent")
                assert is_error(r) and "allocated" not in texts(r), texts(r)
                assert (facts["status"], facts["exit_code"]) != ("exited", 0), facts
                r = await call(session, "run_command", command="head -c 32M /dev/zero > /tmp/fill")
                assert is_error(r) and "No space left" in texts(r), texts(r)

                # Reset keeps the workspace (it is the user's directory) and nothing else.
                await call(session, "run_command", command="echo gone > /tmp/scratch")
                r = await call(session, "reset_sandbox")
                assert "/workspace stay" in texts(r), texts(r)
                r = await call(session, "read_file", path="from-agent.txt")
                assert texts(r) == "hi host", texts(r)
                r = await call(session, "read_file", path="/tmp/scratch")
                assert is_error(r), texts(r)

    try:
        run(main)
    finally:
        up.stop()
        shutil.rmtree(scratch, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The four shared payloads (clients/payloads.json) through `run_command`: the same ending as
# through `cordon run` and HTTP `exec` (crates/cordon/tests/exec_limits.rs), the limits given to
# `cordon mcp` with `cordon run`'s flags.


def split_output(text: str) -> tuple[str, str]:
    """stdout and stderr out of run_command's text ("...stdout:\nOUT[\n[truncated]]\nstderr:\nERR")."""
    _, _, rest = text.partition("stdout:\n")
    out, sep, err = rest.rpartition("\nstderr:\n")
    assert sep, f"no stderr section in {text[:500]!r}"
    cut = "\n[truncated]"
    return out.removesuffix(cut), err.removesuffix(cut)


@pytest.mark.parametrize("key", payloads.KEYS)
def test_stdio_run_command_ends_each_payload_as_every_door_does(key: str):
    data_dir = tempfile.mkdtemp(prefix="cordon-mcp-limits-")
    tag = payloads.marker(key)

    async def main():
        params = StdioServerParameters(
            command=cordon_bin(), args=["mcp", "--data-dir", data_dir, *payloads.cli_flags(key)]
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                r = await call(session, "run_command", command=payloads.shell(key, tag))
                # Checked while the session (and its sandbox) still lives: the command's end
                # took everything it started.
                payloads.assert_none_left(tag)
                facts = _a(r, "structured_content", "structuredContent")
                assert OUTCOME_FACTS <= set(facts), set(facts) ^ OUTCOME_FACTS
                out, err = split_output(texts(r))
                payloads.check_ending(key, facts, out, err)
                ok = (facts["status"], facts["exit_code"]) == ("exited", 0)
                assert is_error(r) == (not ok), texts(r)[:500]
                # The text a model reads names each limit hit, and only those.
                lines = texts(r).splitlines()
                said = [line.split(" ")[2] for line in lines if line.startswith("limit hit: ")]
                assert said == facts["limits_hit"], texts(r)[:500]

    try:
        run(main)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def host_processes_with(token: str) -> list[int]:
    """Host pids whose command line holds `token` (the sandbox's processes are host processes)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if token in (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def test_stdio_cancelled_run_command_ends_its_process_tree_and_the_next_call_runs_at_once():
    data_dir = tempfile.mkdtemp(prefix="cordon-mcp-cancel-")
    token = f"{20 + os.getpid() % 1000 / 1000:.3f}"  # a sleep duration no other process has

    async def main():
        params = StdioServerParameters(command=cordon_bin(), args=["mcp", "--data-dir", data_dir])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                r = await call(session, "run_command", command="echo warm")
                assert "warm" in texts(r), texts(r)

                # A command with a child of its own; the client gives up after 1.5 s (the SDK
                # sends notifications/cancelled).
                with anyio.move_on_after(1.5):
                    await call(session, "run_command", command=f"sh -c 'sleep {token}' & sleep {token}; wait")
                assert host_processes_with(f"sleep {token}"), "the command was running"
                t0 = time.monotonic()
                r = await call(session, "run_command", command="echo next")
                took = time.monotonic() - t0
                assert "next" in texts(r) and took < 1.0, (took, texts(r))
                deadline = time.monotonic() + 2
                while host_processes_with(f"sleep {token}") and time.monotonic() < deadline:
                    await anyio.sleep(0.05)
                assert not host_processes_with(f"sleep {token}"), "a process of the cancelled command lives on"

                # Progress, when the client asks for it: how long the call has run.
                seen = []

                async def progress(p, total, message):
                    seen.append((p, message))

                r = await session.call_tool("run_command", {"command": "sleep 2.5; echo done"}, progress_callback=progress)
                assert "done" in texts(r), texts(r)
                assert len(seen) >= 1 and "running for" in seen[0][1], seen

    try:
        run(main)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
