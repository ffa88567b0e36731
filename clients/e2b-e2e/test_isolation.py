"""Isolation through the E2B door is the one of every door: attacks from inside through
`commands.run` and `run_code` fail, checked from outside; and hostile input on the new routes
gets the error shapes the SDK expects, never a crash."""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import uuid

import httpx
import pytest
from e2b import Sandbox



def test_host_files_are_out_of_reach(sbx, tmp_path):
    marker = tmp_path / f"host-{uuid.uuid4().hex}.txt"
    marker.write_text("host only")
    r = sbx.commands.run(
        f"cat {marker} 2>&1; echo rc=$?; echo pwned > /etc/cordon-e2b 2>&1; echo rc=$?; cat /etc/shadow 2>&1 | head -c 80; echo; echo rc=$?",
    )
    assert "host only" not in r.stdout
    assert not os.path.exists("/etc/cordon-e2b")
    assert "root:" not in r.stdout
    with pytest.raises(Exception):
        sbx.files.read(str(marker))
    with pytest.raises(Exception):
        sbx.files.read("/../../../../etc/shadow")


def test_host_secrets_stay_out(sbx, host_secret):
    from e2b_code_interpreter import Sandbox as CI

    r = sbx.commands.run("env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'")
    assert host_secret not in r.stdout
    assert "E2B_API_KEY" not in r.stdout and "cdn_" not in r.stdout
    ci = CI.connect(sbx.sandbox_id)
    ex = ci.run_code("import os; sorted(os.environ)")
    assert "CORDON_E2B_TEST_SECRET" not in ex.text


def test_host_network_is_out_of_reach(sbx):
    # A listener on the host's loopback: the sandbox's loopback is its own.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    hits = []

    def accept():
        try:
            c, _ = srv.accept()
            hits.append(c)
        except OSError:
            pass

    t = threading.Thread(target=accept)
    t.start()
    try:
        r = sbx.commands.run(
            f"python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', {port}), 2); print('connected')\" 2>&1; echo rc=$?",
            timeout=30,
        )
        assert "connected" not in r.stdout
    finally:
        t.join()
        srv.close()
    assert hits == []


def test_other_sandboxes_files_are_out_of_reach(sbx):
    other = Sandbox.create(timeout=60)
    try:
        other.files.write("/home/user/private.txt", "theirs")
        other.commands.run("echo theirs > /tmp/private.txt")
        r = sbx.commands.run(
            "cat /home/user/private.txt /tmp/private.txt 2>&1; ls /proc | grep -c '^[0-9]'",
        )
        assert "theirs" not in r.stdout
        # Its id and token do not open it from this sandbox's door either.
        with pytest.raises(Exception):
            Sandbox.connect(other.sandbox_id, api_key="cdn_wrong").files.read("/home/user/private.txt")
    finally:
        other.kill()


# ---- hostile input on the new routes ----


def _headers(s: Sandbox, token: str | None = "") -> dict:
    h = {"E2b-Sandbox-Id": s.sandbox_id, "E2b-Sandbox-Port": "49983"}
    tok = s._envd_access_token if token == "" else token
    if tok is not None:
        h["X-Access-Token"] = tok
    return h


def _env(data: bytes, flags: int = 0) -> bytes:
    return struct.pack(">BI", flags, len(data)) + data


def _end_error(body: bytes) -> dict:
    """The error of a Connect server stream's end envelope."""
    assert len(body) >= 5
    flags, n = struct.unpack(">BI", body[:5])
    while not flags & 2:
        body = body[5 + n :]
        flags, n = struct.unpack(">BI", body[:5])
    return json.loads(body[5 : 5 + n]).get("error", {})


def test_tokens_are_required_and_checked(server, sbx):
    url = server.url
    with httpx.Client() as c:
        for h in (_headers(sbx, None), _headers(sbx, "wrong-token")):
            r = c.post(f"{url}/process.Process/List", headers={**h, "Content-Type": "application/json"}, content=b"{}")
            assert r.status_code == 401 and r.json()["code"] == "unauthenticated", r.text
            r = c.get(f"{url}/files", params={"path": "/etc/hostname"}, headers=h)
            assert r.status_code == 401 and r.json()["code"] == 401, r.text
            r = c.post(f"{url}/execute", headers=h, json={"code": "1"})
            assert r.status_code == 401, r.text
            r = c.get(f"{url}/contexts", headers=h)
            assert r.status_code == 401, r.text
        # No sandbox named: refused; an unknown one: E2B's "not found" (502).
        r = c.post(f"{url}/process.Process/List", headers={"Content-Type": "application/json"}, content=b"{}")
        assert r.status_code == 400 and r.json()["code"] == "invalid_argument"
        r = c.get(f"{url}/health", headers={"E2b-Sandbox-Id": "nope", "X-Access-Token": "x"})
        assert r.status_code == 502 and "was not found" in r.json()["message"]
        # Control plane: no key, wrong key.
        r = c.post(f"{url}/v2/sandboxes", json={})
        assert r.status_code == 401 and r.json()["code"] == 401
        r = c.get(f"{url}/v2/sandboxes", headers={"X-API-KEY": "cdn_bad"})
        assert r.status_code == 401 and isinstance(r.json()["message"], str)


def test_malformed_connect_requests(server, sbx):
    url = server.url
    h = _headers(sbx)
    stream = {**h, "Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"}
    unary = {**h, "Content-Type": "application/json", "Connect-Protocol-Version": "1"}
    with httpx.Client() as c:
        cases = [
            b"",  # no envelope
            b"\x00\x00\x00",  # a torn header
            _env(b"{not json"),  # not JSON
            _env(b'{"process": {"cmd": "/bin/true"}}')[:-3],  # a torn message
            _env(b"{}", flags=1),  # "compressed"
            _env(b"{}", flags=2),  # an end envelope as the request
            struct.pack(">BI", 0, 0xFFFFFFF0) + b"{}",  # oversized length
        ]
        for body in cases:
            r = c.post(f"{url}/process.Process/Start", headers=stream, content=body)
            assert r.status_code == 200, (body, r.text)
            err = _end_error(r.content)
            assert err.get("code") in ("invalid_argument", "resource_exhausted", "internal"), (body, err)
        # Unknown RPCs, a streaming call sent unary, a foreign codec.
        r = c.post(f"{url}/process.Process/Explode", headers=unary, content=b"{}")
        assert r.status_code == 501 and r.json()["code"] == "unimplemented"
        r = c.post(f"{url}/filesystem.Filesystem/Format", headers=unary, content=b"{}")
        assert r.status_code == 501 and r.json()["code"] == "unimplemented"
        r = c.post(f"{url}/process.Process/Start", headers=unary, content=b"{}")
        assert r.status_code == 400 and r.json()["code"] == "invalid_argument"
        r = c.post(f"{url}/process.Process/List", headers={**h, "Content-Type": "application/proto"}, content=b"\x00")
        assert r.status_code == 501 and r.json()["code"] == "unimplemented"
        r = c.post(f"{url}/filesystem.Filesystem/Stat", headers=unary, content=b"[1,2")
        assert r.status_code == 400 and r.json()["code"] == "invalid_argument"
        r = c.post(f"{url}/filesystem.Filesystem/Stat", headers=unary, content=b"x" * (9 << 20))
        assert r.status_code in (413, 429), r.status_code
        # The plain-HTTP routes: missing path, a bad multipart body.
        r = c.get(f"{url}/files", headers=h)
        assert r.status_code == 400 and r.json()["code"] == 400
        r = c.post(
            f"{url}/files",
            headers={**h, "Content-Type": "multipart/form-data; boundary=zzz"},
            content=b"--zzz\r\nbroken",
        )
        assert r.status_code == 400 and r.json()["code"] == 400
        r = c.post(f"{url}/execute", headers=h, content=b"{oops")
        assert r.status_code == 400
    # After all that the sandbox and the server still work.
    assert sbx.commands.run("echo ok").stdout == "ok\n"


def test_quiet_streams_get_keepalives_and_clients_may_leave(server, sbx):
    """A command that prints nothing for a while still gets `keepalive` events at the interval
    the client asked for; a client that leaves mid-stream leaves the command running."""
    h = {**_headers(sbx), "Content-Type": "application/connect+json", "Keepalive-Ping-Interval": "1"}
    req = json.dumps({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "sleep 2.5; echo woke"]}}).encode()
    with httpx.Client(timeout=30) as c:
        r = c.post(f"{server.url}/process.Process/Start", headers=h, content=_env(req))
    body, events = r.content, []
    while body:
        flags, n = struct.unpack(">BI", body[:5])
        msg = json.loads(body[5 : 5 + n])
        body = body[5 + n :]
        if not flags & 2:
            events.append(next(iter(msg["event"])))
    assert events[0] == "start" and events[-1] == "end", events
    assert events.count("keepalive") >= 2, events
    assert "data" in events
    # Leave a stream early: the command goes on and can be joined again.
    with httpx.Client(timeout=30) as c:
        with c.stream("POST", f"{server.url}/process.Process/Start", headers=h,
                      content=_env(json.dumps({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "sleep 1; echo still-here"]}}).encode())) as s:
            first = next(s.iter_bytes())
    pid = json.loads(first[5:])["event"]["start"]["pid"]
    assert sbx.commands.connect(pid).wait().exit_code == 0
