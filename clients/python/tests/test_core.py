"""Unit tests of the pieces that need no server: SSE parsing, decoding, error mapping, units,
model parsing, and the generator of the sync client."""

from __future__ import annotations

import base64
import datetime
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Dict, Optional

import httpx
import pytest

from cordon_sdk import (
    AuthenticationError,
    BadRequestError,
    CodeResult,
    ConflictError,
    CordonError,
    InsufficientStorageError,
    NetworkInfo,
    NotFoundError,
    Outcome,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    SandboxError,
    ServerError,
    _core,
)

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "unasync.py"


def test_sse_parser() -> None:
    p = _core.SseParser()
    lines = ["event: stdout", 'data: {"data": "a"}', "", ": keep-alive", "", "data: x", "data: y", "", "event: exit"]
    events = [e for e in (p.feed(line) for line in lines) if e is not None]
    assert [(e.event, e.data) for e in events] == [("stdout", '{"data": "a"}'), ("message", "x\ny")]
    last = p.finish()
    assert last is not None and last.event == "exit" and last.data == ""


def test_stream_decoder_joins_split_utf8() -> None:
    d = _core.StreamDecoder()
    raw = "é".encode()
    a = d.chunk({"data": "\ufffd", "b64": base64.b64encode(b"caf" + raw[:1]).decode()})
    b = d.chunk({"data": "\ufffd!", "b64": base64.b64encode(raw[1:] + b"!").decode()})
    assert a + b + d.flush() == "café!"
    d2 = _core.StreamDecoder()
    assert d2.chunk({"data": "plain"}) == "plain"


def _resp(status: int, body: object = None, text: str = "", headers: Optional[Dict[str, str]] = None) -> httpx.Response:
    req = httpx.Request("GET", "http://127.0.0.1/x")
    if body is not None:
        return httpx.Response(status, json=body, headers=headers, request=req)
    return httpx.Response(status, text=text, headers=headers, request=req)


def test_error_mapping() -> None:
    e = _core.error_from_response(_resp(401, {"error": {"code": "unauthorized", "message": "bad key"}}))
    assert isinstance(e, AuthenticationError) and (e.status, e.code, e.message) == (401, "unauthorized", "bad key")
    e = _core.error_from_response(_resp(404, {"error": {"code": "not_found", "message": "no sandbox"}}))
    assert isinstance(e, NotFoundError)
    e = _core.error_from_response(
        _resp(429, {"error": {"code": "rate_limited", "message": "slow"}}, headers={"Retry-After": "2"})
    )
    assert isinstance(e, RateLimitError) and e.retry_after == 2.0
    e = _core.error_from_response(_resp(507, {"error": {"code": "no_space", "message": "full"}}))
    assert isinstance(e, InsufficientStorageError) and e.status == 507 and e.code == "no_space"
    e = _core.error_from_response(_resp(413, text="length limit exceeded"))
    assert isinstance(e, PayloadTooLargeError) and e.code == "http_413" and "length limit" in e.message
    assert isinstance(e, SandboxError) and isinstance(e, CordonError) and "413" in str(e)
    for status, cls in [(400, BadRequestError), (403, PermissionDeniedError), (409, ConflictError), (502, ServerError)]:
        e = _core.error_from_response(_resp(status, {"error": {"code": "c", "message": "m"}}))
        assert type(e) is cls and isinstance(e, SandboxError) and (e.code, e.message, e.status) == ("c", "m", status)
    e = _core.error_from_response(_resp(418, {"error": {"code": "teapot", "message": "m"}}))
    assert type(e) is SandboxError


def test_refused_cell_is_told_from_a_cell_error() -> None:
    why = "language: 'cobol' is not one of python, javascript, bash"
    refused = {"stdout": "", "results": [], "execution_count": 0, "error": {
        "name": "invalid_request", "value": why, "traceback": []}}
    e = _core.refused_cell(refused, saw_events=False)
    assert isinstance(e, BadRequestError) and (e.code, e.status) == ("invalid_request", 400) and "cobol" in e.message
    failed = {"name": "kernel_failed", "value": "no python3", "traceback": []}
    e = _core.refused_cell({**refused, "error": failed}, False)
    assert isinstance(e, ConflictError) and e.status == 409
    # What a cell raised, or a kernel that died, is the cell's result, not a refusal.
    assert _core.refused_cell(refused, saw_events=True) is None
    died = {"execution_count": 0, "error": {"name": "KernelDied", "value": "killed", "traceback": []}}
    assert _core.refused_cell(died, False) is None
    raised = {"execution_count": 3, "error": {"name": "my_error", "value": "", "traceback": ["Traceback ..."]}}
    assert _core.refused_cell(raised, False) is None
    assert _core.refused_cell({"execution_count": 1, "error": None}, False) is None


def test_units() -> None:
    assert _core.duration_json(1.5, "t") == 1.5
    assert _core.duration_json("30s", "t") == "30s"
    assert _core.duration_json(datetime.timedelta(minutes=2), "t") == 120.0
    with pytest.raises(ValueError):
        _core.duration_json(0, "t")
    assert _core.duration_seconds("500ms") == 0.5
    assert _core.duration_seconds("2m") == 120.0
    assert _core.duration_seconds("soon") is None
    assert _core.duration_query(1.5) == "1500ms"
    t = _core.exec_timeout(httpx.Timeout(60.0), "5m")
    assert t.read == 330.0
    assert _core.exec_timeout(httpx.Timeout(60.0), 1).read == 60.0


def test_bodies() -> None:
    b = _core.create_body("default", "256M", 0.5, 32, 1 << 20, "10m", {"A": 1}, {"k": "v"}, ["pypi.org"])
    assert b == {
        "profile": "default", "memory": "256M", "cpus": 0.5, "pids": 32, "disk": 1048576, "ttl": "10m",
        "env": {"A": "1"}, "metadata": {"k": "v"}, "network": {"allow": ["pypi.org"]},
    }
    assert _core.create_body(None, None, None, None, None, None, None, None, None) == {}
    b = _core.create_body(None, None, None, None, None, None, None, None, None, output_limit="10K", cpu_time=1.5)
    assert b == {"output_limit": "10K", "cpu_time": 1.5}
    e = _core.exec_body(["ls", "-l"], "/tmp", None, b"in", 5, False)
    assert e == {"cmd": ["ls", "-l"], "cwd": "/tmp", "stdin": "in", "timeout": 5}
    with pytest.raises(ValueError):
        _core.exec_body([], None, None, None, None, False)
    with pytest.raises(ValueError):
        _core.stdin_json(b"\xff")
    assert _core.signal_body("TERM") == {"signal": "TERM"} and _core.signal_body(9) == {"signal": 9}
    with pytest.raises(TypeError):
        _core.signal_body(True)
    assert _core.code_body("1", "python", None, None) == {"code": "1", "language": "python"}
    assert _core.network_body("pypi.org", None) == {"allow": ["pypi.org"], "hosts": {}}
    assert _core.metadata_params({"a": 1}) == {"metadata.a": "1"}


def test_outcome_parsing_keeps_unknown_fields() -> None:
    o = Outcome.from_dict({
        "status": "exited", "exit_code": 0, "signal": None, "error": None, "stdout": "a\ufffd",
        "stderr": "", "stdout_b64": base64.b64encode(b"a\xff").decode(), "stdout_truncated": False,
        "stderr_truncated": False, "usage": {"wall_ms": 3}, "enforcement": {"seccomp": True, "cgroup": "v2"},
        "network": [{"host": "h", "port": 443, "verdict": "deny", "reason": "r", "bytes": 0}], "new_field": 1,
    })
    assert o.ok and o.stdout_bytes == b"a\xff" and o.usage.wall_ms == 3
    assert o.enforcement.seccomp and o.enforcement.cgroup == "v2"
    assert o.network[0].verdict == "deny" and o.raw["new_field"] == 1


def test_outcome_limits_hit_defaults_to_empty() -> None:
    assert Outcome.from_dict({"status": "exited", "exit_code": 0}).limits_hit == []
    o = Outcome.from_dict({"status": "signaled", "signal": 9, "limits_hit": ["memory", "pids"]})
    assert o.limits_hit == ["memory", "pids"] and not o.ok


def test_code_result_parsing() -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
    r = CodeResult.from_dict({
        "stdout": "hi\n", "stderr": "", "execution_count": 4, "state_lost": False, "stdout_truncated": False,
        "stderr_truncated": False, "results_truncated": False, "error": None,
        "results": [
            {"text/plain": "<Figure>", "image/png": base64.b64encode(png).decode(), "is_main_result": False},
            {"text/plain": "42", "application/json": {"a": 1}, "is_main_result": True},
        ],
    })
    fig, main = r.results
    assert fig.png == png and fig.formats() == ["image/png", "text/plain"] and "image/png" in fig
    assert fig.html is None and fig.jpeg is None and not fig.is_main_result
    assert r.main_result is main and r.text == "42" and main.json == {"a": 1} and r.ok
    r = CodeResult.from_dict({"error": {"name": "NameError", "value": "x", "traceback": ["a", "b"]}, "results": "bad"})
    assert r.error is not None and str(r.error) == "NameError: x" and r.results == [] and r.text is None


def test_network_info_parsing() -> None:
    n = NetworkInfo.from_dict({
        "policy": {"allow": ["pypi.org"], "hosts": {"a.test": "10.0.0.1"}},
        "events": [{"time_ms": 1, "host": "h", "port": 443, "verdict": "deny", "reason": "r", "bytes": 0}],
    })
    assert n.policy.allow == ["pypi.org"] and n.policy.hosts == {"a.test": "10.0.0.1"}
    assert [(e.host, e.port, e.verdict) for e in n.events] == [("h", 443, "deny")]


# ---- the generator of the sync client ----------------------------------------------------


def _unasync() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_unasync_rewrites() -> None:
    u = _unasync()
    cases = {
        "    async def run(self) -> AsyncCommandHandle:\n": ["    def run(self) -> CommandHandle:\n"],
        "        r = await self._http.request(x)\n": ["        r = self._http.request(x)\n"],
        "        async with httpx.AsyncClient() as c:\n": ["        with httpx.Client() as c:\n"],
        "            async for line in resp.aiter_lines():\n": ["            for line in resp.iter_lines():\n"],
        "    async def __aexit__(self) -> None:\n": ["    def __exit__(self) -> None:\n"],
        "    http = _AsyncHttp(base_url)\n": ["    http = _Http(base_url)\n"],
        "import asyncio  # async-only\n": [],
        "    return _core.Creating(x)  # sync: return x\n": ["    return x\n"],
        "    awaitable = Asynchronous  # untouched words\n": ["    awaitable = Asynchronous  # untouched words\n"],
    }
    for line, want in cases.items():
        assert u.unasync_line(line) == want, line


def test_sync_files_are_generated_from_the_async_ones() -> None:
    """The check CI runs (scripts/unasync.py --check), so a plain pytest run catches drift too."""
    u = _unasync()
    root = SCRIPT.parents[1]
    for src, dst in u.FILES:
        want = u.unasync_text((root / src).read_text(encoding="utf-8"), Path(src).name)
        assert (root / dst).read_text(encoding="utf-8") == want, (
            f"{dst} differs from what scripts/unasync.py makes of {src}: run the script"
        )
