"""Fixtures: a real `cordon serve` on loopback (started as clients/python/tests does), and the
published E2B SDKs pointed at it the documented way: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY.
"""

from __future__ import annotations

import importlib.util
import os
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

# A host secret the sandboxes must never see (the server runs with it in its environment).
HOST_SECRET = "cordon-e2b-host-secret-4f1c"


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator["Server"]:
    os.environ["CORDON_E2B_TEST_SECRET"] = HOST_SECRET
    srv = start_server(tmp_path_factory.mktemp("cordon-e2b-data"))
    try:
        yield srv
    finally:
        srv.stop()
    code = srv.proc.returncode
    assert code in (0, -signal.SIGTERM), f"cordon serve exited with {code}:\n{srv.log.read_text(errors='replace')}"


@pytest.fixture(scope="session")
def host_secret() -> str:
    return HOST_SECRET


@pytest.fixture(scope="session", autouse=True)
def e2b_env(server: "Server") -> Iterator[None]:
    """The four variables an E2B program is pointed at cordon with — nothing else."""
    names = ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_VOLUME_API_URL", "E2B_API_KEY", "E2B_DOMAIN")
    saved = {k: os.environ.get(k) for k in names}
    os.environ["E2B_API_URL"] = server.url
    os.environ["E2B_SANDBOX_URL"] = server.url
    os.environ["E2B_VOLUME_API_URL"] = server.url
    os.environ["E2B_API_KEY"] = server.api_key
    os.environ.pop("E2B_DOMAIN", None)
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def sbx():
    from e2b import Sandbox

    s = Sandbox.create(timeout=300, metadata={"suite": "e2b-e2e"})
    try:
        yield s
    finally:
        s.kill()


@pytest.fixture
def ci():
    from e2b_code_interpreter import Sandbox

    s = Sandbox.create(timeout=300)
    try:
        yield s
    finally:
        s.kill()
