"""The synchronous client against a real `cordon serve`: the details that need no async twin
(hostile paths, limits, keys, transport failures, output encodings). Every call of the API,
through both clients, is in test_client_async.py and its generated twin test_client_sync.py."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List

import pytest

from cordon_sdk import (
    AuthenticationError,
    CommandHandle,
    CordonConnectionError,
    CordonError,
    CordonTimeoutError,
    NotFoundError,
    RateLimitError,
    Sandbox,
    SandboxError,
)

from .conftest import Server, start_server

# ---- lifecycle -----------------------------------------------------------------------------


def test_create_info_list_kill(conn: Dict[str, Any]) -> None:
    tag = uuid.uuid4().hex
    a = Sandbox.create(memory="256M", ttl="5m", env={"GREETING": "hi"}, metadata={"suite": tag, "role": "a"}, **conn)
    b = Sandbox.create(metadata={"suite": tag, "role": "b"}, **conn)
    try:
        info = a.info()
        assert info.id == a.id
        assert info.state == "running" and info.running
        assert info.profile == "default"
        assert info.metadata == {"suite": tag, "role": "a"}
        assert info.limits is not None and info.limits.memory_bytes == 256 * 1024 * 1024
        assert info.enforcement is not None and info.enforcement.pid_ns
        assert 0 < info.expires_at - info.created_at <= 300
        assert a.commands.run("echo $GREETING").stdout == "hi\n"

        ids = {s.id for s in Sandbox.list(metadata={"suite": tag}, **conn)}
        assert ids == {a.id, b.id}
        only_a = Sandbox.list(metadata={"suite": tag, "role": "a"}, **conn)
        assert [s.id for s in only_a] == [a.id]
        assert Sandbox.list(metadata={"suite": tag, "role": "zzz"}, **conn) == []
        assert a.id in {s.id for s in Sandbox.list(**conn)}

        assert a.kill() is True
        assert a.kill() is False  # already gone
        gone = a.info()
        assert gone.state == "deleted" and gone.ended_reason
        assert {s.id for s in Sandbox.list(metadata={"suite": tag}, **conn)} == {b.id}
    finally:
        a.kill()
        b.kill()
        a.close()
        b.close()


def test_connect(sb: Sandbox, conn: Dict[str, Any]) -> None:
    sb.files.write("marker.txt", "from the first handle")
    other = Sandbox.connect(sb.id, **conn)
    try:
        assert other.commands.run(["cat", "marker.txt"]).stdout == "from the first handle"
    finally:
        other.close()
    with pytest.raises(NotFoundError) as e:
        Sandbox.connect("nonode-0000000000000000", **conn)
    assert e.value.status == 404 and e.value.code == "not_found"


def test_set_ttl_and_expiry(conn: Dict[str, Any]) -> None:
    with Sandbox.create(ttl=60, **conn) as sb:
        info = sb.set_ttl("30m")
        assert abs(info.expires_at - (time.time() + 1800)) < 10
        sb.set_ttl(1)
        deadline = time.monotonic() + 10
        while sb.info().state == "running" and time.monotonic() < deadline:
            time.sleep(0.2)
        info = sb.info()
        assert info.state == "expired", info
        with pytest.raises(NotFoundError):
            sb.commands.run("true")


def test_deleted_sandbox_raises_not_found(conn: Dict[str, Any]) -> None:
    sb = Sandbox.create(**conn)
    sb.kill()
    with pytest.raises(NotFoundError) as e:
        sb.commands.run("echo hi")
    assert e.value.status == 404 and e.value.code == "not_found" and sb.id in e.value.message
    with pytest.raises(NotFoundError):
        sb.commands.run("echo hi", on_stdout=print)
    with pytest.raises(NotFoundError):
        sb.commands.run("sleep 1", background=True)
    with pytest.raises(NotFoundError):
        sb.files.read("/workspace/x")
    with pytest.raises(NotFoundError):
        sb.files.write("/workspace/x", b"x")
    with pytest.raises(NotFoundError):
        sb.set_ttl("1m")
    with pytest.raises(NotFoundError):
        sb.commands.list()
    sb.close()


def test_env_defaults(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORDON_URL", server.url)
    monkeypatch.setenv("CORDON_API_KEY", server.api_key)
    with Sandbox.create() as sb:
        assert sb.commands.run("echo ok").stdout == "ok\n"
    monkeypatch.setenv("CORDON_API_KEY", "cdn_not-a-real-key")
    with pytest.raises(AuthenticationError):
        Sandbox.list()


# ---- commands ------------------------------------------------------------------------------


def test_run_exit_code_stdout_stderr(sb: Sandbox) -> None:
    o = sb.commands.run("echo out; echo err >&2; exit 3")
    assert o.status == "exited" and o.exit_code == 3 and not o.ok
    assert o.stdout == "out\n" and o.stderr == "err\n"
    assert not o.stdout_truncated and o.usage.wall_ms >= 0
    o = sb.commands.run(["echo", "a  b", "$HOME"])
    assert o.ok and o.stdout == "a  b $HOME\n"
    o = sb.commands.run(["/no/such/program"])
    assert o.status == "error" and o.error and "not found" in o.error


def test_run_stdin_env_cwd(sb: Sandbox) -> None:
    assert sb.commands.run("cat", stdin="hello\nworld").stdout == "hello\nworld"
    assert sb.commands.run(["wc", "-c"], stdin=b"12345").stdout.strip() == "5"
    o = sb.commands.run("echo $FOO-$BAR", env={"FOO": "foo", "BAR": "b a r"})
    assert o.stdout == "foo-b a r\n"
    assert sb.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    sb.files.mkdir("/workspace/sub/dir")
    assert sb.commands.run(["pwd"], cwd="/workspace/sub/dir").stdout == "/workspace/sub/dir\n"


def test_run_timeout(sb: Sandbox) -> None:
    t0 = time.monotonic()
    o = sb.commands.run("echo started; sleep 20", timeout=1)
    assert time.monotonic() - t0 < 10
    assert o.status == "timeout" and o.exit_code is None
    assert o.stdout == "started\n"
    o = sb.commands.run("sleep 0.1", timeout="2s")
    assert o.status == "exited" and o.ok


def test_run_signaled(sb: Sandbox) -> None:
    o = sb.commands.run("kill -TERM $$")
    assert o.status == "signaled" and o.signal == 15


def test_files_persist_between_commands(sb: Sandbox) -> None:
    sb.commands.run("echo from-exec > /workspace/a.txt")
    assert sb.files.read_text("/workspace/a.txt") == "from-exec\n"
    sb.files.write("/workspace/b.txt", "from-files")
    assert sb.commands.run("cat /workspace/b.txt").stdout == "from-files"


def test_stream_callbacks_receive_chunks_in_order(sb: Sandbox) -> None:
    out: List[str] = []
    err: List[str] = []
    o = sb.commands.run(
        "for i in $(seq 1 8); do echo line$i; echo e$i >&2; sleep 0.05; done; exit 4",
        on_stdout=out.append,
        on_stderr=err.append,
    )
    assert o.status == "exited" and o.exit_code == 4
    assert "".join(out) == "".join(f"line{i}\n" for i in range(1, 9)) == o.stdout
    assert "".join(err) == "".join(f"e{i}\n" for i in range(1, 9)) == o.stderr
    assert len(out) > 1, "output should arrive in several chunks"


def test_stream_only_stdout_callback_and_timeout(sb: Sandbox) -> None:
    out: List[str] = []
    o = sb.commands.run("echo a; echo b >&2; sleep 10", on_stdout=out.append, timeout=1)
    assert o.status == "timeout"
    assert "".join(out) == "a\n"
    assert o.stderr == "b\n"


def test_stream_utf8_split_across_chunks(sb: Sandbox) -> None:
    out: List[str] = []
    o = sb.commands.run(r"printf 'caf\303'; sleep 0.3; printf '\251!\n'", on_stdout=out.append)
    assert o.ok
    assert "".join(out) == "café!\n"
    assert o.stdout == "café!\n"


def test_invalid_utf8_output_is_exact_in_bytes(sb: Sandbox) -> None:
    o = sb.commands.run(r"printf 'a\377b'")
    assert o.ok
    assert o.stdout_bytes == b"a\xffb"
    assert o.stdout == "a\ufffdb"


def test_background_stdin_and_wait(sb: Sandbox) -> None:
    h = sb.commands.run("cat; echo end", background=True)
    assert isinstance(h, CommandHandle) and h.id
    h.send_stdin("abc\n")
    h.send_stdin(b"def")
    h.send_stdin("", close=True)
    o = h.wait(10)
    assert o.ok and o.stdout == "abc\ndefend\n"
    assert h.wait() is o  # cached
    info = h.info()
    assert not info.running and info.outcome is not None and info.outcome.exit_code == 0
    assert h.id in {c.command_id for c in sb.commands.list()}
    with pytest.raises(SandboxError) as e:
        h.send_stdin("late")
    assert e.value.status == 409


def test_background_initial_stdin(sb: Sandbox) -> None:
    h = sb.commands.run(["sh", "-c", "read x; echo got:$x"], background=True, stdin="first\n")
    assert h.wait(10).stdout == "got:first\n"


def test_background_kill_and_wait_timeout(sb: Sandbox) -> None:
    h = sb.commands.run("echo started; sleep 30", background=True, timeout=60)
    with pytest.raises(CordonTimeoutError) as e:
        h.wait(timeout=0.5)
    assert isinstance(e.value, TimeoutError) and e.value.code == "command_timeout"
    info = h.info()
    assert info.running and info.outcome is None
    deadline = time.monotonic() + 5
    while "started" not in h.info().stdout and time.monotonic() < deadline:
        time.sleep(0.05)
    assert h.info().stdout == "started\n"
    assert info.cmd[-1].endswith("sleep 30")
    h.kill()
    o = h.wait(10)
    assert o.status == "signaled" and o.signal == 9


def test_background_signal_by_name(sb: Sandbox) -> None:
    h = sb.commands.run("trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done", background=True)
    deadline = time.monotonic() + 5
    while "ready" not in h.info().stdout and time.monotonic() < deadline:
        time.sleep(0.05)
    h.signal("TERM")
    o = h.wait(10)
    assert o.exit_code == 7, o
    assert o.stdout == "ready\ngot-term\n"
    again = sb.commands.connect(h.id)
    assert again.wait(1).exit_code == 7
    with pytest.raises(NotFoundError):
        sb.commands.connect("cmd-nope")
    with pytest.raises(SandboxError) as e:
        h.signal("NOSUCHSIGNAL")
    assert e.value.status == 400


# ---- files -----------------------------------------------------------------------------------


def test_files_operations(sb: Sandbox) -> None:
    sb.files.mkdir("/workspace/d/sub")
    assert sb.files.write("/workspace/d/a.txt", "hello\n") == 6
    blob = bytes(range(256)) * 64
    assert sb.files.write("/workspace/d/b.bin", blob) == len(blob)
    assert sb.files.read("/workspace/d/b.bin") == blob
    assert sb.files.read_text("/workspace/d/a.txt") == "hello\n"

    entries = {e.name: e for e in sb.files.list("/workspace/d")}
    assert set(entries) == {"a.txt", "b.bin", "sub"}
    assert entries["sub"].is_dir and entries["sub"].type == "dir"
    assert entries["a.txt"].is_file and entries["a.txt"].size == 6
    assert entries["b.bin"].path == "/workspace/d/b.bin"

    st = sb.files.stat("/workspace/d/a.txt")
    assert st.type == "file" and st.size == 6 and st.name == "a.txt"
    assert st.modified is not None and abs(st.modified - time.time()) < 120
    assert 0 < st.mode <= 0o7777

    sb.files.move("/workspace/d/a.txt", "/workspace/d/sub/c.txt")
    assert not sb.files.exists("/workspace/d/a.txt")
    assert sb.files.read_text("/workspace/d/sub/c.txt") == "hello\n"
    # the sandbox sees what the file API wrote
    assert sb.commands.run("cat /workspace/d/sub/c.txt").stdout == "hello\n"

    with pytest.raises(SandboxError) as e:
        sb.files.remove("/workspace/d")
    assert e.value.status == 409 and e.value.code == "not_empty"
    sb.files.remove("/workspace/d/b.bin")
    assert [e.name for e in sb.files.list("/workspace/d")] == ["sub"]
    sb.files.remove("/workspace/d", recursive=True)
    with pytest.raises(NotFoundError) as nf:
        sb.files.stat("/workspace/d")
    assert nf.value.code == "not_found"
    with pytest.raises(NotFoundError):
        sb.files.read("/workspace/nothing-here")


def test_files_relative_paths_start_in_workspace(sb: Sandbox) -> None:
    sb.files.write("rel/x.txt", "x")
    assert sb.files.stat("/workspace/rel/x.txt").size == 1
    assert "rel" in {e.name for e in sb.files.list()}


def test_files_overwrite_and_empty(sb: Sandbox) -> None:
    sb.files.write("f.txt", "long content")
    sb.files.write("f.txt", "short")
    assert sb.files.read_text("f.txt") == "short"
    sb.files.write("empty", b"")
    assert sb.files.read("empty") == b""
    assert sb.files.stat("empty").size == 0


def test_files_traversal_stays_inside(sb: Sandbox, tmp_path: Path) -> None:
    # `..` above the sandbox root stays at the root: this names the sandbox's own /etc/passwd.
    inside = sb.commands.run("cat /etc/passwd")
    try:
        via_api = sb.files.read("../../etc/passwd")
    except NotFoundError:
        assert inside.status != "exited" or inside.exit_code != 0
    else:
        assert via_api.decode() == inside.stdout
    # A file of the host outside the sandbox cannot be reached, however many `..`.
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host only")
    with pytest.raises(NotFoundError):
        sb.files.read("../../../../../.." + str(secret))
    with pytest.raises(NotFoundError):
        sb.files.read(str(secret))
    # The system is read-only: writing over /etc/passwd through `..` is refused.
    before = Path("/etc/passwd").read_bytes()
    with pytest.raises(SandboxError) as e:
        sb.files.write("../../etc/passwd", "root::0:0::/:/bin/sh\n")
    assert e.value.status == 403 and e.value.code in ("read_only", "permission_denied"), e.value
    assert Path("/etc/passwd").read_bytes() == before
    # /proc magic links that point outside are refused.
    with pytest.raises(SandboxError) as pe:
        sb.files.read("/proc/1/root/etc/hostname")
    # Refused either as an escape (magic link) or because the sandbox's init is not
    # accessible to the sandbox's own user (the file API acts as that user).
    assert pe.value.status == 403 and pe.value.code in ("escapes_sandbox", "permission_denied"), pe.value


def test_files_symlink_planted_by_sandbox(sb: Sandbox, tmp_path: Path) -> None:
    secret = tmp_path / "planted-target.txt"
    secret.write_text("host only")
    sb.commands.run(["ln", "-s", str(secret), "/workspace/link"])
    st = sb.files.stat("/workspace/link")
    assert st.type == "symlink"
    with pytest.raises(NotFoundError):
        sb.files.read("/workspace/link")
    sb.files.write("/workspace/link", "replaced")
    assert secret.read_text() == "host only"
    assert sb.files.read_text("/workspace/link") == "replaced"


def test_disk_full_is_507(conn: Dict[str, Any]) -> None:
    with Sandbox.create(disk="1M", **conn) as sb:
        with pytest.raises(SandboxError) as e:
            sb.files.write("/workspace/big", b"\0" * (3 * 1024 * 1024))
        assert e.value.status == 507 and e.value.code == "no_space", e.value
        assert not sb.files.exists("/workspace/big")
        assert sb.commands.run("echo still alive").stdout == "still alive\n"


def test_invalid_request_is_400(conn: Dict[str, Any], sb: Sandbox) -> None:
    with pytest.raises(SandboxError) as e:
        Sandbox.create(profile="no-such-profile", **conn)
    assert e.value.status == 400 and e.value.code == "invalid_request"
    with pytest.raises(SandboxError) as e:
        sb.commands.run("true", timeout="forever")
    assert e.value.status == 400
    with pytest.raises(SandboxError) as e:
        sb.files.read("")
    assert e.value.status == 400


# ---- auth, limits, transport -----------------------------------------------------------------


def test_wrong_or_missing_key_is_401(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AuthenticationError) as e:
        Sandbox.create(base_url=server.url, api_key="cdn_wrong")
    assert e.value.status == 401 and e.value.code == "unauthorized" and e.value.message
    assert isinstance(e.value, CordonError)
    monkeypatch.delenv("CORDON_API_KEY", raising=False)
    with pytest.raises(AuthenticationError):
        Sandbox.list(base_url=server.url, api_key="")
    with pytest.raises(AuthenticationError):
        Sandbox.run("true", base_url=server.url, api_key="cdn_wrong")


def test_other_keys_sandboxes_are_invisible(server: Server, sb: Sandbox) -> None:
    other = server.new_key()
    assert sb.id not in {s.id for s in Sandbox.list(base_url=server.url, api_key=other)}
    with pytest.raises(NotFoundError):
        Sandbox.connect(sb.id, base_url=server.url, api_key=other)


def test_rate_limit_is_429_with_retry_after(server: Server) -> None:
    key = server.new_key(rps=1)
    with pytest.raises(RateLimitError) as e:
        for _ in range(5):
            Sandbox.list(base_url=server.url, api_key=key)
    assert e.value.status == 429 and e.value.code == "rate_limited"
    assert e.value.retry_after is not None and e.value.retry_after >= 1


def test_sandbox_quota_is_429(server: Server) -> None:
    key = server.new_key(max_sandboxes=1)
    with Sandbox.create(base_url=server.url, api_key=key):
        with pytest.raises(RateLimitError) as e:
            Sandbox.create(base_url=server.url, api_key=key)
        assert e.value.code == "quota_exceeded" and e.value.retry_after is not None
    with Sandbox.create(base_url=server.url, api_key=key) as sb:
        assert sb.is_running()


def test_upload_over_limit_is_413(tmp_path: Path) -> None:
    small = start_server(tmp_path / "small", ["--max-upload", "1K"])
    try:
        with Sandbox.create(base_url=small.url, api_key=small.api_key) as sb:
            assert sb.files.write("ok.bin", b"x" * 1000) == 1000
            with pytest.raises(SandboxError) as e:
                sb.files.write("big.bin", b"x" * 4096)
            assert e.value.status == 413
            assert e.value.code == "too_large", f"413 without the JSON error body: {e.value!r}"
    finally:
        small.stop()


def test_connection_refused() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(CordonConnectionError) as e:
        Sandbox.list(base_url=f"http://127.0.0.1:{port}", api_key="x")
    assert isinstance(e.value, ConnectionError)


def test_request_timeout() -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    port = silent.getsockname()[1]
    held: List[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.1)
        while not stop.is_set():
            try:
                c, _ = silent.accept()
                held.append(c)
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(CordonTimeoutError) as e:
            Sandbox.list(base_url=f"http://127.0.0.1:{port}", api_key="x", timeout=0.5)
        assert time.monotonic() - t0 < 5
        assert isinstance(e.value, TimeoutError) and e.value.status is None
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        silent.close()


def test_a_sandbox_asked_to_pause_on_timeout_is_paused_then_resumed_with_its_processes(
    conn: Dict[str, Any],
) -> None:
    sb = Sandbox.create(ttl=2, pause_on_timeout=True, **conn)
    try:
        assert sb.info().pause_on_timeout is True
        bg = sb.commands.run("sleep 600", background=True)
        deadline = time.time() + 15
        while time.time() < deadline and sb.info().state != "paused":
            time.sleep(0.3)
        info = sb.info()
        assert info.state == "paused" and info.paused_by
        sb.resume()
        info = sb.info()
        assert info.state == "running"
        # The same processes, and a fresh time to live (not the longest it was kept for).
        assert [c.running for c in sb.commands.list() if c.command_id == bg.id] == [True]
        assert info.expires_at - time.time() < 23 * 3600
    finally:
        sb.kill()
