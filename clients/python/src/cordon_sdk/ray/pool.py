"""``SandboxPool``: a batch of inputs (an RL trainer's generated programs, say) run in sandboxes
spread over a cordon cluster, ``per_node`` at a time on each node.

The pool's workers are threads of the calling process; each holds one sandbox created through
the cluster's router, which places it (so the sandboxes spread over the nodes by free capacity
and count against the key's cluster-wide quota). ``fn(sandbox, item)`` runs in the worker and
drives its sandbox over HTTP: the work happens in the sandboxes, on the cluster's nodes. With
``fresh=True`` every item gets a new sandbox (killed after it); otherwise a worker reuses its
sandbox. An item whose sandbox was lost with its node (``sandbox_lost``, ``node_lost``, or no
answer) is run once more in a new sandbox, which the router places on a node still alive; a
second loss is the item's error. ``map`` answers in input order; ``imap_unordered`` as
results come.

Threat model: ``fn`` is the caller's code and runs with the caller's rights; what it runs in
the sandboxes is untrusted and confined there. The API key is the caller's and is sent only to
the router.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from typing import Any, Callable, Iterable, Iterator, List, Optional, Tuple

from ..errors import CordonConnectionError, CordonError, CordonTimeoutError
from ..sandbox import Sandbox

# Error codes that mean the sandbox went away with its node (the router's words).
_LOST = {"sandbox_lost", "node_lost"}
# Creates refused for want of a node (one just lost, or all full) are retried this long.
_CREATE_PATIENCE = 30.0
_PROGRESS_FROM = 100


def _is_loss(e: BaseException) -> bool:
    if isinstance(e, (CordonConnectionError, CordonTimeoutError)):
        return True
    return isinstance(e, CordonError) and (e.code in _LOST or e.status in (502, 503))


def _alive_nodes() -> int:
    """Alive cordon nodes, as the cluster's control actor reports them (1 without Ray)."""
    try:
        import ray

        from . import _actors

        if not ray.is_initialized():
            return 1
        ctl = _actors.control(create=False)
        return max(1, sum(1 for n in _actors.view(ctl)["nodes"] if n["alive"])) if ctl else 1
    except Exception:  # noqa: BLE001 - sizing only
        return 1


class _Progress:
    def __init__(self, total: int, enabled: Optional[bool]) -> None:
        self.total, self.done, self._bar, self._next = total, 0, None, 0
        self.enabled = total >= _PROGRESS_FROM if enabled is None else enabled
        if self.enabled:
            try:
                from tqdm import tqdm  # type: ignore[import-untyped]

                self._bar = tqdm(total=total, desc="cordon pool")
            except ImportError:
                pass

    def tick(self) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(1)
        elif self.done >= self._next or self.done == self.total:
            print(f"cordon pool: {self.done}/{self.total}", file=sys.stderr, flush=True)
            self._next = self.done + max(1, self.total // 10)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class SandboxPool:
    """``per_node`` sandboxes per alive node of the cluster (``size`` overrides the count).

    ``base_url`` / ``api_key`` default to ``CORDON_URL`` / ``CORDON_API_KEY`` (the router and a
    cluster key); ``create`` holds further :meth:`Sandbox.create` arguments (``ttl``, ``memory``…).
    """

    def __init__(self, profile: str = "default", per_node: int = 8, *, fresh: bool = False,
                 size: Optional[int] = None, base_url: Optional[str] = None, api_key: Optional[str] = None,
                 progress: Optional[bool] = None, **create: Any) -> None:
        self.profile = profile
        self.fresh = fresh
        self.size = size or per_node * _alive_nodes()
        self.base_url = base_url or os.environ.get("CORDON_URL")
        self.api_key = api_key or os.environ.get("CORDON_API_KEY")
        self.progress = progress
        self.create_opts = dict(create)
        self.create_opts.setdefault("ttl", "30m")
        self.stats = {"retried": 0, "sandboxes": 0, "completed": 0}
        self._live: dict = {}
        self._lock = threading.Lock()

    def sandbox_ids(self) -> List[str]:
        """The sandboxes the pool holds now."""
        with self._lock:
            return list(self._live)

    def _new_sandbox(self) -> Sandbox:
        deadline = time.time() + _CREATE_PATIENCE
        while True:
            try:
                sb = Sandbox.create(self.profile, base_url=self.base_url, api_key=self.api_key, **self.create_opts)
                with self._lock:
                    self._live[sb.id] = sb
                    self.stats["sandboxes"] += 1
                return sb
            except CordonError as e:
                if not (_is_loss(e) or e.status == 429) or time.time() > deadline:
                    raise
                time.sleep(0.2)

    def _drop(self, sb: Optional[Sandbox], kill: bool) -> None:
        if sb is None:
            return
        with self._lock:
            self._live.pop(sb.id, None)
        if kill:
            try:
                sb.kill()
            except Exception:  # noqa: BLE001 - lost with its node, or already gone
                pass

    def _run(self, fn: Callable[[Sandbox, Any], Any], items: Iterable[Any],
             fresh: Optional[bool]) -> Iterator[Tuple[int, bool, Any]]:
        """(index, ok, result or exception) for each item, as they finish."""
        fresh = self.fresh if fresh is None else fresh
        work: "queue.Queue[Optional[Tuple[int, Any, int]]]" = queue.Queue()
        done: "queue.Queue[Tuple[int, bool, Any]]" = queue.Queue()
        todo = list(items)
        for i, item in enumerate(todo):
            work.put((i, item, 0))
        stop = threading.Event()

        def worker() -> None:
            sb: Optional[Sandbox] = None
            while not stop.is_set():
                try:
                    job = work.get(timeout=0.2)
                except queue.Empty:
                    continue
                if job is None:
                    break
                i, item, tries = job
                try:
                    if sb is None:
                        sb = self._new_sandbox()
                    out = fn(sb, item)
                    done.put((i, True, out))
                    if fresh:
                        self._drop(sb, kill=True)
                        sb = None
                except Exception as e:  # noqa: BLE001 - said per item
                    lost = _is_loss(e)
                    self._drop(sb, kill=not lost)
                    sb = None
                    if lost and tries == 0:
                        with self._lock:
                            self.stats["retried"] += 1
                        work.put((i, item, 1))
                    else:
                        done.put((i, False, e))
            self._drop(sb, kill=True)

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(self.size, len(todo)))]
        for t in threads:
            t.start()
        bar = _Progress(len(todo), self.progress)
        try:
            for _ in range(len(todo)):
                got = done.get()
                with self._lock:
                    self.stats["completed"] += 1
                bar.tick()
                yield got
        finally:
            bar.close()
            stop.set()
            for _ in threads:
                work.put(None)
            for t in threads:
                t.join()

    def map(self, fn: Callable[[Sandbox, Any], Any], items: Iterable[Any], *,
            fresh: Optional[bool] = None) -> List[Any]:
        """``[fn(sandbox, item) for item in items]``, run over the pool; in input order. The
        first item that failed (after its retry, for a lost node) raises its error."""
        todo = list(items)
        results: List[Any] = [None] * len(todo)
        for i, ok, out in self._run(fn, todo, fresh):
            if not ok:
                raise out
            results[i] = out
        return results

    def imap_unordered(self, fn: Callable[[Sandbox, Any], Any], items: Iterable[Any], *,
                       fresh: Optional[bool] = None) -> Iterator[Any]:
        """``fn(sandbox, item)`` for each item, yielded as they finish."""
        for _, ok, out in self._run(fn, items, fresh):
            if not ok:
                raise out
            yield out
