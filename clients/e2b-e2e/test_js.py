"""The JavaScript E2B SDKs (`e2b`, `@e2b/code-interpreter` from npm, as published) under Node
against the same server: js/e2e.mjs drives the control plane, commands, files, the code
interpreter, snapshots and forks and an isolation check, and fails on the first wrong answer."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent / "js"


def test_js_sdk_end_to_end(server, tmp_path):
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "node and npm are needed (scripts/test.sh installs them)"
    work = tmp_path / "js"
    work.mkdir()
    for f in ("package.json", "e2e.mjs"):
        shutil.copy(HERE / f, work / f)
    subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--silent"],
        cwd=work,
        check=True,
        timeout=300,
    )
    env = dict(os.environ, E2B_API_URL=server.url, E2B_SANDBOX_URL=server.url, E2B_API_KEY=server.api_key)
    r = subprocess.run([node, "e2e.mjs"], cwd=work, env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert "e2b js sdk: ok" in r.stdout
