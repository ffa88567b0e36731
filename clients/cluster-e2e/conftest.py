"""Fixtures: a Ray cluster of three nodes on this machine (``ray.cluster_utils.Cluster``, each
node with its own resources), ``cordon cluster up`` on it (a cordon node per Ray node and the
router), and the published E2B SDK pointed at the router the documented way.

Ray's agents reach for cloud metadata and DNS when they start: the suite refuses to run
outside a network namespace that holds only loopback (scripts/cluster-e2e.sh makes one).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, List

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
NODES = 3
LEASE = 4.0


def _only_loopback() -> bool:
    # The interfaces of this process's network namespace (sysfs may show another's).
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def cordon_bin() -> Path:
    env = os.environ.get("CORDON_BIN")
    path = Path(env) if env else REPO / "target" / "debug" / "cordon"
    if not path.is_file():
        pytest.fail(f"no cordon binary at {path}: set CORDON_BIN", pytrace=False)
    return path


@dataclass
class Front:
    """A running router (``cordon cluster up`` or ``cordon cluster router``)."""

    url: str
    proc: "subprocess.Popen[str]"
    lines: List[str] = field(default_factory=list)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def start_front(args: List[str], want_key: bool) -> "tuple[Front, str]":
    proc = subprocess.Popen(
        [str(cordon_bin()), "cluster", *args, "--python", sys.executable],
        stdout=subprocess.PIPE, stderr=None, text=True, env=dict(os.environ),
    )
    front = Front(url="", proc=proc)
    key = ""
    assert proc.stdout is not None
    deadline = time.time() + 60
    for line in proc.stdout:
        front.lines.append(line)
        m = re.search(r"router on (http://\S+)", line)
        if m:
            front.url = m.group(1)
            if not want_key:
                break
        m = re.search(r"API key \(\S+, shown once\): (\S+)", line)
        if m:
            key = m.group(1)
            break
        if time.time() > deadline:
            break
    assert front.url, f"router did not start: {front.lines}"
    threading.Thread(target=lambda: [front.lines.append(x) for x in proc.stdout], daemon=True).start()
    return front, key


@dataclass
class ClusterUnderTest:
    ray: object
    address: str
    front: Front
    api_key: str
    cordon: Path
    data: Path

    def node_secret(self, node: str) -> str:
        """The cluster secret as the node's actor wrote it (what a router sends)."""
        return (self.data / node / "cluster-secret").read_text().strip()

    def status(self) -> List[dict]:
        out = subprocess.run(
            [str(self.cordon), "cluster", "status", "--json", "--ray", self.address, "--python", sys.executable],
            capture_output=True, text=True, timeout=60, check=True,
        )
        return json.loads(out.stdout)["nodes"]

    def wait_nodes(self, alive: int, timeout: float = 60) -> List[dict]:
        deadline = time.time() + timeout
        nodes: List[dict] = []
        while time.time() < deadline:
            nodes = self.status()
            if sum(1 for n in nodes if n["alive"]) == alive:
                return nodes
            time.sleep(0.5)
        raise AssertionError(f"wanted {alive} alive nodes, have {nodes}")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterUnderTest]:
    if not _only_loopback():
        pytest.fail("run the cluster suite in a network namespace that has only loopback "
                    "(scripts/cluster-e2e.sh does)", pytrace=False)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Reservations of a router that died mid-create lapse after this (60 s by default).
    os.environ["CORDON_CLUSTER_LEASE"] = str(LEASE)
    src = str(REPO / "clients" / "python" / "src")
    os.environ["PYTHONPATH"] = src + os.pathsep + os.environ.get("PYTHONPATH", "")
    sys.path.insert(0, src)
    from ray.cluster_utils import Cluster

    rc = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1, "include_dashboard": False, "object_store_memory": 80 << 20,
            # Faster than Ray's default (3 s x 5) so a node killed is seen dead within the
            # suite's bound, but not so fast that a raylet starved of CPU on a loaded 2-core
            # machine (a node being added, sandboxes starting) is declared dead while healthy:
            # Ray's verdict is final, and the node would never come back.
            "_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 5,
                               "health_check_initial_delay_ms": 5000},
        },
    )
    workers = [rc.add_node(num_cpus=1, object_store_memory=80 << 20) for _ in range(NODES - 1)]
    rc.wait_for_nodes()
    data = tmp_path_factory.mktemp("cluster-data")
    front, key = start_front(
        ["up", "--ray", rc.address, "--listen", "127.0.0.1:0", "--data-root", str(data), "--slots", "8"],
        want_key=True,
    )
    assert key.startswith("cdn_"), front.lines
    c = ClusterUnderTest(rc, rc.address, front, key, cordon_bin(), data)
    c.workers = workers  # type: ignore[attr-defined]
    c.wait_nodes(NODES)
    # The router has the view too once it answers its health with every node.
    import httpx

    deadline = time.time() + 30
    while time.time() < deadline:
        r = httpx.get(front.url + "/healthz")
        if r.status_code == 200 and r.json()["nodes_alive"] == NODES:
            break
        time.sleep(0.3)
    try:
        yield c
    finally:
        front.stop()
        rc.shutdown()


@pytest.fixture(scope="session", autouse=True)
def e2b_env(cluster: ClusterUnderTest) -> Iterator[None]:
    """The three variables an E2B program is pointed at cordon with — here, the router."""
    os.environ["E2B_API_URL"] = cluster.front.url
    os.environ["E2B_SANDBOX_URL"] = cluster.front.url
    os.environ["E2B_API_KEY"] = cluster.api_key
    os.environ.pop("E2B_DOMAIN", None)
    yield


def node_of(sandbox_id: str) -> str:
    return sandbox_id.rsplit("-", 1)[0]


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
