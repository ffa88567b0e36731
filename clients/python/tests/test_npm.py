"""npm inside a sandbox just works, as pip does: `npm install x` (into the working directory)
and `npm install -g x` (global: its command on `PATH`) with no flags — in a command, a
Python cell's `!` line, and `require` in a JavaScript cell — in a sandbox on the
host's system directories, whose global prefix (`/usr`) is read-only there. Packages come
from a loopback npm registry (a packument and a tarball made here, served by
`python3 -m http.server` on 127.0.0.1), reached through the sandbox's egress proxy by its
allowlist — no traffic beyond loopback. Checked from outside: nothing reached the host's
global `node_modules`.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

from cordon_sdk import Sandbox

NAME = "cordonprobe-npm"


def make_package(root: Path, port: int) -> None:
    """`NAME` 1.0.0 with a `require`able value and a command, as a registry serves it."""
    files = {
        "package/package.json": (json.dumps({"name": NAME, "version": "1.0.0", "main": "index.js", "bin": {NAME: "cli.js"}}), 0o644),
        "package/index.js": ("module.exports.VALUE = 'from the loopback registry';\n", 0o644),
        "package/cli.js": ("#!/usr/bin/env node\nconsole.log('the command ran');\n", 0o755),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, (text, mode) in files.items():
            data = text.encode()
            m = tarfile.TarInfo(name)
            m.size, m.mode = len(data), mode
            t.addfile(m, io.BytesIO(data))
    tgz = buf.getvalue()
    (root / "tarballs").mkdir(parents=True)
    (root / "tarballs" / f"{NAME}-1.0.0.tgz").write_bytes(tgz)
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()
    version = {
        "name": NAME,
        "version": "1.0.0",
        "main": "index.js",
        "bin": {NAME: "cli.js"},
        "dist": {
            "tarball": f"http://pkgs.test:{port}/tarballs/{NAME}-1.0.0.tgz",
            "integrity": integrity,
            "shasum": hashlib.sha1(tgz).hexdigest(),
        },
    }
    packument = {"name": NAME, "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": version}}
    (root / NAME).write_text(json.dumps(packument))


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[int]:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed (scripts/test.sh installs it)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    make_package(tmp_path, port)
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
                assert time.monotonic() < deadline, "the registry did not start"
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait()


def test_npm_install_local_and_global_need_no_flags(conn: Dict[str, Any], registry: int) -> None:
    port = registry
    # The registry is the test's choice, as an index is pip's: nothing else is set.
    env = {"NPM_CONFIG_REGISTRY": f"http://pkgs.test:{port}/"}
    with Sandbox.create(ttl="5m", env=env, **conn) as sb:
        sb.network.set([f"pkgs.test:{port}", f"127.0.0.1:{port}"], hosts={"pkgs.test": "127.0.0.1"})
        out = sb.commands.run(f"cd /workspace && npm install {NAME}", timeout=120)
        assert out.exit_code == 0, (out.stdout, out.stderr)
        out = sb.commands.run(f"cd /workspace && node -e \"console.log(require('{NAME}').VALUE)\"")
        assert out.stdout == "from the loopback registry\n", out
        # The JavaScript interpreter (started in /workspace) requires what was just installed.
        r = sb.code.run(f"require('{NAME}').VALUE", language="javascript")
        assert (r.error, r.text) == (None, "'from the loopback registry'"), r

        out = sb.commands.run(f"npm install -g {NAME}", timeout=120)
        assert out.exit_code == 0, (out.stdout, out.stderr)
        out = sb.commands.run(f"{NAME}")
        assert (out.exit_code, out.stdout) == (0, "the command ran\n"), out
        # And from a Python cell's `!` line.
        r = sb.code.run(f"!npm install -g {NAME} >/dev/null && {NAME}")
        assert r.error is None and "the command ran" in r.stdout, r
        out = sb.commands.run(f"cd / && npm ls -g {NAME}")
        assert out.exit_code == 0 and NAME in out.stdout, out
        # In the sandbox's own home, gone with it.
        out = sb.commands.run("npm prefix -g")
        assert out.stdout.strip().startswith("/home/sandbox/"), out

    # From outside: nothing of it reached the host's global node_modules.
    host = subprocess.run(["npm", "prefix", "-g"], capture_output=True, text=True).stdout.strip()
    assert not (Path(host) / "lib" / "node_modules" / NAME).exists()
    assert shutil.which(NAME) is None
