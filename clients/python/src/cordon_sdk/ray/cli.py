"""``python -m cordon_sdk.ray.cli``: what ``cordon cluster`` asks of Ray. ``membership`` streams
the cluster's view as JSON lines for a router (and with ``--ensure-nodes`` starts a node actor
on each Ray node that lacks one); ``add-key``, ``revoke-key``, ``drain`` and ``status`` act on
the control actor.

Threat model: run by the operator (or the router) with Ray access; its stdout carries the
cluster secret to the router over a pipe only, never to a terminal (``status`` omits it).
"""

import argparse
import json
import os
import sys
import time

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


def _emit(obj: object) -> None:
    _out.write(json.dumps(obj) + "\n")
    _out.flush()


def _connect(address: str) -> None:
    ray.init(address=address, namespace=_actors.NAMESPACE, logging_level="ERROR", log_to_driver=False,
             configure_logging=False)


def membership(a: argparse.Namespace) -> None:
    ctl = _actors.control(create=True)
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
