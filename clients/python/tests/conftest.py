"""Fixtures: a real `cordon serve` on loopback, started from a binary that is already built.

The binary is `$CORDON_BIN`, else `<repo>/target/debug/cordon` (build it with
`cargo build -p cordon`). Nothing is built here. The server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

import pytest

from cordon_sdk import Sandbox

REPO = Path(__file__).resolve().parents[3]
# clients/payloads.py: the programs every door (CLI, HTTP, MCP, SDK) is tested with.
sys.path.insert(0, str(REPO / "clients"))
import payloads  # noqa: E402,F401
SERVING = re.compile(r"cordon serving on (http://\S+)")
API_KEY = re.compile(r"API key \(([^,]+), shown once\): (\S+)")
START_TIMEOUT = 30.0


def cordon_bin() -> Path:
    env = os.environ.get("CORDON_BIN")
    path = Path(env) if env else REPO / "target" / "debug" / "cordon"
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(
            f"no cordon binary at {path}: build it with `cargo build -p cordon` or set CORDON_BIN",
            pytrace=False,
        )
    return path


@dataclass
class Server:
    """A running `cordon serve`."""

    url: str
    api_key: str
    key_id: str
    data_dir: Path
    binary: Path
    proc: "subprocess.Popen[str]"
    log: Path
    stdout_lines: List[str] = field(default_factory=list)

    def cordon(self, *args: str) -> str:
        """Runs `cordon ARGS --data-dir DIR` against this server's data dir; returns stdout."""
        r = subprocess.run(
            [str(self.binary), *args, "--data-dir", str(self.data_dir)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if r.returncode != 0:
            raise RuntimeError(f"cordon {' '.join(args)} failed ({r.returncode}): {r.stderr}")
        return r.stdout

    def new_key(self, *, rps: Optional[int] = None, max_sandboxes: Optional[int] = None) -> str:
        args = ["keys", "create", "--name", f"test-{uuid.uuid4().hex[:6]}"]
        if rps is not None:
            args += ["--rps", str(rps)]
        if max_sandboxes is not None:
            args += ["--max-sandboxes", str(max_sandboxes)]
        return self.cordon(*args).strip().splitlines()[-1].strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start_server(data_dir: Path, extra: Sequence[str] = ()) -> Server:
    binary = cordon_bin()
    data_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir / "server.stderr"
    err = open(log, "w")
    proc = subprocess.Popen(
        [str(binary), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir), *extra],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
        bufsize=1,
    )
    err.close()
    lines: "queue.Queue[Optional[str]]" = queue.Queue()
    seen: List[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name="cordon-serve-stdout", daemon=True).start()
    url: Optional[str] = None
    key: Optional[str] = None
    key_id = ""
    deadline = time.monotonic() + START_TIMEOUT
    while url is None or key is None:
        left = deadline - time.monotonic()
        try:
            line = lines.get(timeout=max(0.01, left)) if left > 0 else None
        except queue.Empty:
            line = None
        if line is None:
            proc.kill()
            proc.wait()
            raise RuntimeError(
                "cordon serve did not print its URL and API key in time.\n"
                f"stdout: {''.join(seen)}\nstderr: {log.read_text(errors='replace')}"
            )
        seen.append(line)
        m = SERVING.search(line)
        if m:
            url = m.group(1)
        m = API_KEY.search(line)
        if m:
            key_id, key = m.group(1), m.group(2)
    assert url.startswith("http://127.0.0.1:"), url
    assert key.startswith("cdn_"), key
    return Server(
        url=url, api_key=key, key_id=key_id, data_dir=data_dir, binary=binary, proc=proc, log=log, stdout_lines=seen
    )


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("cordon-data"))
    try:
        yield srv
    finally:
        srv.stop()
    code = srv.proc.returncode
    assert code in (0, -signal.SIGTERM), f"cordon serve exited with {code}:\n{srv.log.read_text(errors='replace')}"


@pytest.fixture
def conn(server: Server) -> Dict[str, Any]:
    """Keyword arguments that point the SDK at the test server."""
    return {"base_url": server.url, "api_key": server.api_key}


@pytest.fixture
def sb(conn: Dict[str, Any]) -> Iterator[Sandbox]:
    with Sandbox.create(ttl="5m", metadata={"fixture": "sb"}, **conn) as s:
        yield s


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class RegistryImage:
    """A busybox image built here with umoci and pushed with skopeo to a docker-registry on
    loopback: ``reference`` names it there, ``digest`` is its manifest's."""

    reference: str
    digest: str


def _need(tool: str) -> None:
    from shutil import which

    if which(tool) is None:
        if os.environ.get("CI") == "true":
            raise RuntimeError(f"{tool} is not installed (scripts/test.sh installs it)")
        pytest.skip(f"{tool} is not installed (apt-get install it, or run scripts/test.sh)")


@pytest.fixture(scope="session")
def registry_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryImage]:
    import json
    import shutil
    import socket

    for tool in ("docker-registry", "umoci", "skopeo", "busybox"):
        _need(tool)
    work = tmp_path_factory.mktemp("registry")
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
    oci, bundle = work / "oci", work / "bundle"
    layout = f"{oci}:t"
    run("umoci", "init", "--layout", str(oci))
    run("umoci", "new", "--image", layout)
    run("umoci", "unpack", "--rootless", "--image", layout, str(bundle))
    root = bundle / "rootfs"
    (root / "bin").mkdir(parents=True, exist_ok=True)
    (root / "etc").mkdir(parents=True, exist_ok=True)
    shutil.copy(shutil.which("busybox") or "", root / "bin" / "busybox")
    (root / "bin" / "sh").symlink_to("busybox")
    (root / "etc" / "greeting").write_text("hello from the image\n")
    run("umoci", "repack", "--refresh-bundle", "--image", layout, str(bundle))
    run("umoci", "config", "--image", layout, "--config.env", "FROM_IMAGE=yes", "--config.cmd", "/bin/sh")
    digest = json.loads((oci / "index.json").read_text())["manifests"][0]["digest"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = work / "registry.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {work / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    reg = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("docker-registry did not start")
                time.sleep(0.05)
        reference = f"127.0.0.1:{port}/sdk/busybox:1"
        env = dict(os.environ, TMPDIR=str(work))
        subprocess.run(
            ["skopeo", "--insecure-policy", "copy", "--dest-tls-verify=false", "-q", f"oci:{layout}", f"docker://{reference}"],
            check=True,
            capture_output=True,
            env=env,
        )
        yield RegistryImage(reference=reference, digest=digest)
    finally:
        reg.kill()
        reg.wait()
