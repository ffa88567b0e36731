"""PTYs through the E2B SDK as published: `sbx.pty.create/send_stdin/resize/kill/connect`, and
processes selected by tag (the SDK lists tags; starting and selecting by tag is envd's RPC,
sent here as the SDK's own protocol does)."""

from __future__ import annotations

import json
import struct
import threading
import time

import httpx
import pytest
from e2b import PtySize, Sandbox

from test_isolation import _env, _headers


class Term:
    """A PTY's output gathered by a thread that waits on its handle, as an app would."""

    def __init__(self, handle):
        self.handle = handle
        self.buf = bytearray()
        self.result = None
        self.error = None
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.result = self.handle.wait(on_pty=self._on)
        except Exception as e:  # the exit of a killed terminal is an exception
            self.error = e

    def _on(self, data: bytes):
        with self.lock:
            self.buf.extend(data)

    def text(self) -> str:
        with self.lock:
            return self.buf.decode(errors="replace")

    def expect(self, what: str, timeout: float = 20) -> str:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if what in self.text():
                return self.text()
            time.sleep(0.05)
        raise AssertionError(f"{what!r} not seen on the terminal: {self.text()!r}")

    def join(self, timeout: float = 20):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the terminal's stream did not end"


def test_pty_create_input_resize_exit(sbx: Sandbox):
    h = sbx.pty.create(PtySize(rows=24, cols=80), envs={"GREETING": "hi-from-env"}, cwd="/tmp")
    t = Term(h)
    sbx.pty.send_stdin(h.pid, b"echo $GREETING $(pwd) $(tty); stty size\n")
    out = t.expect("24 80")
    assert "hi-from-env /tmp /dev/pts/" in out, out
    sbx.pty.resize(h.pid, PtySize(rows=40, cols=120))
    sbx.pty.send_stdin(h.pid, b"stty size\n")
    t.expect("40 120")
    # The terminal is the shell's controlling one: ^C interrupts the foreground job only.
    sbx.pty.send_stdin(h.pid, b"sleep 30\n")
    time.sleep(0.5)
    sbx.pty.send_stdin(h.pid, b"\x03")
    sbx.pty.send_stdin(h.pid, b"echo after-$((40+2))\n")
    t.expect("after-42")
    sbx.pty.send_stdin(h.pid, b"exit 0\n")
    t.join()
    assert t.error is None, t.error
    assert t.result.exit_code == 0
    assert h.pid not in [p.pid for p in sbx.commands.list()]


def test_pty_kill_and_connect(sbx: Sandbox):
    h = sbx.pty.create(PtySize(rows=24, cols=80))
    assert h.pid in [p.pid for p in sbx.commands.list()]
    # Leave the stream, join again by pid: input and output go on.
    h.disconnect()
    c = sbx.pty.connect(h.pid)
    t = Term(c)
    sbx.pty.send_stdin(h.pid, b"echo again-$((6*7))\n")
    t.expect("again-42")
    assert sbx.pty.kill(h.pid) is True
    t.join()
    # A killed process ends with exit code -1, which the SDK raises.
    assert getattr(t.error, "exit_code", None) == -1, (t.error, t.result)
    assert h.pid not in [p.pid for p in sbx.commands.list()]
    # Nothing of it hurt the sandbox.
    assert sbx.commands.run("echo fine").stdout == "fine\n"


def test_pty_input_to_a_process_without_one_is_refused(sbx: Sandbox):
    cmd = sbx.commands.run("sleep 20", background=True, stdin=True)
    with pytest.raises(Exception) as e:
        sbx.pty.send_stdin(cmd.pid, b"x")
    assert "no PTY" in str(e.value)
    with pytest.raises(Exception) as e:
        sbx.pty.resize(cmd.pid, PtySize(rows=10, cols=10))
    assert "terminal" in str(e.value)
    cmd.kill()


def test_processes_by_tag(server, sbx: Sandbox):
    """`Start.tag`, the tag in `commands.list()`, and Connect/SendInput/SendSignal selecting
    the process by tag (envd's ProcessSelector)."""
    stream = {**_headers(sbx), "Content-Type": "application/connect+json"}
    unary = {**_headers(sbx), "Content-Type": "application/json"}
    req = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "read line; echo got-$line"]}, "stdin": True, "tag": "web"}
    with httpx.Client(timeout=30) as c:
        with c.stream("POST", f"{server.url}/process.Process/Start", headers=stream, content=_env(json.dumps(req).encode())) as s:
            first = next(s.iter_bytes())
        pid = json.loads(first[5:])["event"]["start"]["pid"]
        listed = {p.pid: p.tag for p in sbx.commands.list()}
        assert listed.get(pid) == "web", listed
        sel = {"process": {"tag": "web"}}
        with c.stream("POST", f"{server.url}/process.Process/Connect", headers=stream, content=_env(json.dumps(sel).encode())) as s:
            r = c.post(f"{server.url}/process.Process/SendInput", headers=unary,
                       content=json.dumps({**sel, "input": {"stdin": "dGFnZ2VkCg=="}}).encode())
            assert r.status_code == 200, r.text
            body = b"".join(s.iter_bytes())
        out, events = b"", []
        while body:
            flags, n = struct.unpack(">BI", body[:5])
            msg = json.loads(body[5 : 5 + n])
            body = body[5 + n :]
            if not flags & 2:
                ev = msg["event"]
                events.append(next(iter(ev)))
                if "data" in ev:
                    import base64
                    out += base64.b64decode(ev["data"].get("stdout", ""))
        assert events[0] == "start" and events[-1] == "end", events
        assert b"got-tagged" in out, out
        # An unknown tag is not found; a kill by tag reaches the tagged process.
        r = c.post(f"{server.url}/process.Process/SendSignal", headers=unary,
                   content=json.dumps({"process": {"tag": "nope"}, "signal": "SIGNAL_SIGKILL"}).encode())
        assert r.status_code == 404 and r.json()["code"] == "not_found", r.text
        with c.stream("POST", f"{server.url}/process.Process/Start", headers=stream,
                      content=_env(json.dumps({"process": {"cmd": "sleep", "args": ["30"]}, "tag": "sleeper"}).encode())) as s:
            first = next(s.iter_bytes())
        spid = json.loads(first[5:])["event"]["start"]["pid"]
        r = c.post(f"{server.url}/process.Process/SendSignal", headers=unary,
                   content=json.dumps({"process": {"tag": "sleeper"}, "signal": "SIGNAL_SIGKILL"}).encode())
        assert r.status_code == 200, r.text
    deadline = time.time() + 10
    while spid in [p.pid for p in sbx.commands.list()] and time.time() < deadline:
        time.sleep(0.1)
    assert spid not in [p.pid for p in sbx.commands.list()]
