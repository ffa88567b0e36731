"""Unit tests of the pieces that need no server: SSE parsing, decoding, error mapping, units."""

from __future__ import annotations

import base64
import datetime
from typing import Dict, Optional

import httpx
import pytest

from cordon_sdk import (
    AuthenticationError,
    CordonError,
    NotFoundError,
    Outcome,
    RateLimitError,
    SandboxError,
    _core,
)


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
    assert isinstance(e, SandboxError) and e.status == 507 and e.code == "no_space"
    e = _core.error_from_response(_resp(413, text="length limit exceeded"))
    assert isinstance(e, SandboxError) and e.code == "http_413" and "length limit" in e.message
    assert isinstance(e, CordonError) and "413" in str(e)


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
    e = _core.exec_body(["ls", "-l"], "/tmp", None, b"in", 5, False)
    assert e == {"cmd": ["ls", "-l"], "cwd": "/tmp", "stdin": "in", "timeout": 5}
    with pytest.raises(ValueError):
        _core.exec_body([], None, None, None, None, False)
    with pytest.raises(ValueError):
        _core.stdin_json(b"\xff")


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
