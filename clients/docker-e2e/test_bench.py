"""The Docker door's benchmark, side by side in one run on one image: docker-py's
`containers.run(image, "true", remove=True)` against cordon's socket, against podman's
Docker-compatible service (`podman system service`), and `cordon run --image` from the shell.

Opt-in (it starts podman): `CORDON_DOCKER_BENCH=1 … pytest -s clients/docker-e2e/test_bench.py`.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import docker
import pytest

RUNS = int(os.environ.get("CORDON_DOCKER_BENCH_RUNS", "10"))

pytestmark = pytest.mark.skipif(
    os.environ.get("CORDON_DOCKER_BENCH") != "1", reason="the benchmark runs with CORDON_DOCKER_BENCH=1"
)


def _timed(fn) -> list[float]:
    fn()  # warm
    out = []
    for _ in range(RUNS):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def _row(name: str, ms: list[float]) -> str:
    return f"| {name} | {statistics.median(ms):.0f} | {min(ms):.0f} | {max(ms):.0f} |"


def test_containers_run_true_side_by_side(client, dserver, image, tmp_path):
    rows = []
    cordon_ms = _timed(lambda: client.containers.run(image, ["busybox", "true"], network_disabled=True, remove=True))
    rows.append(_row("docker-py → cordon serve --docker-socket", cordon_ms))
    run_ms = _timed(
        lambda: subprocess.run(
            [str(dserver.server.binary), "run", "--image", image, "--data-dir", str(dserver.server.data_dir), "--", "busybox", "true"],
            check=True, capture_output=True,
        )
    )
    rows.append(_row("cordon run --image (CLI)", run_ms))
    podman_ms = None
    if shutil.which("podman") and os.geteuid() == 0:
        # As crates/cordon-bench does: podman's default rlimits as root need CAP_SYS_RESOURCE
        # to set (lower ones do not, and cost the same), and crun refuses hybrid cgroup hosts.
        ulimits = [docker.types.Ulimit(name=n, soft=1024, hard=1024) for n in ("nofile", "nproc")]
        for runtime in ("crun", "runc"):
            if podman_ms or not shutil.which(runtime):
                continue
            root = Path(tempfile.mkdtemp(prefix="cdb-", dir="/tmp"))  # podman: runroot <= 50 chars
            sock = root / "podman.sock"
            base = ["podman", "--root", str(root / "s"), "--runroot", str(root / "r"),
                    "--storage-opt", "overlay.skip_mount_home=true", "--runtime", runtime]
            pulled = subprocess.run(base + ["pull", "-q", "--tls-verify=false", image], capture_output=True, text=True)
            assert pulled.returncode == 0, pulled.stderr
            svc = subprocess.Popen(base + ["system", "service", "--time=0", f"unix://{sock}"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                deadline = time.monotonic() + 30
                while not sock.exists():
                    assert time.monotonic() < deadline, "podman system service did not start"
                    time.sleep(0.1)
                pc = docker.DockerClient(base_url=f"unix://{sock}", timeout=120)
                try:
                    podman_ms = _timed(lambda: pc.containers.run(
                        image, ["busybox", "true"], network_disabled=True, ulimits=ulimits, remove=True))
                    rows.append(_row(f"docker-py → podman system service ({runtime})", podman_ms))
                except docker.errors.APIError as e:
                    print(f"podman with {runtime}: {e}")
            finally:
                svc.terminate()
                svc.wait(timeout=30)
                subprocess.run(base + ["system", "reset", "--force"], capture_output=True)
                shutil.rmtree(root, ignore_errors=True)
    print(f"\n{RUNS} runs each, ms:\n| path | p50 | min | max |\n|---|---|---|---|")
    print("\n".join(rows))
    if podman_ms:
        print(f"cordon / podman: {statistics.median(cordon_ms) / statistics.median(podman_ms):.2f}x")
    print(f"cordon door / cordon run --image: {statistics.median(cordon_ms) / statistics.median(run_ms):.2f}x")
