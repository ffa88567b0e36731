"""E2B's Template SDK through the published SDK, unmodified: `Template.build` of COPY, ENV,
RUN, WORKDIR and a start command with its ready command on a base image in the server's store
(a busybox root built here as `e2bdev/base`, what `from_base_image()` names) — COPY with its
`user` and `mode` among them —, its build logs,
`Template.exists`, then `Sandbox.create(alias)` sees the files and env, and the start command
has run before the create returns. A base the store lacks fails the build with the SDK's
`BuildException` naming it. A built template survives a restart of the server on its data
directory: E2B's template listing (`GET /templates`, through the SDK's own API client) still
shows it, `Sandbox.create(alias)` still runs it with its start and ready commands, and a
template deleted before the restart stays deleted.

Its own server, pointed at by the SDK's variables for this test only. busybox comes from
scripts/test.sh's apt list; without it the test skips.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from e2b import Sandbox, Template
from e2b.exceptions import BuildException

from conftest import Server, start_server


def build_base(cordon: Path, work: Path, data: Path) -> None:
    """`e2bdev/base` in the store: busybox with every applet, a /bin/bash (E2B's SDK runs every
    command as `/bin/bash -l -c`) that hands over to busybox's sh, root and user."""
    busybox = shutil.which("busybox")
    if busybox is None:
        if os.environ.get("CI") == "true":
            pytest.fail("busybox is not installed (scripts/test.sh installs it)")
        pytest.skip("busybox is not installed")
    root = work / "base" / "rootfs"
    for d in ("bin", "etc", "root"):
        (root / d).mkdir(parents=True)
    shutil.copy(busybox, root / "bin" / "busybox")
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True).stdout.split()
    for a in applets:
        if a != "busybox" and not (root / "bin" / a).exists():
            (root / "bin" / a).symlink_to("busybox")
    bash = root / "bin" / "bash"
    if not bash.exists():
        bash.write_text('#!/bin/sh\nexec /bin/sh "$@"\n')
        bash.chmod(0o755)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\nuser:x:1000:\n")
    (work / "base" / ".dockerignore").write_text("rootfs\n")
    (work / "base" / "Dockerfile").write_text("FROM ./rootfs\n")
    out = subprocess.run(
        [str(cordon), "image", "build", "-t", "e2bdev/base:latest", str(work / "base"), "--data-dir", str(data)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr


def test_a_template_built_with_the_sdk_is_what_sandbox_create_of_its_alias_runs(server, tmp_path, monkeypatch):
    data = tmp_path / "data"
    build_base(server.binary, tmp_path, data)
    ctx = tmp_path / "ctx"
    (ctx / "app").mkdir(parents=True)
    (ctx / "app" / "main.py").write_text("print('hi')\n")
    (ctx / "tool.sh").write_text("#!/bin/sh\necho tool ran\n")
    srv = start_server(data, [])
    try:
        for k in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_VOLUME_API_URL"):
            monkeypatch.setenv(k, srv.url)
        monkeypatch.setenv("E2B_API_KEY", srv.api_key)
        t = (
            Template(file_context_path=str(ctx))
            .from_base_image()
            .copy("app/", "/srv/app/")
            .copy("tool.sh", "/srv/tool.sh", user="user", mode=0o750)
            .copy("app/main.py", "/srv/other.py", user="1234:1234", mode=0o640)
            .set_envs({"MODE": "prod $NOT_EXPANDED"})
            .run_cmd("echo built > /srv/app/built.txt")
            .set_workdir("/srv/app")
            .set_start_cmd("sleep 1; echo up > /tmp/up", "test -f /tmp/up")
        )
        logs: list[str] = []
        Template.build(t, "sdk-app:v1", on_build_logs=lambda e: logs.append(e.message))
        assert any("RUN" in m for m in logs), logs
        assert Template.exists("sdk-app")
        assert not Template.exists("sdk-app-none")
        s = Sandbox.create("sdk-app:v1", timeout=120)
        try:
            out = s.commands.run("cat /srv/app/main.py /srv/app/built.txt /tmp/up; echo $MODE")
            assert out.stdout == "print('hi')\nbuilt\nup\nprod $NOT_EXPANDED\n"
            # copy(user=, mode=): `user` is the sandbox's one user (uid 1000); another
            # owner shows as nobody inside (README: Ownership).
            out = s.commands.run("stat -c '%u:%g %a' /srv/tool.sh /srv/other.py && /srv/tool.sh")
            assert out.stdout == "1000:1000 750\n65534:65534 640\ntool ran\n"
        finally:
            s.kill()
        with pytest.raises(BuildException) as e:
            Template.build(Template().from_image("no-such/image:1").run_cmd("true"), "sdk-missing")
        assert "'no-such/image:1' is not in this server's image store" in str(e.value)
    finally:
        srv.stop()


def restart(srv: Server) -> Server:
    """`srv` stopped and started again on its data directory, as the same key (a restarted
    server prints no key: the registry keeps the one it made)."""
    srv.stop()
    log = srv.data_dir / "server-restarted.stderr"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [str(srv.binary), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(srv.data_dir)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            bufsize=1,
        )
    assert proc.stdout is not None
    url = None
    for line in proc.stdout:
        m = re.search(r"cordon serving on (http://\S+)", line)
        if m:
            url = m.group(1)
            break
    assert url, log.read_text(errors="replace")
    # Keep draining stdout so the server never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return Server(
        url=url, api_key=srv.api_key, key_id=srv.key_id, data_dir=srv.data_dir, binary=srv.binary, proc=proc, log=log
    )


def listed(url: str, key: str) -> list:
    """E2B's `GET /templates` through the SDK's generated API client (what `e2b template list`
    calls), parsed into its `Template` models."""
    from e2b.api.client.api.templates import get_templates
    from e2b.api.client.client import AuthenticatedClient

    client = AuthenticatedClient(base_url=url, token=key, prefix="", auth_header_name="X-API-KEY")
    res = get_templates.sync_detailed(client=client)
    assert res.status_code == 200, res.content
    return res.parsed


def test_a_template_built_with_the_sdk_survives_a_server_restart(server, tmp_path, monkeypatch):
    data = tmp_path / "data"
    build_base(server.binary, tmp_path, data)
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "app.txt").write_text("kept\n")
    srv = start_server(data, [])

    def point(s: Server) -> None:
        for k in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_VOLUME_API_URL"):
            monkeypatch.setenv(k, s.url)
        monkeypatch.setenv("E2B_API_KEY", s.api_key)

    try:
        point(srv)
        t = (
            Template(file_context_path=str(ctx))
            .from_base_image()
            .copy("app.txt", "/srv/app.txt")
            .run_cmd("echo built >> /srv/app.txt")
            .set_start_cmd("echo up > /tmp/up", "test -f /tmp/up")
        )
        Template.build(t, "kept-app:v1")
        Template.build(Template().from_base_image().run_cmd("true"), "dropped-app")
        assert sorted(x.aliases[0] for x in listed(srv.url, srv.api_key)) == ["dropped-app", "kept-app"]
        Sandbox.delete_snapshot("dropped-app")  # E2B deletes templates through this route too
        srv = restart(srv)
        point(srv)
        got = listed(srv.url, srv.api_key)
        assert [x.aliases[0] for x in got] == ["kept-app"]
        assert str(got[0].build_status) == "ready"
        assert got[0].build_count == 1
        assert Template.exists("kept-app")
        assert not Template.exists("dropped-app")
        s = Sandbox.create("kept-app:v1", timeout=120)
        try:
            out = s.commands.run("cat /srv/app.txt /tmp/up")
            assert out.stdout == "kept\nbuilt\nup\n"
        finally:
            s.kill()
        assert listed(srv.url, srv.api_key)[0].spawn_count == 1
    finally:
        srv.stop()
