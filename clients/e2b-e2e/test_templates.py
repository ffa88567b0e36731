"""Named templates through the published E2B SDK: `cordon serve --templates FILE`, then
`Sandbox.create("my-template")` gets the template's image (built here with `cordon image
build` from a busybox root), limits and env; `envs` win over the template's; an unknown name
is the SDK's exception (404) naming the known templates.

Its own server (the session's has no template file), pointed at by the SDK's variables for
this test only. busybox comes from scripts/test.sh's apt list; without it the test skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from e2b import Sandbox
from e2b.exceptions import SandboxException

from conftest import start_server

TEMPLATES = """
[templates.my-template]
image = "tiny:1"
memory = "300M"
cpus = 2
env = { A = "from-template", B = "from-template" }
"""


def build_tiny(cordon: Path, work: Path, data: Path) -> None:
    """`tiny:1`: busybox, a file the host has not, and a /bin/bash (E2B's SDK runs every
    command as `/bin/bash -l -c`) that hands over to busybox's sh."""
    busybox = shutil.which("busybox")
    if busybox is None:
        if os.environ.get("CI") == "true":
            pytest.fail("busybox is not installed (scripts/test.sh installs it)")
        pytest.skip("busybox is not installed")
    root = work / "ctx" / "rootfs"
    (root / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    shutil.copy(busybox, root / "bin" / "busybox")
    for tool in ("sh", "cat", "echo", "env"):
        (root / "bin" / tool).symlink_to("busybox")
    bash = root / "bin" / "bash"
    bash.write_text('#!/bin/sh\nexec /bin/sh "$@"\n')
    bash.chmod(0o755)
    (root / "etc" / "greeting").write_text("from the image\n")
    (work / "ctx" / ".dockerignore").write_text("rootfs\n")
    (work / "ctx" / "Dockerfile").write_text("FROM ./rootfs\nENV FROM_IMAGE=yes\n")
    out = subprocess.run(
        [str(cordon), "image", "build", "-t", "tiny:1", str(work / "ctx"), "--data-dir", str(data)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr


def test_create_by_template_name_gets_its_image_limits_and_env(server, tmp_path, monkeypatch):
    data = tmp_path / "data"
    build_tiny(server.binary, tmp_path, data)
    (tmp_path / "templates.toml").write_text(TEMPLATES)
    srv = start_server(data, ["--templates", str(tmp_path / "templates.toml")])
    try:
        for k in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_VOLUME_API_URL"):
            monkeypatch.setenv(k, srv.url)
        monkeypatch.setenv("E2B_API_KEY", srv.api_key)
        s = Sandbox.create("my-template", timeout=120, envs={"B": "from-request"})
        try:
            info = s.get_info()
            assert info.template_id == "my-template"
            assert info.memory_mb == 300
            assert info.cpu_count == 2
            out = s.commands.run("cat /etc/greeting; echo $A $B $FROM_IMAGE")
            assert out.stdout == "from the image\nfrom-template from-request yes\n"
        finally:
            s.kill()
        # The built-ins are still there, on the host's system directories.
        s = Sandbox.create("base", timeout=60)
        try:
            assert s.commands.run("test -e /etc/greeting && echo image || echo host").stdout == "host\n"
        finally:
            s.kill()
        with pytest.raises(SandboxException) as e:
            Sandbox.create("no-such-template", timeout=60)
        assert "404" in str(e.value) or "not found" in str(e.value)
        assert "base, code-interpreter-v1, my-template" in str(e.value)
    finally:
        srv.stop()


def test_pip_install_in_a_code_interpreter_cell_through_a_template(tmp_path, monkeypatch):
    """`!pip install` and `%pip install` in the code-interpreter SDK's cells, from a loopback
    package index (wheels built here) that a template's `allow_net` and `hosts` admit — the
    template an operator would write for an internal index — imported by the running
    interpreter."""
    import socket
    import sys
    import time

    from e2b_code_interpreter import Sandbox as CodeSandbox

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python" / "tests"))
    from test_pip import make_wheel  # noqa: E402

    index = tmp_path / "simple"
    for name in ("cordonprobe_e2b_bang", "cordonprobe_e2b_magic"):
        make_wheel(index, name)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    web = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port), "--directory", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    (tmp_path / "templates.toml").write_text(
        f"""
[templates.with-index]
disk = "2G"
memory = "2G"
allow_net = ["pkgs.test:{port}", "127.0.0.1:{port}"]
hosts = {{ "pkgs.test" = "127.0.0.1" }}
env = {{ PIP_INDEX_URL = "http://pkgs.test:{port}/simple/", PIP_TRUSTED_HOST = "pkgs.test", PIP_DISABLE_PIP_VERSION_CHECK = "1" }}
"""
    )
    srv = start_server(tmp_path / "data", ["--templates", str(tmp_path / "templates.toml")])
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the package index did not start"
                time.sleep(0.05)
        for k in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_VOLUME_API_URL"):
            monkeypatch.setenv(k, srv.url)
        monkeypatch.setenv("E2B_API_KEY", srv.api_key)
        s = CodeSandbox.create("with-index", timeout=120)
        try:
            assert s.get_info().memory_mb == 2048
            assert s.run_code("1 + 1").text == "2"
            ex = s.run_code("!pip install cordonprobe_e2b_bang\nimport cordonprobe_e2b_bang\ncordonprobe_e2b_bang.VALUE")
            assert ex.error is None, (ex.logs.stdout, ex.logs.stderr)
            assert ex.text == "cordonprobe_e2b_bang from the loopback index"
            ex = s.run_code("%pip install cordonprobe_e2b_magic\nimport cordonprobe_e2b_magic\ncordonprobe_e2b_magic.VALUE")
            assert ex.error is None, (ex.logs.stdout, ex.logs.stderr)
            assert ex.text == "cordonprobe_e2b_magic from the loopback index"
        finally:
            s.kill()
    finally:
        srv.stop()
        web.terminate()
        web.wait()
