"""Fixtures of the Docker door's end-to-end suite: a real `cordon serve --docker-socket`
(started by the SDK suite's own helper, so both suites start servers alike), a busybox image
pushed to a loopback docker-registry (the SDK suite's `registry_image`), and docker-py — the
Debian package python3-docker — pointed at the socket.

Run with the system Python (python3-docker and python3-pytest from apt):
`PYTHONPATH=clients/python/src /usr/bin/python3 -m pytest clients/docker-e2e`.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

docker = pytest.importorskip("docker", reason="docker-py is not installed (apt-get install python3-docker)")

_spec = importlib.util.spec_from_file_location(
    "cordon_sdk_fixtures", Path(__file__).resolve().parents[1] / "python" / "tests" / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
_sdk = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _sdk
_spec.loader.exec_module(_sdk)
registry_image = _sdk.registry_image

TCP = re.compile(r"cordon Docker API on tcp://(\S+)")


@dataclass
class DockerServer:
    server: "_sdk.Server"
    socket: Path
    bind_root: Path
    tcp: str

    def sandboxes_created(self) -> int:
        """How many sandboxes the server ever created, read from outside (its /metrics)."""
        text = urllib.request.urlopen(self.server.url + "/metrics", timeout=10).read().decode()
        m = re.search(r"^cordon_sandboxes_created_total (\d+)", text, re.M)
        assert m, text
        return int(m.group(1))


@pytest.fixture(scope="session")
def dserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerServer]:
    work = tmp_path_factory.mktemp("docker")
    sock = work / "docker.sock"
    bind_root = work / "binds"
    bind_root.mkdir()
    srv = _sdk.start_server(
        work / "data",
        ["--docker-socket", str(sock), "--docker-bind-root", str(bind_root), "--docker-listen", "127.0.0.1:0"],
    )
    try:
        tcp = next(m.group(1) for line in srv.stdout_lines if (m := TCP.search(line)))
        yield DockerServer(server=srv, socket=sock, bind_root=bind_root, tcp=tcp)
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def client(dserver: DockerServer) -> Iterator["docker.DockerClient"]:
    c = docker.DockerClient(base_url=f"unix://{dserver.socket}", timeout=120)
    yield c
    c.close()


@pytest.fixture(scope="session")
def image(client: "docker.DockerClient", registry_image: "_sdk.RegistryImage") -> str:
    """The registry's busybox image, pulled through the Docker API."""
    repo, tag = registry_image.reference.rsplit(":", 1)
    client.images.pull(repo, tag=tag)
    return registry_image.reference


@pytest.fixture(autouse=True)
def no_leftovers(client: "docker.DockerClient") -> Iterator[None]:
    """Every test leaves no container behind (the ones that check refusals rely on it)."""
    yield
    for c in client.containers.list(all=True):
        try:
            c.remove(force=True)
        except docker.errors.NotFound:
            pass  # an auto-remove finished between the list and this removal
