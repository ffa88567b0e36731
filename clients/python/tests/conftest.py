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
