"""Processes and files through `e2b.Sandbox` as published."""

from __future__ import annotations

import time

import pytest
from e2b import CommandExitException, FileType
from e2b.exceptions import NotFoundException


def test_run_foreground_defaults(sbx):
    r = sbx.commands.run("pwd; echo out; echo err >&2; echo $0")
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    # E2B programs start in the user's home, under bash.
    assert lines[0] == "/home/user"
    assert lines[1] == "out" and lines[2] == "/bin/bash"
    assert r.stderr == "err\n"
    assert sbx.commands.run("cd ~ && touch here && ls /home/user").stdout.split() == ["here"]


def test_nonzero_exit_raises_with_output(sbx):
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("echo partial; exit 3")
    assert e.value.exit_code == 3
    assert e.value.stdout == "partial\n"


def test_env_cwd_and_callbacks(sbx):
    seen = []
    r = sbx.commands.run(
        "echo $A-$B; pwd",
        envs={"A": "1", "B": "two"},
        cwd="/tmp",
        on_stdout=lambda s: seen.append(s),
    )
    assert r.stdout == "1-two\n/tmp\n"
    assert "".join(seen) == r.stdout


def test_user_root_is_not_root(sbx):
    r = sbx.commands.run("id -u", user="root")
    assert r.stdout.strip() != "0"


def test_background_list_kill_and_connect(sbx):
    h = sbx.commands.run("for i in 1 2 3; do echo tick $i; sleep 0.3; done", background=True)
    assert h.pid > 0
    again = sbx.commands.connect(h.pid)
    res = again.wait()
    assert res.exit_code == 0
    assert "tick 3" in res.stdout

    sleeper = sbx.commands.run("sleep 600", background=True)
    pids = [p.pid for p in sbx.commands.list()]
    assert sleeper.pid in pids
    listed = next(p for p in sbx.commands.list() if p.pid == sleeper.pid)
    assert listed.cmd == "/bin/bash" and listed.args[-1] == "sleep 600"
    assert sbx.commands.kill(sleeper.pid) is True
    with pytest.raises(CommandExitException):
        sleeper.wait()
    assert sleeper.pid not in [p.pid for p in sbx.commands.list()]
    assert sbx.commands.kill(sleeper.pid) is False
    assert sbx.commands.kill(999999) is False


def test_stdin(sbx):
    h = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "hello ")
    sbx.commands.send_stdin(h.pid, b"bytes\n")
    sbx.commands.close_stdin(h.pid)
    assert h.wait().stdout == "hello bytes\n"
    # Without stdin=True a reader sees end of file at once instead of hanging.
    assert sbx.commands.run("cat; echo done", timeout=20).stdout == "done\n"


def test_files_text_bytes_and_metadata(sbx):
    info = sbx.files.write("/home/user/notes/a.txt", "hello")
    assert info.path == "/home/user/notes/a.txt"
    assert sbx.files.read("/home/user/notes/a.txt") == "hello"
    raw = bytes(range(256))
    sbx.files.write("data.bin", raw)  # relative: in the home
    assert sbx.files.read("/home/user/data.bin", format="bytes") == raw
    assert sbx.commands.run("wc -c < data.bin").stdout.strip() == "256"
    assert sbx.files.exists("/home/user/notes/a.txt")
    assert not sbx.files.exists("/home/user/nope")
    st = sbx.files.get_info("/home/user/notes/a.txt")
    assert st.type == FileType.FILE and st.size == 5 and st.name == "a.txt"
    with pytest.raises(NotFoundException):
        sbx.files.read("/home/user/nope")


def test_list_dirs_rename_remove(sbx):
    assert sbx.files.make_dir("/home/user/d/e") is True
    assert sbx.files.make_dir("/home/user/d/e") is False
    sbx.files.write("/home/user/d/e/f.txt", "x")
    sbx.files.write("/home/user/d/g.txt", "y")
    top = {e.name: e.type for e in sbx.files.list("/home/user/d")}
    assert top == {"e": FileType.DIR, "g.txt": FileType.FILE}
    deep = {e.path for e in sbx.files.list("/home/user/d", depth=2)}
    assert deep == {"/home/user/d/e", "/home/user/d/g.txt", "/home/user/d/e/f.txt"}
    moved = sbx.files.rename("/home/user/d/g.txt", "/home/user/d/h.txt")
    assert moved.name == "h.txt"
    assert sbx.files.read("/home/user/d/h.txt") == "y"
    sbx.files.remove("/home/user/d")
    assert not sbx.files.exists("/home/user/d")


def test_write_files_multipart_and_octet_stream(sbx):
    import io

    out = sbx.files.write_files(
        [
            {"path": "/home/user/m1.txt", "data": "one"},
            {"path": "/home/user/m2.txt", "data": b"two"},
        ]
    )
    assert sorted(o.path for o in out) == ["/home/user/m1.txt", "/home/user/m2.txt"]
    # A file-like object goes as application/octet-stream.
    sbx.files.write("/home/user/stream.bin", io.BytesIO(b"\x00\x01streamed"))
    assert sbx.files.read("/home/user/stream.bin", format="bytes") == b"\x00\x01streamed"
    assert sbx.commands.run("cat m1.txt m2.txt").stdout == "onetwo"


def test_gzip_uploads_and_downloads(sbx, server):
    """`gzip=True` on write (Content-Encoding: gzip) and on read (Accept-Encoding: gzip): the
    bytes arrive as they were, and the download really came packed."""
    import gzip as gz

    import httpx

    data = bytes(range(256)) * 400 + b"tail"
    sbx.files.write("/home/user/packed.bin", data, gzip=True)
    assert sbx.commands.run("wc -c < packed.bin").stdout.strip() == str(len(data))
    assert sbx.files.read("/home/user/packed.bin", format="bytes", gzip=True) == data
    # Several files at once, gzipped too.
    sbx.files.write_files([{"path": "g1.txt", "data": "one"}, {"path": "g2.txt", "data": "two"}], gzip=True)
    assert sbx.commands.run("cat g1.txt g2.txt").stdout == "onetwo"
    h = {"E2b-Sandbox-Id": sbx.sandbox_id, "X-Access-Token": sbx._envd_access_token, "Accept-Encoding": "gzip"}
    with httpx.Client() as c:
        with c.stream("GET", f"{server.url}/files", params={"path": "/home/user/packed.bin"}, headers=h) as r:
            assert r.status_code == 200
            assert r.headers["content-encoding"] == "gzip"
            raw = b"".join(r.iter_raw())
        assert len(raw) < len(data) and gz.decompress(raw) == data
        # A client that does not ask gets plain bytes.
        r = c.get(f"{server.url}/files", params={"path": "/home/user/packed.bin"}, headers={**h, "Accept-Encoding": "identity"})
        assert "content-encoding" not in r.headers and r.content == data


def test_signed_file_urls_open_their_own_sandbox_only_and_expire():
    import json
    import urllib.error
    import urllib.request

    from e2b import Sandbox

    a = Sandbox.create(timeout=120, secure=True)
    b = Sandbox.create(timeout=120, secure=True)
    try:
        a.files.write("signed.txt", "a's file")
        b.files.write("signed.txt", "b's file")
        # A download URL names no sandbox (E2B_SANDBOX_URL is the server): its signature does.
        with urllib.request.urlopen(a.download_url("signed.txt", "user")) as r:
            assert r.read() == b"a's file"
        with urllib.request.urlopen(b.download_url("signed.txt", "user", 120)) as r:
            assert r.read() == b"b's file"
        # An upload URL writes into its own sandbox.
        req = urllib.request.Request(
            a.upload_url("up.txt", "user"), data=b"uploaded", method="POST",
            headers={"Content-Type": "application/octet-stream"},
        )
        urllib.request.urlopen(req).close()
        assert a.files.read("up.txt") == "uploaded"
        assert not b.files.exists("up.txt")

        def refused(url: str) -> dict:
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(url)
            assert e.value.code == 401
            return json.loads(e.value.read())

        assert refused(a.download_url("signed.txt", "user", use_signature_expiration=-120)) == {
            "code": 401, "message": "signature is already expired"}
        # A signature for one path does not open another, nor a tampered one anything.
        url = a.download_url("signed.txt", "user")
        refused(url.replace("signed.txt", "up.txt"))
        refused(url[:-3] + ("AAA" if not url.endswith("AAA") else "BBB"))
        # Read and write signatures are not interchangeable.
        up = a.upload_url("signed.txt", "user")
        refused(up)
    finally:
        a.kill()
        b.kill()


def test_a_commands_pid_is_its_pid_inside_the_sandbox(sbx):
    from e2b import CommandExitException

    cmd = sbx.commands.run("sleep 30", background=True)
    # The sandbox's own tools name the same process.
    assert sbx.commands.run(f"cat /proc/{cmd.pid}/cmdline | tr '\\0' ' '").stdout.strip() == "sleep 30" or \
        "sleep" in sbx.commands.run(f"cat /proc/{cmd.pid}/comm").stdout
    assert cmd.pid in [p.pid for p in sbx.commands.list()]
    assert sbx.commands.kill(cmd.pid)
    with pytest.raises(CommandExitException):
        sbx.commands.run(f"kill -0 {cmd.pid}")
    assert not sbx.commands.kill(999999)


def test_the_home_is_at_home_user_for_the_kernel_too(sbx):
    # A bind, not a symlink: getcwd() names the path the program went through.
    r = sbx.commands.run("python3 -c 'import os; print(os.getcwd())'; readlink /proc/self/cwd")
    assert r.stdout.split() == ["/home/user", "/home/user"]
    sbx.files.write("/home/user/same.txt", "one directory")
    assert sbx.commands.run("cat /home/sandbox/same.txt").stdout == "one directory"
