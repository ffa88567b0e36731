"""The client against a real `cordon serve`: every call of the API, through AsyncSandbox."""

# test_client_sync.py is generated from this file by scripts/unasync.py, so the same tests  # async-only
# run through the synchronous client as well.  # async-only
from __future__ import annotations

import asyncio  # async-only
import dataclasses
import http.server
import re
import struct
import threading
import time
import uuid
from typing import Any, Dict, Iterator, List, Set, Tuple

import httpx
import pytest

from cordon_sdk import (
    AsyncCommandHandle,
    AsyncSandbox,
    AuthenticationError,
    BadRequestError,
    CodeError,
    ConflictError,
    CordonTimeoutError,
    MimeBundle,
    NotFoundError,
    PermissionDeniedError,
    SandboxError,
)

from .conftest import RegistryImage, Server, payloads

pytestmark = pytest.mark.anyio  # async-only

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# ---- lifecycle -----------------------------------------------------------------------------


async def test_lifecycle_metadata_filter_ttl(conn: Dict[str, Any]) -> None:
    tag = uuid.uuid4().hex
    sb = await AsyncSandbox.create(memory="256M", env={"GREETING": "hi"}, metadata={"suite": tag}, ttl=120, **conn)
    other = await AsyncSandbox.create(metadata={"suite": tag, "role": "other"}, **conn)
    try:
        info = await sb.info()
        assert info.state == "running" and info.running and info.metadata == {"suite": tag}
        assert info.limits is not None and info.limits.memory_bytes == 256 << 20
        assert info.enforcement is not None and info.enforcement.pid_ns
        assert 0 < info.expires_at - info.created_at <= 120
        assert {s.id for s in await AsyncSandbox.list(metadata={"suite": tag}, **conn)} == {sb.id, other.id}
        assert [s.id for s in await AsyncSandbox.list(metadata={"suite": tag, "role": "other"}, **conn)] == [other.id]
        assert await AsyncSandbox.list(metadata={"suite": tag, "role": "nobody"}, **conn) == []
        info = await sb.set_ttl("20m")
        assert 1190 <= info.expires_at - int(time.time()) <= 1200
        again = await AsyncSandbox.connect(sb.id, **conn)
        assert (await again.commands.run("echo $GREETING")).stdout == "hi\n"
        await again.close()
    finally:
        assert await sb.kill() is True
        assert await sb.kill() is False
        await other.kill()
        await sb.close()
        await other.close()
    gone = AsyncSandbox(sb.id, **conn)
    info = await gone.info()
    assert info.state == "deleted" and info.ended_reason
    assert not await gone.is_running()
    await gone.close()
    assert await AsyncSandbox.list(metadata={"suite": tag}, **conn) == []


async def test_context_manager_kills_on_exit(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(**conn) as sb:
        sid = sb.id
        assert await sb.is_running()
    with pytest.raises(ZeroDivisionError):
        async with AsyncSandbox.create(**conn) as sb2:
            sid2 = sb2.id
            raise ZeroDivisionError("inside the block")
    for s in (sid, sid2):
        async with AsyncSandbox(s, **conn) as probe:
            assert (await probe.info()).state == "deleted"
            with pytest.raises(NotFoundError):
                await probe.commands.run("true")


async def test_one_shot_run(conn: Dict[str, Any]) -> None:
    o = await AsyncSandbox.run(["sh", "-c", "echo $Y; cat; exit 3"], env={"Y": "why"}, stdin="in", timeout=20, **conn)
    assert (o.status, o.exit_code, o.stdout) == ("exited", 3, "why\nin")
    assert o.limits_hit == [] and o.enforcement.pid_ns
    o = await AsyncSandbox.run("sleep 5", timeout=0.5, **conn)
    assert o.status == "timeout"


async def test_run_many_streams_each_items_result_and_returns_them_in_order(conn: Dict[str, Any]) -> None:
    seen: List[int] = []
    results = await AsyncSandbox.run_many(
        [
            {"cmd": "sleep 1; echo slow"},
            {"language": "python", "code": "print(open('in.txt').read() * 2)", "files": {"in.txt": b"ab"}},
            {"language": "python", "code": "assert 1 + 1 == 3"},
            {"language": "cobol", "code": "x"},
            {"cmd": "echo out > o.txt", "fetch_files": ["o.txt"]},
            {"language": "bash", "code": "read n; echo $((n * 2))",
             "tests": [{"stdin": "2", "expected_stdout": "4"}, {"stdin": "3", "expected_stdout": "5"}]},
        ],
        concurrency=3,
        on_result=lambda r: seen.append(r.index),
        **conn,
    )
    assert [r.index for r in results] == list(range(6))
    assert seen[-1] == 0 and sorted(seen) == list(range(6)), seen  # the slow item last
    assert results[0].passed and results[0].outcome is not None and results[0].outcome.stdout == "slow\n"
    assert results[1].passed and results[1].outcome is not None and results[1].outcome.stdout == "abab\n"
    assert results[2].passed is False and results[2].outcome is not None
    assert "AssertionError" in results[2].outcome.stderr
    assert results[3].error is not None and results[3].error.code == "unknown_language"
    assert results[4].files == {"o.txt": b"out\n"}
    tests = results[5].tests or []
    assert [t.passed for t in tests] == [True, False] and results[5].passed is False


# ---- commands ------------------------------------------------------------------------------


async def test_commands(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(**conn) as sb:
        o = await sb.commands.run("echo out; echo err >&2; exit 2", env={"A": "1"})
        assert (o.status, o.exit_code, o.stdout, o.stderr) == ("exited", 2, "out\n", "err\n")
        assert (await sb.commands.run("cat", stdin="piped")).stdout == "piped"
        assert (await sb.commands.run("pwd", cwd="/tmp")).stdout == "/tmp\n"
        assert (await sb.commands.run("sleep 10", timeout=0.5)).status == "timeout"
        o = await sb.commands.run(["sh", "-c", "kill -TERM $$"])
        assert (o.status, o.signal) == ("signaled", 15)


async def test_streaming_callbacks(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(**conn) as sb:
        out: List[Tuple[float, str]] = []
        err: List[str] = []

        async def on_out(s: str) -> None:
            await asyncio.sleep(0)  # async-only
            out.append((time.monotonic(), s))

        o = await sb.commands.run(
            "for i in 1 2 3; do echo $i; echo x$i >&2; sleep 0.3; done",
            on_stdout=on_out,
            on_stderr=err.append,
        )
        done = time.monotonic()
        assert o.ok
        assert "".join(s for _, s in out) == "1\n2\n3\n" == o.stdout
        assert "".join(err) == "x1\nx2\nx3\n"
        assert all(s for _, s in out) and all(err), "a callback got an empty chunk"
        # The first line came while the command still ran, not with its end.
        assert done - out[0][0] >= 0.4, out


async def test_background_command_waited_on_and_signalled(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(**conn) as sb:
        h = await sb.commands.run("cat", background=True, stdin="zero\n")
        assert isinstance(h, AsyncCommandHandle) and h.cmd[-1] == "cat"
        await h.send_stdin("one\n")
        await h.send_stdin("two\n", close=True)
        o = await h.wait(10)
        assert (o.status, o.stdout) == ("exited", "zero\none\ntwo\n")

        # A program that handles SIGTERM itself: the signal reaches it, its Outcome shows it.
        h2 = await sb.commands.run(
            ["python3", "-c", "import signal, sys, time\n"
             "signal.signal(signal.SIGTERM, lambda *a: (print('got TERM', flush=True), sys.exit(7)))\n"
             "print('ready', flush=True)\n"
             "time.sleep(60)"],
            background=True,
        )
        for _ in range(100):
            if "ready" in (await h2.info()).stdout:
                break
            await asyncio.sleep(0.05)  # sync: time.sleep(0.05)
        with pytest.raises(CordonTimeoutError):
            await h2.wait(0.2)
        info = await h2.info()
        assert info.running and info.outcome is None and info.stdout == "ready\n"
        listed = {c.command_id: c for c in await sb.commands.list()}
        assert listed[h2.id].running and not listed[h.id].running
        await h2.signal("TERM")
        o2 = await h2.wait(10)
        assert (o2.status, o2.exit_code, o2.stdout) == ("exited", 7, "ready\ngot TERM\n")

        h3 = await sb.commands.run("sleep 30", background=True)
        again = await sb.commands.connect(h3.id)
        await again.kill()
        o3 = await h3.wait(10)
        assert (o3.status, o3.signal) == ("signaled", 9)
        with pytest.raises(NotFoundError):
            await sb.commands.connect("nope")


# ---- limits: the four shared payloads ------------------------------------------------------
# clients/payloads.json holds the programs the CLI, HTTP exec and MCP tests run too; each, in a
# sandbox created with its limits, ends through the SDK as through every other door
# (clients/payloads.py has the expectations, those of crates/cordon/tests/exec_limits.rs).


@pytest.mark.parametrize("key", payloads.KEYS)
async def test_each_payload_ends_as_through_every_door(conn: Dict[str, Any], key: str) -> None:
    p = payloads.PAYLOADS[key]
    tag = payloads.marker(key)
    async with AsyncSandbox.create(
        memory=p.get("memory"), pids=p.get("pids"), output_limit=p.get("output_limit"), **conn
    ) as sb:
        o = await sb.commands.run(payloads.argv(key, tag), timeout=p.get("timeout"))
        # Checked while the sandbox lives: the command's end took everything it started.
        payloads.assert_none_left(tag)
        if key == "output_flood":
            # A code cell says the same, in the same words.
            cell = await sb.code.run(p["script"])
            assert (cell.status, cell.limits_hit, cell.stdout_truncated) == ("exited", ["output"], True), cell
            assert cell.stdout == "y" * (10 << 10) and cell.ok, cell
    payloads.check_ending(key, o.raw, o.stdout, o.stderr)
    # The typed Outcome says what the JSON says.
    raw = o.raw
    assert (o.status, o.exit_code, o.signal, o.limits_hit) == (
        raw["status"], raw.get("exit_code"), raw.get("signal"), raw["limits_hit"]
    )
    assert (o.stdout_truncated, o.stderr_truncated) == (raw["stdout_truncated"], raw["stderr_truncated"])
    assert o.enforcement.cgroup == raw["enforcement"]["cgroup"]
    assert dataclasses.asdict(o.usage) == {k: raw["usage"][k] for k in dataclasses.asdict(o.usage)}
    assert o.ok == (key in ("pids_bomb", "output_flood"))


async def test_cpu_time_and_output_limit_given_at_create(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(cpu_time="1s", output_limit=1024, **conn) as sb:
        info = await sb.info()
        assert info.limits is not None and info.limits.output_limit_bytes == 1024
        o = await sb.commands.run(["python3", "-c", payloads.PAYLOADS["cpu_spin"]["script"]], timeout="20s")
        assert (o.status, o.limits_hit) == ("cpu_time", ["cpu_time"]), o
        assert 800 <= o.usage.cpu_user_ms + o.usage.cpu_system_ms < 5000, o


# ---- files ---------------------------------------------------------------------------------


async def test_files(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(**conn) as sb:
        await sb.files.mkdir("/workspace/a/b")
        assert await sb.files.write("/workspace/a/b/f.txt", "data") == 4
        assert await sb.files.read_text("/workspace/a/b/f.txt") == "data"
        await sb.files.write("bin.dat", bytes(range(256)))
        assert await sb.files.read("/workspace/bin.dat") == bytes(range(256))
        [entry] = await sb.files.list("/workspace/a/b")
        assert (entry.name, entry.path, entry.type, entry.size) == ("f.txt", "/workspace/a/b/f.txt", "file", 4)
        assert entry.is_file and abs(entry.modified - time.time()) < 300
        st = await sb.files.stat("/workspace/a")
        assert st.is_dir
        await sb.commands.run("ln -s /etc/hostname /workspace/link")
        link = await sb.files.stat("/workspace/link")
        assert link.is_symlink and link.target == "/etc/hostname"
        await sb.files.move("/workspace/a/b/f.txt", "/workspace/g.txt")
        assert await sb.files.exists("/workspace/g.txt")
        assert not await sb.files.exists("/workspace/a/b/f.txt")
        # What the API wrote, the sandbox's programs see.
        assert (await sb.commands.run("cat /workspace/g.txt")).stdout == "data"
        await sb.files.remove("/workspace/g.txt")
        with pytest.raises(SandboxError):
            await sb.files.remove("/workspace/a")  # not empty
        await sb.files.remove("/workspace/a", recursive=True)
        with pytest.raises(NotFoundError):
            await sb.files.list("/workspace/a")
        with pytest.raises(PermissionDeniedError) as e:
            await sb.files.write("../../etc/passwd", "x")
        assert (e.value.status, e.value.code) == (403, "read_only")


# ---- code interpreter ----------------------------------------------------------------------


async def test_code_cells_keep_state_and_return_rich_results(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(**conn) as sb:
        r = await sb.code.run("x = 5\nprint('set', x)")
        assert (r.ok, r.stdout, r.results, r.execution_count) == (True, "set 5\n", [], 1)
        r = await sb.code.run("x * 2")
        assert r.text == "10" and r.execution_count == 2
        assert r.main_result is not None and r.main_result.is_main_result

        r = await sb.code.run(
            "class Card:\n"
            "    def _repr_html_(self): return '<b>card</b>'\n"
            "    def _repr_json_(self): return {'k': [1, 2]}\n"
            "display('shown')\n"
            "Card()"
        )
        shown, card = r.results
        assert (shown.is_main_result, shown.text) == (False, "'shown'")
        assert card.is_main_result and card.html == "<b>card</b>" and card.json == {"k": [1, 2]}
        assert {"text/html", "application/json", "text/plain"} <= set(card.formats())

        # env= holds for that one cell.
        r = await sb.code.run("import os; os.environ.get('CELL_ONLY')", env={"CELL_ONLY": "yes"})
        assert r.text == "'yes'", r
        r = await sb.code.run("os.environ.get('CELL_ONLY') is None")
        assert r.text == "True", r


async def test_matplotlib_chart_comes_back_as_png(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(**conn) as sb:
        r = await sb.code.run(
            "import matplotlib.pyplot as plt\n"
            "fig = plt.figure(figsize=(4, 3), dpi=50)\n"
            "plt.plot([1, 2, 3], [1, 4, 9])\n"
            "plt.show()",
            timeout=60,
        )
        assert r.ok, f"{r.error} (sandboxes see the host's /usr: is python3-matplotlib installed?)"
        pngs = [b.png for b in r.results if "image/png" in b]
        assert len(pngs) == 1, r.results
        png = pngs[0]
        assert png is not None and png.startswith(PNG_MAGIC)
        width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
        assert (width, height) == (200, 150)


async def test_exception_cell(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(**conn) as sb:
        r = await sb.code.run("y = 1\nprint('before')\n1 / 0")
        assert not r.ok and r.error is not None
        assert (r.error.name, r.error.value) == ("ZeroDivisionError", "division by zero")
        assert any("1 / 0" in line for line in r.error.traceback)
        assert r.stdout == "before\n" and r.results == [] and str(r.error) == "ZeroDivisionError: division by zero"
        # The context lives on.
        assert (await sb.code.run("y + 1")).text == "2"
        r = await sb.code.run("import time\ntime.sleep(30)", timeout=1)
        assert r.error is not None and r.error.name == "KeyboardInterrupt" and not r.state_lost
        assert (await sb.code.run("y")).text == "1"


async def test_streamed_cell(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(**conn) as sb:
        seen: List[Tuple[str, Any, float]] = []

        async def on_stdout(s: str) -> None:
            seen.append(("stdout", s, time.monotonic()))

        r = await sb.code.run(
            "import sys, time\n"
            "for i in range(3):\n"
            "    print(f'line {i}', flush=True)\n"
            "    time.sleep(0.3)\n"
            "print('warn', file=sys.stderr)\n"
            "display(41)\n"
            "42",
            on_stdout=on_stdout,
            on_stderr=lambda s: seen.append(("stderr", s, time.monotonic())),
            on_result=lambda b: seen.append(("result", b, time.monotonic())),
        )
        done = time.monotonic()
        assert [(k, v) for k, v, _ in seen if k != "result"] == [
            ("stdout", "line 0\n"),
            ("stdout", "line 1\n"),
            ("stdout", "line 2\n"),
            ("stderr", "warn\n"),
        ]
        results = [v for k, v, _ in seen if k == "result"]
        assert all(isinstance(b, MimeBundle) for b in results)
        assert [(b.text, b.is_main_result) for b in results] == [("41", False), ("42", True)]
        assert done - seen[0][2] >= 0.5, "the first line came only with the end of the cell"
        # Text split inside a character reaches the callback whole.
        pieces: List[str] = []
        r2 = await sb.code.run(
            "import os\nos.write(1, 'caf\u00e9'.encode()[:4]); time.sleep(0.3); os.write(1, '\u00e9!'.encode()[1:])",
            on_stdout=pieces.append,
        )
        assert "".join(pieces) == r2.stdout == "café!" and all(pieces), pieces
        # The returned result is the whole cell, as without streaming.
        assert (r.stdout, r.stderr, r.text, r.execution_count) == ("line 0\nline 1\nline 2\n", "warn\n", "42", 1)

        errors: List[CodeError] = []
        r = await sb.code.run("print('x')\nraise ValueError('bad')", on_error=errors.append)
        assert [e.name for e in errors] == ["ValueError"] and r.error == errors[0] and r.stdout == "x\n"


async def test_refused_cell_raises_streamed_or_not(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(**conn) as sb:
        for stream in (None, print):
            with pytest.raises(BadRequestError) as e:
                await sb.code.run("1", language="cobol", on_stdout=stream)
            assert e.value.code == "invalid_request" and "cobol" in e.value.message
            with pytest.raises(BadRequestError):
                await sb.code.run("1", context="no/slash", on_stdout=stream)
        await sb.kill()
        with pytest.raises(NotFoundError):
            await sb.code.run("1", on_stdout=print)


async def test_contexts(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(**conn) as sb:
        assert await sb.code.list_contexts() == []
        ctx = await sb.code.create_context("python", "other")
        assert (ctx.language, ctx.name, ctx.execution_count, ctx.alive) == ("python", "other", 0, True)
        await sb.code.run("v = 'default'")
        await sb.code.run("v = 'other'", context="other")
        assert (await sb.code.run("v")).text == "'default'"
        assert (await sb.code.run("v", context="other")).text == "'other'"
        listed = {(c.language, c.name): c for c in await sb.code.list_contexts()}
        assert set(listed) == {("python", "default"), ("python", "other")}
        assert listed[("python", "other")].execution_count == 2 and listed[("python", "other")].alive

        await sb.code.restart_context("python", "other")
        r = await sb.code.run("v", context="other")
        assert r.error is not None and r.error.name == "NameError"
        assert (await sb.code.run("v")).text == "'default'"

        await sb.code.delete_context("python", "other")
        assert {c.name for c in await sb.code.list_contexts()} == {"default"}
        with pytest.raises(NotFoundError):
            await sb.code.restart_context("python", "other")

        # Other languages keep their state too.
        await sb.code.run("cd /tmp; N=41", language="bash")
        r = await sb.code.run("echo $((N + 1)) $PWD", language="bash")
        assert r.stdout == "42 /tmp\n"
        await sb.code.run("let n = 6", language="javascript")
        assert (await sb.code.run("n * 7", language="javascript")).text == "42"
        assert {c.language for c in await sb.code.list_contexts()} == {"python", "bash", "javascript"}


# ---- network policy ------------------------------------------------------------------------


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        body = b"hello from the host\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def loopback_site() -> Iterator[int]:
    """An HTTP server on the host's loopback; its port."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


async def test_network_policy_change(conn: Dict[str, Any], loopback_site: int) -> None:
    port = loopback_site
    fetch = f'curl -sSf --max-time 10 --noproxy "" --proxy "$HTTP_PROXY" http://127.0.0.1:{port}/'
    async with AsyncSandbox.create(**conn) as sb:
        net = await sb.network.get()
        assert (net.policy.allow, net.policy.hosts, net.events) == ([], {}, [])
        denied = await sb.commands.run(fetch)
        assert denied.exit_code != 0 and "hello" not in denied.stdout

        policy = await sb.network.set([f"127.0.0.1:{port}"], hosts={"site.test": "127.0.0.1"})
        assert (policy.allow, policy.hosts) == ([f"127.0.0.1:{port}"], {"site.test": "127.0.0.1"})
        net = await sb.network.get()
        assert (net.policy.allow, net.policy.hosts) == ([f"127.0.0.1:{port}"], {"site.test": "127.0.0.1"})
        allowed = await sb.commands.run(fetch)
        assert allowed.ok and allowed.stdout == "hello from the host\n", allowed

        await sb.network.set([])
        assert (await sb.network.get()).policy.allow == []
        again = await sb.commands.run(fetch)
        assert again.exit_code != 0 and "hello" not in again.stdout

        events = (await sb.network.get()).events
        verdicts = [(e.host, e.port, e.verdict) for e in events]
        assert verdicts == [("127.0.0.1", port, "deny"), ("127.0.0.1", port, "allow"), ("127.0.0.1", port, "deny")]
        assert events[0].reason and events[1].bytes > 0

        with pytest.raises(BadRequestError):
            await sb.network.set(["not a host!"])
        assert (await sb.network.get()).policy.allow == []


# ---- errors --------------------------------------------------------------------------------


async def test_errors_are_typed(server: Server, conn: Dict[str, Any]) -> None:
    with pytest.raises(AuthenticationError) as e:
        await AsyncSandbox.list(base_url=server.url, api_key="cdn_wrong")
    assert (e.value.status, e.value.code) == (401, "unauthorized")
    with pytest.raises(AuthenticationError):
        async with AsyncSandbox.create(base_url=server.url, api_key="cdn_wrong"):
            pass
    with pytest.raises(NotFoundError) as nf:
        await AsyncSandbox.connect("nonode-0000000000000000", **conn)
    assert (nf.value.status, nf.value.code) == (404, "not_found") and nf.value.message
    with pytest.raises(BadRequestError) as bad:
        await AsyncSandbox.create(memory="lots", **conn)
    assert (bad.value.status, bad.value.code) == (400, "invalid_request") and "memory" in bad.value.message
    # Ids are one path segment each: "../" cannot reach another route.
    with pytest.raises(NotFoundError):
        await AsyncSandbox.connect("../sandboxes", **conn)
    sb = await AsyncSandbox.create(**conn)
    with pytest.raises(NotFoundError):
        await sb.commands.connect("../../../sandboxes")
    with pytest.raises((NotFoundError, BadRequestError)):
        await sb.code.restart_context("python", "../../contexts")
    with pytest.raises(ValueError):
        await sb.commands.connect("")
    await sb.kill()
    with pytest.raises(NotFoundError):
        await sb.commands.run("true", on_stdout=print)
    with pytest.raises(NotFoundError):
        await sb.files.read("x")
    with pytest.raises(NotFoundError):
        await sb.network.get()
    await sb.close()


# ---- the whole API -------------------------------------------------------------------------

# Routes that are not the SDK's: the MCP endpoint, health, metrics and the document itself.
NOT_SDK = re.compile(r"^/(mcp|healthz|metrics|openapi\.json)(/|$)")


def _route_of(path: str, templates: Dict[str, "re.Pattern[str]"]) -> str:
    for template, pattern in templates.items():
        if pattern.fullmatch(path):
            return template
    return path


async def test_every_documented_route_is_reached(
    server: Server, conn: Dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One pass through every method of the client; every operation of the server's OpenAPI
    document must be among the requests it made."""
    doc = httpx.get(server.url + "/openapi.json", timeout=10).json()
    # The E2B door (tag "e2b") is for E2B's own SDKs: clients/e2b-e2e walks it with them.
    documented: Set[Tuple[str, str]] = {
        (method.upper(), path)
        for path, ops in doc["paths"].items()
        if not NOT_SDK.match(path)
        for method, op in ops.items()
        if method in ("get", "put", "post", "delete", "patch") and "e2b" not in op.get("tags", [])
    }
    templates = {p: re.compile(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(p))) for p in doc["paths"]}
    sent: Set[Tuple[str, str]] = set()
    real_send = httpx.AsyncClient.send

    async def send(self: httpx.AsyncClient, request: httpx.Request, **kw: Any) -> httpx.Response:
        sent.add((request.method, _route_of(request.url.path, templates)))
        return await real_send(self, request, **kw)

    monkeypatch.setattr(httpx.AsyncClient, "send", send)

    tag = uuid.uuid4().hex
    await AsyncSandbox.run("true", **conn)
    async with AsyncSandbox.create(metadata={"walk": tag}, **conn) as sb:
        assert [s.id for s in await AsyncSandbox.list(metadata={"walk": tag}, **conn)] == [sb.id]
        await sb.info()
        await sb.set_ttl(600)
        await sb.commands.run("true")
        await sb.commands.run("echo", on_stdout=lambda s: None)
        assert [c.cmd for c in await sb.commands.log()][:1] == [["/bin/sh", "-c", "true"]]
        assert (await sb.metrics()).processes >= 1
        assert (await sb.metrics_history()).source in ("cgroup", "none")
        assert all(u.mem_total > 0 for u in await AsyncSandbox.usage(**conn))
        assert any(p.pid == 1 for p in (await sb.processes()).processes)
        with pytest.raises(ConflictError):
            await sb.commit("walk-commit:1")  # a sandbox made without an image
        with pytest.raises(ConflictError):
            await sb.learned_profile()
        h = await sb.commands.run("cat", background=True)
        await sb.commands.list()
        await h.info()
        await h.send_stdin("x", close=True)
        await h.signal("TERM")
        await h.wait(10)
        await sb.files.write("f", "1")
        await sb.files.read("f")
        await sb.files.list()
        await sb.files.stat("f")
        await sb.files.mkdir("d")
        await sb.files.move("f", "d/f")
        await sb.files.remove("d", recursive=True)
        await sb.code.create_context("bash", "walk")
        await sb.code.run("true", language="bash", context="walk")
        await sb.code.run("true", language="bash", context="walk", on_stdout=lambda s: None)
        await sb.code.list_contexts()
        await sb.code.restart_context("bash", "walk")
        await sb.code.delete_context("bash", "walk")
        await sb.network.set([])
        await sb.network.get()
        await sb.pause()
        await sb.resume()
        snap = await sb.snapshot(f"walk-{tag[:12]}")
        forked = await sb.fork(1)
        for f in forked.sandboxes:
            await (await AsyncSandbox.connect(f.id, **conn)).kill()
    assert snap.name in [x.name for x in await AsyncSandbox.list_snapshots(**conn)]
    assert await AsyncSandbox.delete_snapshot(snap.name, **conn)
    vol = await AsyncSandbox.create_volume(f"walk-{tag[:12]}", "16M", **conn)
    assert vol.name in [v.name for v in await AsyncSandbox.list_volumes(**conn)]
    assert (await AsyncSandbox.get_volume(vol.name, **conn)).size_bytes == 16 << 20
    assert await AsyncSandbox.delete_volume(vol.name, **conn)
    sec = await AsyncSandbox.create_secret(f"walk-{tag[:12]}", "v1", **conn)
    assert (await AsyncSandbox.update_secret(sec.name, "v2", **conn)).version == 2
    assert (await AsyncSandbox.get_secret(sec.id, **conn)).name == sec.name
    assert sec.name in [x.name for x in await AsyncSandbox.list_secrets(**conn)]
    assert await AsyncSandbox.delete_secret(sec.name, **conn)
    await AsyncSandbox.list_images(**conn)
    with pytest.raises(BadRequestError):
        await AsyncSandbox.pull_image("Not A Reference!", **conn)
    assert (await AsyncSandbox.audit(tag, **conn)).chain.intact
    # The server's first key is its admin key: it sees the gateways registered with it (none
    # here), and a call no gateway holds is not found.
    assert (await AsyncSandbox.gateway_approvals(**conn)).gateways == []
    with pytest.raises(NotFoundError):
        await AsyncSandbox.answer_approval("call-00", False, reason="walk", **conn)
    made = await AsyncSandbox.create_key(f"walk-{tag[:12]}", max_sandboxes=1, **conn)
    assert made.secret.startswith("cdn_") and not made.key.admin
    assert made.key.id in [k.id for k in await AsyncSandbox.list_keys(**conn)]
    assert await AsyncSandbox.revoke_key(made.key.id, **conn)
    assert (await AsyncSandbox.host_enforcement(**conn)).mode in ("full", "no_namespaces", "none")
    await AsyncSandbox.run_many([{"cmd": ["true"]}], **conn)
    missing = sorted(documented - sent)
    assert not missing, f"documented operations the client never calls: {missing}"


# ---- learn mode ----------------------------------------------------------------------------


async def test_a_learning_sandbox_hands_out_the_profile_its_commands_needed(conn: Dict[str, Any]) -> None:
    sb = await AsyncSandbox.create(learn=True, ttl="5m", **conn)
    try:
        assert (await sb.commands.run(["python3", "-c", "print(6 * 7)"])).stdout == "42\n"
        learned = await sb.learned_profile()
        assert (learned.sandbox_id, learned.ended, learned.commands) == (sb.id, False, 1)
        assert 'extends = "default"' in learned.toml
        assert "/usr/bin/python3" in learned.profile["exec"]["allow"], learned.toml
        assert "/usr/bin/id" not in learned.toml
        await sb.commands.run(["/usr/bin/id", "-u"])
    finally:
        await sb.kill()
    # After the end: what it used in all, still there.
    learned = await sb.learned_profile()
    assert learned.ended and learned.commands == 2
    assert "/usr/bin/id" in learned.profile["exec"]["allow"], learned.toml
    await sb.close()


async def test_a_programs_allowlist_given_on_create_refuses_other_programs(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(exec_allow=["/usr/bin/python3"], ttl="5m", **conn) as sb:
        assert (await sb.commands.run(["python3", "-c", "print(1)"])).stdout == "1\n"
        refused = await sb.commands.run(["/bin/sh", "-c", "echo escaped"])
        assert refused.exit_code == 126 and "escaped" not in refused.stdout
    with pytest.raises(TypeError):
        AsyncSandbox.create(exec_allow="/usr/bin/python3", **conn)  # type: ignore[arg-type]


# ---- stored secrets ------------------------------------------------------------------------


async def test_stored_secrets_are_write_only_paged_and_given_to_sandboxes_as_placeholders(
    conn: Dict[str, Any],
) -> None:
    tag = uuid.uuid4().hex[:10]
    value = "sk-sdk-" + uuid.uuid4().hex
    made = [await AsyncSandbox.create_secret(f"s{tag}-{i}", value, {"i": str(i)}, **conn) for i in range(3)]
    try:
        assert all(m.version == 1 and value not in repr(m.raw) for m in made)
        with pytest.raises(ConflictError):
            await AsyncSandbox.create_secret(made[0].name, value, **conn)
        with pytest.raises(BadRequestError) as e:
            await AsyncSandbox.create_secret(f"s{tag}-bad", "two\nlines", **conn)
        assert "two" not in str(e.value)
        listed = [x.name for x in await AsyncSandbox.list_secrets(**conn)]
        assert [m.name for m in made] == [n for n in listed if n.startswith(f"s{tag}-")]
        upd = await AsyncSandbox.update_secret(made[0].name, value + "x", {"k": "v"}, **conn)
        assert (upd.version, upd.metadata) == (2, {"k": "v"})
        # Given to a sandbox: the variable holds a placeholder; the value is nowhere inside.
        secrets = [{"name": made[0].name, "env": "TOKEN", "hosts": ["api.example.test"]}]
        async with AsyncSandbox.create(secrets=secrets, network=["api.example.test"], **conn) as sb:
            out = (await sb.commands.run("echo $TOKEN; env; cat /proc/*/environ 2>/dev/null")).stdout
            assert out.startswith("cordon-secret:v1:") and value not in out
        # A secret the key does not have, or a host the allowlist does not allow: refused.
        with pytest.raises(BadRequestError):
            await AsyncSandbox.create(secrets=[{"name": f"none-{tag}", "hosts": ["a.test"]}], network=["a.test"], **conn)
        with pytest.raises(BadRequestError):
            await AsyncSandbox.create(secrets=secrets, **conn)
    finally:
        for m in made:
            await AsyncSandbox.delete_secret(m.id, **conn)
    assert not await AsyncSandbox.delete_secret(made[0].name, **conn)
    with pytest.raises(NotFoundError):
        await AsyncSandbox.get_secret(made[0].name, **conn)


# ---- images --------------------------------------------------------------------------------


async def test_pull_list_and_run_from_an_image(conn: Dict[str, Any], registry_image: RegistryImage) -> None:
    events: List[Dict[str, Any]] = []
    pulled = await AsyncSandbox.pull_image(registry_image.reference, on_progress=events.append, **conn)
    assert pulled.reference == registry_image.reference
    assert pulled.image.digest == registry_image.digest and pulled.image.layers >= 1
    kinds = [e.get("event") for e in events]
    assert kinds[0] == "resolved" and ("layer_done" in kinds or "layer_cached" in kinds), kinds
    # Again, without progress: the same image, nothing fetched.
    again = await AsyncSandbox.pull_image(registry_image.reference, **conn)
    assert again.image.digest == registry_image.digest
    listed = await AsyncSandbox.list_images(**conn)
    assert registry_image.digest in [i.digest for i in listed]
    assert registry_image.reference in next(i.names for i in listed if i.digest == registry_image.digest)
    sb = await AsyncSandbox.create(image=registry_image.reference, **conn)
    try:
        out = await sb.commands.run("cat /etc/greeting; echo $FROM_IMAGE")
        assert out.stdout == "hello from the image\nyes\n", out
    finally:
        await sb.kill()
        await sb.close()
    outcome = await AsyncSandbox.run(["/bin/sh", "-c", "cat /etc/greeting"], image=registry_image.reference, **conn)
    assert outcome.stdout == "hello from the image\n" and outcome.image is not None
    assert outcome.image.digest == registry_image.digest
    with pytest.raises(BadRequestError):
        await AsyncSandbox.pull_image("Not A Reference!", **conn)


async def test_pause_refuses_commands_until_resumed(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(**conn) as sb:
        await sb.commands.run("echo 1 > /tmp/n")
        info = await sb.pause()
        assert info.state == "paused", info
        with pytest.raises(SandboxError) as e:
            await sb.commands.run("true")
        assert e.value.status == 409, e.value
        info = await sb.resume()
        assert info.state == "running", info
        assert (await sb.commands.run("cat /tmp/n")).stdout == "1\n"
