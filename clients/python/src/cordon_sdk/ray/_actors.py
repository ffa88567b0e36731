"""The Ray actors of a cordon cluster.

``Control`` (one per cluster, detached, named ``cordon-control``) is the cluster's small shared
state: its secret, its API keys (hashes only) and the nodes' last reports. It persists the
secret, keys and drains in Ray's GCS key-value store, so a restarted control actor (Ray restarts
it) keeps them. Being one actor, it serialises every change — which is what makes a key's
sandbox quota hold across the cluster: a router reserves a slot here before it forwards a
create (``reserve``), and a key's use is its live sandboxes as the nodes last reported them
plus the reservations not yet seen in a report. A reservation ends when its sandbox shows up
in its node's report (it is then counted there), when the router says the create failed
(``release``), when two reports of its node taken after the create do not hold it (deleted
meanwhile), when its node is lost, or after ``LEASE`` seconds unconfirmed (a router that died
mid-create). A deleted or ended sandbox leaves the count with its node's next report.

``Node`` (one per Ray node, detached, named ``cordon-node-<node>``, pinned to its Ray node by
node affinity) starts and supervises that host's ``cordon serve`` as a cluster node: listening
on the Ray node's address, demanding the cluster secret of every request, with the cluster's
keys synced into its registry. If that ``cordon serve`` exits, the actor exits too and Ray
restarts it (``max_restarts=-1``). The ``cordon serve`` dies with the actor's process
(``PR_SET_PDEATHSIG``), and its sandboxes with it: a node that leaves takes its sandboxes along,
and the router says so (``sandbox_lost``).

Threat model: whoever can run code on the Ray cluster controls it (Ray's own model); nothing
here widens that. The cluster secret is written only to a 0600 file in the node's data
directory and never logged; key secrets never reach the cluster (hashes only).
"""

import json
import os
import secrets
import signal
import sqlite3
import subprocess
import threading
import time
import urllib.request
from typing import Any, Dict, List, Optional

import ray

NAMESPACE = "cordon"
CONTROL = "cordon-control"
NODE_PREFIX = "cordon-node-"
_KV_KEY = b"cordon:control:v1"
# A node whose actor has not reported for this long counts as gone, whatever Ray says yet.
STALE_AFTER = 3.0
REPORT_EVERY = 0.5
# How long a (re)started control actor's view may still lack nodes that have not reported to
# it yet: several report periods, and a report delayed on a loaded machine.
SETTLE = 3 * STALE_AFTER
# An unconfirmed reservation (its router died mid-create) holds its slot this long at most
# (CORDON_CLUSTER_LEASE, in seconds, in the Ray workers' environment sets another bound).
LEASE = float(os.environ.get("CORDON_CLUSTER_LEASE", "60"))
SECRET_HEADER = "x-cordon-cluster-secret"


def node_name(ray_node_id: str) -> str:
    """The cordon node name of a Ray node: the prefix of its sandboxes' ids."""
    return "n" + ray_node_id[:12]


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class Control:
    def __init__(self) -> None:
        from ray.experimental import internal_kv

        self._kv = internal_kv
        raw = internal_kv._internal_kv_get(_KV_KEY)
        saved = json.loads(raw) if raw else {}
        self._secret: str = saved.get("secret") or secrets.token_hex(32)
        self._keys: Dict[str, Dict[str, Any]] = saved.get("keys", {})
        self._draining: List[str] = saved.get("draining", [])
        self._version: int = saved.get("version", 0)
        self._nodes: Dict[str, Dict[str, Any]] = {}
        # Reservation id -> {key, at, node, sandbox, reports}; node is None until confirmed.
        self._res: Dict[str, Dict[str, Any]] = {}
        # Node reports are not saved: a restarted control knows each node again only from its
        # next report, and says so meanwhile (``settling`` in the view).
        self._started = time.time()
        self._save()

    def _save(self) -> None:
        state = {"secret": self._secret, "keys": self._keys, "draining": self._draining, "version": self._version}
        self._kv._internal_kv_put(_KV_KEY, json.dumps(state).encode(), overwrite=True)

    def secret(self) -> str:
        return self._secret

    def add_key(self, record: Dict[str, Any], if_none: bool = False) -> bool:
        if if_none and self._keys:
            return False
        self._keys[record["id"]] = dict(record, revoked=False)
        self._version += 1
        self._save()
        return True

    def revoke_key(self, key_id: str) -> bool:
        if key_id not in self._keys:
            return False
        self._keys[key_id]["revoked"] = True
        self._version += 1
        self._save()
        return True

    def keys(self) -> Dict[str, Any]:
        return {"version": self._version, "keys": list(self._keys.values())}

    def drain(self, name: str, on: bool) -> bool:
        known = name in self._nodes
        if on and name not in self._draining:
            self._draining.append(name)
        if not on and name in self._draining:
            self._draining.remove(name)
        self._save()
        return known

    def report(self, info: Dict[str, Any]) -> Dict[str, Any]:
        """A node's heartbeat; answers what the node should know back."""
        name = info["node"]
        self._nodes[name] = dict(info, reported=time.time())
        held = {s for ids in info.get("sandboxes", {}).values() for s in ids}
        for rid, r in list(self._res.items()):
            if r["node"] != name:
                continue
            r["reports"] += 1
            # The node's report loop is sequential: the second report received after the
            # confirmation was taken after the create had finished.
            if r["sandbox"] in held or r["reports"] >= 2:
                del self._res[rid]
        return {"keys_version": self._version}

    def _used(self, key_id: str, now: float) -> int:
        for rid, r in list(self._res.items()):
            lost = r["node"] is not None and now - self._nodes.get(r["node"], {}).get("reported", 0) >= STALE_AFTER
            if lost or (r["node"] is None and now - r["at"] > LEASE):
                del self._res[rid]
        n = sum(1 for r in self._res.values() if r["key"] == key_id)
        for node in self._nodes.values():
            if now - node["reported"] < STALE_AFTER:
                n += len(node.get("sandboxes", {}).get(key_id, []))
        return n

    def reserve(self, key_hash: str) -> Dict[str, Any]:
        """One sandbox slot of the key whose secret hashes to ``key_hash``, if its quota has room
        across the cluster. An unknown or revoked key gets ``unknown``: the node refuses it."""
        key = next((k for k in self._keys.values() if k["hash"] == key_hash and not k.get("revoked")), None)
        if key is None:
            return {"unknown": True}
        now = time.time()
        limit = int(key.get("max_sandboxes", 0))
        if self._used(key["id"], now) >= limit:
            return {"ok": False, "max": limit}
        rid = secrets.token_hex(8)
        self._res[rid] = {"key": key["id"], "at": now, "node": None, "sandbox": None, "reports": 0}
        return {"ok": True, "rid": rid}

    def confirm(self, rid: str, node: str, sandbox: Optional[str]) -> bool:
        """The create of reservation ``rid`` made ``sandbox`` on ``node``."""
        r = self._res.get(rid)
        if r is None:
            return False
        held = self._nodes.get(node, {}).get("sandboxes", {}).get(r["key"], [])
        if sandbox is not None and sandbox in held:
            del self._res[rid]  # already counted by the node's report
            return True
        r.update(node=node, sandbox=sandbox, reports=0)
        return True

    def release(self, rid: str) -> bool:
        """The create of reservation ``rid`` failed: its slot is free."""
        return self._res.pop(rid, None) is not None

    def view(self) -> Dict[str, Any]:
        now = time.time()
        nodes = []
        for n in self._nodes.values():
            n = dict(n)
            n.pop("sandboxes", None)
            n["age"] = now - n.pop("reported")
            n["draining"] = n["node"] in self._draining
            nodes.append(n)
        return {"secret": self._secret, "nodes": nodes, "settling": now - self._started < SETTLE}


def _die_with_parent() -> None:
    # The node's cordon serve (and so its sandboxes) must not outlive the actor: Ray kills a
    # lost node's workers with SIGKILL, which would otherwise orphan it.
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class Node:
    def __init__(self, cordon: str, data_root: str, slots: int, allow_degraded: bool = False) -> None:
        self.ray_node_id = ray.get_runtime_context().get_node_id()
        self.name = node_name(self.ray_node_id)
        self.slots = slots
        self.control = ray.get_actor(CONTROL, namespace=NAMESPACE)
        self.dir = os.path.join(data_root, self.name)
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        self.secret = ray.get(self.control.secret.remote())
        secret_file = os.path.join(self.dir, "cluster-secret")
        fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.secret)
        self.cordon = cordon
        self.keys_version = -1
        self._sync_keys()
        ip = ray.util.get_node_ip_address()
        cmd = [cordon, "serve", "--listen", f"{ip}:0", "--node", self.name, "--data-dir", self.dir,
               "--cluster-secret-file", secret_file]
        if allow_degraded:
            cmd.append("--allow-degraded")
        log = open(os.path.join(self.dir, "serve.log"), "ab")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                     preexec_fn=_die_with_parent)
        self.addr = self._read_addr(log)
        self.live = 0
        self.draining = False
        self._db: Optional[sqlite3.Connection] = None
        self._report()
        threading.Thread(target=self._loop, daemon=True).start()
        threading.Thread(target=self._count_loop, daemon=True).start()

    def _read_addr(self, log: Any) -> str:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").strip()
            if line.startswith("cordon serving on http://"):
                addr = line.split("http://", 1)[1]
                # The rest of its output goes to the log, so the pipe never fills.
                threading.Thread(target=lambda: [log.write(b) for b in self.proc.stdout], daemon=True).start()
                return addr
        raise RuntimeError(f"cordon serve exited ({self.proc.wait()}); see {self.dir}/serve.log")

    def _sync_keys(self) -> None:
        got = ray.get(self.control.keys.remote())
        if got["version"] == self.keys_version:
            return
        subprocess.run([self.cordon, "keys", "sync", "--data-dir", self.dir], input=json.dumps(got["keys"]).encode(),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.keys_version = got["version"]

    def _count_live(self) -> int:
        req = urllib.request.Request(f"http://{self.addr}/metrics", headers={SECRET_HEADER: self.secret})
        with urllib.request.urlopen(req, timeout=2) as r:
            text = r.read().decode()
        return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
                   if line.startswith("cordon_sandboxes{"))

    def _sandboxes_by_key(self) -> Dict[str, List[str]]:
        """The node's live sandboxes per key, read from its registry (the node's own SQLite
        file, in WAL mode, so reading never blocks its writer)."""
        if self._db is None:
            self._db = sqlite3.connect(os.path.join(self.dir, "cordon.db"), timeout=2, check_same_thread=False)
            self._db.execute("PRAGMA query_only=1")
        out: Dict[str, List[str]] = {}
        for sid, key in self._db.execute("SELECT id, key_id FROM sandboxes WHERE state = 'running'"):
            out.setdefault(key, []).append(sid)
        return out

    def _report(self) -> None:
        info = self.info()
        # Taken before the report is sent: what the control actor relies on to end reservations.
        info["sandboxes"] = self._sandboxes_by_key()
        back = ray.get(self.control.report.remote(info), timeout=5)
        if back["keys_version"] != self.keys_version:
            self._sync_keys()

    def _loop(self) -> None:
        # The heartbeat: it must not wait on the node's server, which may be slow to answer
        # while it starts sandboxes on a loaded machine — a heartbeat late by STALE_AFTER
        # declares a healthy node's sandboxes lost.
        while True:
            if self.proc.poll() is not None:
                # Ray restarts the actor, which starts a new cordon serve.
                os._exit(1)
            try:
                self._report()
            except Exception:  # noqa: BLE001 - a missed report only ages the node's view
                pass
            time.sleep(REPORT_EVERY)

    def _count_loop(self) -> None:
        """The node's live sandboxes for placement, as the server counts them (a slow answer
        leaves the last count in the reports meanwhile)."""
        while True:
            try:
                self.live = self._count_live()
            except Exception:  # noqa: BLE001 - the last count stands
                pass
            time.sleep(REPORT_EVERY)

    def info(self) -> Dict[str, Any]:
        return {"node": self.name, "addr": self.addr, "ray_node_id": self.ray_node_id, "slots": self.slots,
                "live": self.live, "pid": self.proc.pid}


def control(create: bool = True) -> Optional[Any]:
    """The cluster's control actor (created if missing and ``create``)."""
    if create:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        # On the head node when it can be (the cluster ends with it anyway): a control actor on
        # a worker that is lost restarts elsewhere knowing no node until they report again.
        head = next((n["NodeID"] for n in ray.nodes()
                     if n.get("Alive") and "node:__internal_head__" in n.get("Resources", {})),
                    ray.get_runtime_context().get_node_id())
        return Control.options(name=CONTROL, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
                               scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=head, soft=True)).remote()
    try:
        return ray.get_actor(CONTROL, namespace=NAMESPACE)
    except ValueError:
        return None


def view(ctl: Any) -> Dict[str, Any]:
    """The cluster as the router needs it: each node with ``alive`` from Ray and its report."""
    v = ray.get(ctl.view.remote(), timeout=10)
    alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    for n in v["nodes"]:
        n["alive"] = n["ray_node_id"] in alive and n["age"] < STALE_AFTER
    return v


def ensure_nodes(cordon: str, data_root: str, slots: int, allow_degraded: bool, started: set) -> None:
    """A node actor on every alive Ray node that has none yet."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    for n in ray.nodes():
        nid = n["NodeID"]
        if not n.get("Alive") or nid in started:
            continue
        Node.options(
            name=NODE_PREFIX + node_name(nid),
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=nid, soft=False),
        ).remote(cordon, data_root, slots, allow_degraded)
        started.add(nid)
