"""``python -m cordon_sdk.ray.cli``: what ``cordon cluster`` asks of Ray. ``membership`` streams
the cluster's view as JSON lines for a router (and with ``--ensure-nodes`` starts a node actor
on each Ray node that lacks one), and answers the router's quota calls read from its stdin
(``{"id": N, "op": "reserve"|"confirm"|"release", …}`` → ``{"reply": N, "result": …}`` on
stdout, between views); ``add-key``, ``revoke-key``, ``drain`` and ``status`` act on
the control actor.

Threat model: run by the operator (or the router) with Ray access; its stdout carries the
cluster secret to the router over a pipe only, never to a terminal (``status`` omits it).
"""

import argparse
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import ray

from . import _actors


def _keep_stdout_for_us() -> None:
    """Ray's driver prints its cluster's events (a raylet that died, …) to stdout, where the
    router reads one JSON view per line: the views get a descriptor of their own and
    everything else printed to stdout goes to stderr."""
    global _out
    _out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)


_out = sys.stdout
_out_lock = threading.Lock()


def _emit(obj: object) -> None:
    line = json.dumps(obj) + "\n"
    with _out_lock:
        _out.write(line)
        _out.flush()


# The control actor's methods a router may call, with their arguments.
_CALLS = {"reserve": ("hash",), "confirm": ("rid", "node", "sandbox"), "release": ("rid",)}


def _serve_calls(ctl: object) -> None:
    """The router's quota calls, each answered as soon as the control actor has (the actor
    serialises them; threads only keep one slow call from holding up the next)."""
    pool = ThreadPoolExecutor(max_workers=16)

    def one(req: dict) -> None:
        try:
            args = [req.get(a) for a in _CALLS[req["op"]]]
            result = ray.get(getattr(ctl, req["op"]).remote(*args), timeout=10)
            _emit({"reply": req["id"], "result": result})
        except Exception as e:  # noqa: BLE001 - the router fails the create closed
            _emit({"reply": req.get("id"), "error": str(e)[:200]})

    for line in sys.stdin:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        if isinstance(req, dict) and req.get("op") in _CALLS:
            pool.submit(one, req)
    # The router is gone: so is the reason to run.
    os._exit(0)


def _connect(address: str) -> None:
    ray.init(address=address, namespace=_actors.NAMESPACE, logging_level="ERROR", log_to_driver=False,
             configure_logging=False)


def membership(a: argparse.Namespace) -> None:
    ctl = _actors.control(create=True)
    threading.Thread(target=_serve_calls, args=(ctl,), daemon=True).start()
    started: set = set()
    next_ensure = 0.0
    while True:
        if a.ensure_nodes and time.time() >= next_ensure:
            _actors.ensure_nodes(a.cordon, a.data_root, a.slots, a.allow_degraded, started)
            next_ensure = time.time() + 2.0
        try:
            v = _actors.view(ctl)
        except Exception as e:  # noqa: BLE001 - the router keeps its last view meanwhile
            print(f"cordon membership: {e}", file=sys.stderr)
            time.sleep(a.period)
            continue
        _emit(v)
        time.sleep(a.period)


def status(a: argparse.Namespace) -> None:
    ctl = _actors.control(create=False)
    if ctl is None:
        print("no cordon cluster on this Ray cluster (run `cordon cluster up`)", file=sys.stderr)
        sys.exit(1)
    v = _actors.view(ctl)
    nodes = sorted(v["nodes"], key=lambda n: n["node"])
    for n in nodes:
        n.pop("age", None)
    if a.json:
        _emit({"nodes": nodes})
        return
    print(f"{'NODE':<16}{'HEALTH':<10}{'ADDRESS':<24}{'SANDBOXES':>10}{'SLOTS':>7}", file=_out)
    for n in nodes:
        health = ("alive" if n["alive"] else "lost") + ("/drain" if n["draining"] else "")
        print(f"{n['node']:<16}{health:<10}{n['addr']:<24}{n['live']:>10}{n['slots']:>7}", file=_out)


def add_key(a: argparse.Namespace) -> None:
    record = json.loads(sys.stdin.read())
    added = ray.get(_actors.control().add_key.remote(record, a.if_none))
    print("added" if added else "exists", file=_out)


def revoke_key(a: argparse.Namespace) -> None:
    found = ray.get(_actors.control().revoke_key.remote(a.id))
    print(f"revoked {a.id}" if found else f"no key {a.id}", file=_out)
    if not found:
        sys.exit(1)


def drain(a: argparse.Namespace) -> None:
    known = ray.get(_actors.control().drain.remote(a.node, not a.undo))
    print(f"{a.node}: {'open' if a.undo else 'draining'}" + ("" if known else " (no such node reports now)"), file=_out)


def main() -> None:
    p = argparse.ArgumentParser(prog="cordon_sdk.ray.cli")
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("membership")
    m.add_argument("--ensure-nodes", action="store_true")
    m.add_argument("--cordon", default="cordon")
    m.add_argument("--data-root", default="/var/lib/cordon/cluster")
    m.add_argument("--slots", type=int, default=64)
    m.add_argument("--allow-degraded", action="store_true")
    m.add_argument("--period", type=float, default=0.5)
    s = sub.add_parser("status")
    s.add_argument("--json", action="store_true")
    k = sub.add_parser("add-key")
    k.add_argument("--if-none", action="store_true")
    r = sub.add_parser("revoke-key")
    r.add_argument("id")
    d = sub.add_parser("drain")
    d.add_argument("node")
    d.add_argument("--undo", action="store_true")
    for q in (m, s, k, r, d):
        q.add_argument("--ray", default="auto")
    a = p.parse_args()
    _keep_stdout_for_us()
    _connect(a.ray)
    {"membership": membership, "status": status, "add-key": add_key, "revoke-key": revoke_key,
     "drain": drain}[a.cmd](a)


if __name__ == "__main__":
    main()
