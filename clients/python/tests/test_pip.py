"""pip inside a sandbox just works: `pip install x` with no flags (Debian's PEP 668 marker
notwithstanding), `!pip install x` and `%pip install x` in a Python cell, and the running
interpreter imports what was just installed. Packages come from a loopback package index (a
directory of wheels built here, served by `python3 -m http.server` on 127.0.0.1), reached
through the sandbox's egress proxy by its allowlist — no traffic beyond loopback. Checked from
outside: the installs landed in the sandbox's home, never on the host.
"""

from __future__ import annotations

import base64
import hashlib
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

from cordon_sdk import Sandbox

PACKAGES = ("cordonprobe_shell", "cordonprobe_bang", "cordonprobe_magic")


def make_wheel(index: Path, name: str) -> None:
    """A pure-Python wheel `name` 1.0 under `index/<project>/`, as a PEP 503 directory index."""
    dist = f"{name}-1.0.dist-info"
    files = {
        f"{name}/__init__.py": f"VALUE = '{name} from the loopback index'\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: cordon-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    project = index / name.replace("_", "-")  # PEP 503's normalised name
    project.mkdir(parents=True)
    with zipfile.ZipFile(project / f"{name}-1.0-py3-none-any.whl", "w") as z:
        for path, text in files.items():
            z.writestr(path, text)


@pytest.fixture
def package_index(tmp_path: Path) -> Iterator[int]:
    index = tmp_path / "simple"
    for name in PACKAGES:
        make_wheel(index, name)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port), "--directory", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the package index did not start"
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait()


def test_pip_install_needs_no_flags_and_the_running_interpreter_imports_it(
    conn: Dict[str, Any], package_index: int
) -> None:
    port = package_index
    env = {
        "PIP_INDEX_URL": f"http://pkgs.test:{port}/simple/",
        # A plain-HTTP index must be trusted by name (the test's, not the sandbox's setting).
        "PIP_TRUSTED_HOST": "pkgs.test",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    with Sandbox.create(ttl="5m", env=env, **conn) as sb:
        sb.network.set([f"pkgs.test:{port}", f"127.0.0.1:{port}"], hosts={"pkgs.test": "127.0.0.1"})
        # The interpreter starts before anything is installed (no ~/.local yet).
        assert sb.code.run("x = 1\nx").text == "1"

        r = sb.code.run("!pip install cordonprobe_bang\nimport cordonprobe_bang\ncordonprobe_bang.VALUE")
        assert r.error is None, (r.stdout, r.stderr)
        assert r.text == "'cordonprobe_bang from the loopback index'", r

        r = sb.code.run("%pip install cordonprobe_magic\nimport cordonprobe_magic\ncordonprobe_magic.__file__")
        assert r.error is None, (r.stdout, r.stderr)
        assert r.text is not None and r.text.startswith("'/home/sandbox/.local/"), r

        # A plain `pip install` in a command: no flags, no PEP 668 refusal.
        out = sb.commands.run("pip install cordonprobe_shell")
        assert out.exit_code == 0, out
        # Installed by the command, imported by the interpreter that was already running.
        r = sb.code.run("import cordonprobe_shell\ncordonprobe_shell.VALUE")
        assert r.text == "'cordonprobe_shell from the loopback index'", r
        out = sb.commands.run("python3 -c 'import cordonprobe_shell as m; print(m.__file__)'")
        assert out.stdout.startswith("/home/sandbox/.local/lib/python3"), out

    # From outside: nothing of it reached the host's Python.
    for py in ("/usr/bin/python3", sys.executable):
        for name in PACKAGES:
            found = subprocess.run([py, "-c", f"import {name}"], capture_output=True)
            assert found.returncode != 0, f"{name} is importable on the host by {py}"
