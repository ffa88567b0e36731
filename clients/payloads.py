"""The four programs every door of cordon is tested with, and how each must end.

The programs and their limits are ``clients/payloads.json``, the file the Rust suites read too
(``crates/cordon/tests/common/payloads.rs``): the CLI, HTTP ``exec``, MCP ``run_command`` and the
Python SDK run literally the same programs. :func:`check_ending` holds the expectations of
``crates/cordon/tests/exec_limits.rs`` and ``limits_hit.rs``, for the Python doors (the MCP
suite and the SDK's): status, exit code, signal, ``limits_hit``, usage and what was cut. With a
cgroup (``enforcement.cgroup != "none"``) the OOM killer ends the OOM payload; without one
(rootless on a cgroup-v1 host) RLIMIT_DATA refuses the allocation inside Python, which raises
MemoryError and exits 1 with no limit claimed.

Imported by the test suites with ``clients/`` on ``sys.path``; stdlib only.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Mapping, Tuple

HERE = Path(__file__).resolve().parent
PAYLOADS: Dict[str, Dict[str, Any]] = {
    k: v for k, v in json.loads((HERE / "payloads.json").read_text()).items() if not k.startswith("_")
}
KEYS = ("oom", "pids_bomb", "cpu_spin", "output_flood")
assert tuple(PAYLOADS) == KEYS, f"clients/payloads.json holds {list(PAYLOADS)}, not {KEYS}"


def marker(key: str) -> str:
    """A word that tags every process of one run (it follows the script in argv, so forked
    children carry it in /proc/PID/cmdline too)."""
    return f"cordontest-{key}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


def argv(key: str, tag: str) -> List[str]:
    return ["python3", "-c", PAYLOADS[key]["script"], tag]


def shell(key: str, tag: str) -> str:
    """The same argv as a shell command line (for MCP's ``run_command``); ``exec`` so that the
    shell does not stay as one more process under the pids limit."""
    return "exec " + " ".join(shlex.quote(a) for a in argv(key, tag))


def cli_flags(key: str) -> List[str]:
    """The payload's limits as ``cordon run`` (and ``cordon mcp``) flags."""
    p = PAYLOADS[key]
    flags: List[str] = []
    for field, flag in (("memory", "--memory"), ("pids", "--pids"), ("timeout", "--timeout"),
                        ("output_limit", "--output-limit")):
        if p.get(field) is not None:
            flags += [flag, str(p[field])]
    return flags


def procs_with(tag: str) -> List[Tuple[int, str]]:
    """Host processes whose command line contains ``tag``."""
    found = []
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if tag in cmd:
            found.append((int(entry.name), cmd))
    return found


def assert_none_left(tag: str, within: float = 0.5) -> None:
    """Nothing of the run is left on the host once its answer is in (a little grace for the
    kernel to reap what the sandbox killed)."""
    deadline = time.monotonic() + within
    while True:
        left = procs_with(tag)
        if not left:
            return
        assert time.monotonic() < deadline, f"sandbox processes outlived the run ({tag}): {left}"
        time.sleep(0.02)


def check_ending(key: str, o: Mapping[str, Any], stdout: str, stderr: str) -> None:
    """``o`` is an Outcome as JSON (its facts at least: status, exit_code, signal, limits_hit,
    usage, enforcement, *_truncated); ``stdout``/``stderr`` the output the door returned."""
    u = o["usage"]
    hits = list(o.get("limits_hit") or [])
    cgroup = o["enforcement"]["cgroup"] != "none"
    what = f"{key}: {json.dumps(dict(o))}\nstdout: {stdout[:400]!r}\nstderr: {stderr[-800:]!r}"
    if key == "oom":
        if cgroup:
            assert o["status"] == "oom", what
            assert o.get("signal") == 9, what
            assert hits == ["memory"], what
            assert (32 << 20) <= u["peak_memory_bytes"] <= (64 << 20), what
        else:
            assert (o["status"], o.get("exit_code")) == ("exited", 1), what
            assert "MemoryError" in stderr, what
            assert hits == [], what
            assert u["peak_memory_bytes"] >= 32 << 20, what
        assert u["cpu_user_ms"] + u["cpu_system_ms"] > 0, what
    elif key == "pids_bomb":
        assert (o["status"], o.get("exit_code"), o.get("signal")) == ("exited", 0, None), what
        assert hits == ["pids"], what
        assert f"errno {errno.EAGAIN}" in stdout, f"no fork was refused: {what}"
        # The payload is one of the 16; its children are the rest.
        assert stdout.splitlines()[-1:] == ["15"], what
        assert u["peak_pids"] == 16, what
    elif key == "cpu_spin":
        assert o["status"] == "timeout", what
        assert hits == ["wall_time"], what
        # Killed at the timeout, and its CPU counted all the same: two seconds of spinning on a
        # shared two-core machine, well over a tenth of it ours.
        assert u["cpu_user_ms"] >= 200, what
        assert u["cpu_user_ms"] <= u["wall_ms"] + 100, what
    elif key == "output_flood":
        assert (o["status"], o.get("exit_code"), o.get("signal")) == ("exited", 0, None), what
        assert stdout == "y" * (10 << 10), what
        assert (o["stdout_truncated"], o["stderr_truncated"]) == (True, False), what
        assert hits == ["output"], what
    else:  # pragma: no cover - KEYS is checked above
        raise KeyError(key)
