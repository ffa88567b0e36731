"""Fixtures: a real `cordon serve` on loopback (started as clients/python/tests does), and the
published `sandbox-fusion` client pointed at it the documented way: an endpoint whose
user-info is the API key (`http://KEY:@127.0.0.1:PORT`, sent as HTTP Basic auth).
"""

from __future__ import annotations

import importlib.util
import signal
import sys
from pathlib import Path
from typing import Iterator

import pytest

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location(
    "cordon_server_fixture", HERE.parent / "python" / "tests" / "conftest.py"
)
assert _spec and _spec.loader
_fixture = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _fixture
_spec.loader.exec_module(_fixture)
start_server = _fixture.start_server
Server = _fixture.Server


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator["Server"]:
    srv = start_server(tmp_path_factory.mktemp("cordon-fusion-data"))
    try:
        yield srv
    finally:
        srv.stop()
    code = srv.proc.returncode
    assert code in (0, -signal.SIGTERM), f"cordon serve exited with {code}:\n{srv.log.read_text(errors='replace')}"


def endpoint_of(server: "Server", key: str, *, colon: bool = True) -> str:
    host = server.url.removeprefix("http://")
    return f"http://{key}{':' if colon else ''}@{host}"


@pytest.fixture(scope="session")
def endpoint(server: "Server") -> str:
    return endpoint_of(server, server.api_key)
