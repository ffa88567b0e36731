"""A router killed (SIGKILL) and restarted mid-load loses no sandbox: the router keeps no table,
so every sandbox whose create was answered answers again through the restarted router (and
through the other), calls in flight when it died fail at once instead of hanging, and its
membership process does not outlive it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time

import httpx
from conftest import ClusterUnderTest, free_port, start_front

# Sandboxes the load keeps (the rest it deletes again): the cluster has 24 slots.
KEEP = 8


def _wait_router(url: str, nodes: int) -> None:
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            r = httpx.get(url + "/healthz")
            if r.status_code == 200 and r.json()["nodes_alive"] == nodes:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"router {url} never saw the cluster")


def _children(pid: int) -> list:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_a_router_killed_and_restarted_mid_load_loses_no_sandbox(cluster: ClusterUnderTest) -> None:
    nodes = sum(1 for n in cluster.status() if n["alive"])
    port = free_port()
    args = ["router", "--ray", cluster.address, "--listen", f"127.0.0.1:{port}"]
    router, _ = start_front(args, want_key=False)
    _wait_router(router.url, nodes)
    membership = _children(router.proc.pid)
    assert membership, "the router runs its membership process"
    auth = {"Authorization": f"Bearer {cluster.api_key}"}
    made: list = []
    failures: list = []
    stop = threading.Event()
    lock = threading.Lock()

    def load() -> None:
        with httpx.Client(timeout=30) as c:
            while not stop.is_set():
                t = time.time()
                try:
                    r = c.post(router.url + "/v1/sandboxes", json={"ttl": "3m"}, headers=auth)
                    if r.status_code == 201:
                        sid = r.json()["id"]
                        c.post(f"{router.url}/v1/sandboxes/{sid}/exec", json={"cmd": ["true"]}, headers=auth)
                        with lock:
                            keep = len(made) < KEEP
                            if keep:
                                made.append(sid)
                        if not keep:  # churn without filling the cluster
                            c.delete(f"{router.url}/v1/sandboxes/{sid}", headers=auth)
                except httpx.HTTPError:
                    # The router died under this call: it must fail at once, not hang.
                    with lock:
                        failures.append(time.time() - t)
                    time.sleep(0.05)

    workers = [threading.Thread(target=load, daemon=True) for _ in range(3)]
    for w in workers:
        w.start()
    try:
        while len(made) < KEEP // 2:
            time.sleep(0.05)
        router.proc.send_signal(signal.SIGKILL)
        router.proc.wait(10)
        # Its membership process sees its stdin close and ends.
        deadline = time.time() + 10
        while any(os.path.exists(f"/proc/{p}") and _state(p) != "Z" for p in membership):
            assert time.time() < deadline, "the killed router's membership process lives on"
            time.sleep(0.1)
        time.sleep(0.5)
        router, _ = start_front(args, want_key=False)
        # Before it has heard from the cluster, the restarted router says so (503), never that
        # a sandbox does not exist.
        with lock:
            some = made[0]
        early = httpx.get(f"{router.url}/v1/sandboxes/{some}", headers=auth, timeout=30)
        assert early.status_code in (200, 503), early.text
        _wait_router(router.url, nodes)
        time.sleep(1.0)
    finally:
        stop.set()
        for w in workers:
            w.join(40)
    assert not any(w.is_alive() for w in workers), "a call hung across the router's restart"
    assert failures, "the load never met the dead router"
    assert max(failures) < 5, failures
    try:
        with httpx.Client(timeout=30) as c:
            for sid in made:
                for url in (router.url, cluster.front.url):
                    r = c.post(f"{url}/v1/sandboxes/{sid}/exec", json={"cmd": ["echo", sid]}, headers=auth)
                    assert r.status_code == 200, (sid, url, r.text)
                    assert sid in r.text
            listed = {s["id"] for s in c.get(cluster.front.url + "/v1/sandboxes", headers=auth).json()["sandboxes"]}
            assert set(made) <= listed
    finally:
        with httpx.Client(timeout=30) as c:
            for sid in made:
                c.delete(f"{cluster.front.url}/v1/sandboxes/{sid}", headers=auth)
        router.stop()
        # Placement in the next tests sees the nodes' reports without these sandboxes.
        time.sleep(1.5)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return re.sub(r"^.*\) ", "", f.read()).split()[0]
    except OSError:
        return "gone"
