"""pause() and resume through connect(), with the published SDK: a paused sandbox runs nothing,
keeps its processes' memory and its files, is listed as paused, refuses commands, and runs on
from where it was once connected to again."""

from __future__ import annotations

import time

import httpx
import pytest
from e2b import SandboxQuery

COUNTER = "i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.05; done"


def _native(server, id: str) -> dict:
    r = httpx.get(f"{server.url}/v1/sandboxes/{id}", headers={"Authorization": f"Bearer {server.api_key}"})
    r.raise_for_status()
    return r.json()


def _count(s) -> int:
    return int(s.files.read("/tmp/n").strip() or "0")


def _wait_count(s, at_least: int) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            n = _count(s)
            if n >= at_least:
                return n
        except Exception:
            pass
        time.sleep(0.05)
    raise AssertionError(f"the counter never reached {at_least}")


def test_pause_freezes_and_connect_resumes(sbx, server):
    from e2b import Sandbox
    from e2b.exceptions import SandboxException

    sbx.files.write("/home/user/kept.txt", "still here")
    sbx.commands.run(COUNTER, background=True)
    _wait_count(sbx, 5)

    assert sbx.pause() is True
    # Listed and described as paused, by the native API too (which says how it is held).
    states = {s.sandbox_id: s.state.value for s in Sandbox.list().next_items()}
    assert states.get(sbx.sandbox_id) == "paused"
    native = _native(server, sbx.sandbox_id)
    assert native["state"] == "paused"
    assert native["paused_by"] in ("cgroup-freezer", "sigstop")

    # Nothing runs: the counter stands still (a write under way settles within a tick).
    time.sleep(0.3)
    frozen = _count(sbx)
    time.sleep(1.0)
    assert _count(sbx) == frozen, "a paused sandbox went on counting"
    # Commands are refused with a message that says why, rather than hanging.
    with pytest.raises(SandboxException) as e:
        sbx.commands.run("echo hi", timeout=10)
    assert "paused" in str(e.value)
    # Pausing again is not an error for the SDK (E2B's 409: already paused).
    assert Sandbox.pause(sbx.sandbox_id) is False

    # connect() resumes: the counter goes on from its value (the shell's memory was kept),
    # the file is there, commands run.
    again = Sandbox.connect(sbx.sandbox_id)
    n = _wait_count(again, frozen + 3)
    assert n < frozen + 200, "the counter restarted or ran while paused"
    assert again.files.read("/home/user/kept.txt") == "still here"
    assert again.commands.run("echo back").stdout == "back\n"
    states = {s.sandbox_id: s.state.value for s in Sandbox.list().next_items()}
    assert states.get(sbx.sandbox_id) == "running"


def test_paused_sandbox_can_be_killed(server):
    from e2b import Sandbox

    s = Sandbox.create(timeout=120)
    s.commands.run("sleep 1000", background=True)
    s.pause()
    # A frozen process would not die of SIGKILL; kill must thaw first and end it all.
    s.kill()
    assert _native(server, s.sandbox_id)["state"] == "deleted"


def test_paused_sandbox_counts_against_the_quota(server):
    from e2b import Sandbox
    from e2b.exceptions import RateLimitException

    key = server.new_key(max_sandboxes=1)
    s = Sandbox.create(api_key=key, timeout=60)
    try:
        s.pause()
        with pytest.raises(RateLimitException):
            Sandbox.create(api_key=key, timeout=60)
    finally:
        s.kill()


def test_a_timeout_pauses_a_sandbox_that_asked_and_connect_resumes_it_with_its_memory():
    from e2b import Sandbox, SandboxState

    sbx = Sandbox.create(timeout=2, lifecycle={"on_timeout": "pause", "auto_resume": False})
    try:
        cmd = sbx.commands.run("sleep 600", background=True)
        deadline = time.time() + 15
        while time.time() < deadline and sbx.get_info().state != SandboxState.PAUSED:
            time.sleep(0.3)
        assert sbx.get_info().state == SandboxState.PAUSED
        assert not sbx.is_running()
        sbx.connect(timeout=60)
        assert sbx.get_info().state == SandboxState.RUNNING and sbx.is_running()
        # The same processes, not a new start: the background command still runs.
        assert sbx.commands.run(f"kill -0 {cmd.pid} && echo alive").stdout.strip() == "alive"
        # Its new time to live is the connect's, not the server's longest.
        left = sbx.get_info().end_at.timestamp() - time.time()
        assert 30 < left <= 61
    finally:
        sbx.kill()


BOOT_ID = "/proc/sys/kernel/random/boot_id"


def test_a_files_only_auto_pause_keeps_the_files_and_resumes_as_a_new_boot():
    """`keep_memory=False`: the timeout pauses it to disk — files kept, processes and memory
    given up — and `connect` starts it again under the same id, handle and token."""
    from e2b import Sandbox, SandboxState

    sbx = Sandbox.create(timeout=3, lifecycle={"on_timeout": {"action": "pause", "keep_memory": False}})
    try:
        sbx.files.write("/home/user/keep.txt", "kept")
        sbx.commands.run("sleep 1000", background=True)
        boot = sbx.files.read(BOOT_ID)
        deadline = time.time() + 20
        while time.time() < deadline and sbx.get_info().state != SandboxState.PAUSED:
            time.sleep(0.3)
        assert sbx.get_info().state == SandboxState.PAUSED
        assert not sbx.is_running()
        # Paused to disk, it is listed as paused (and no longer holds a slot of the key).
        assert sbx.sandbox_id in [s.sandbox_id for s in Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()]
        sbx.connect(timeout=60)
        assert sbx.is_running()
        assert sbx.files.read("/home/user/keep.txt") == "kept"
        assert sbx.files.read(BOOT_ID) != boot, "a resume from disk is a new boot"
        assert "sleep 1000" not in [" ".join([p.cmd, *p.args]) for p in sbx.commands.list()]
        left = sbx.get_info().end_at.timestamp() - time.time()
        assert 30 < left <= 61, "its new time to live is the connect's"
    finally:
        sbx.kill()


def test_a_pause_without_memory_is_a_pause_to_disk():
    from e2b import Sandbox

    sbx = Sandbox.create(timeout=60)
    try:
        sbx.files.write("/tmp/t.txt", "t")
        assert sbx.pause(keep_memory=False)
        assert not sbx.pause(keep_memory=False), "already paused"
        sbx.connect()
        assert sbx.files.read("/tmp/t.txt") == "t"
    finally:
        sbx.kill()


def test_a_sandbox_without_the_ask_still_ends_at_its_timeout():
    from e2b import Sandbox

    sbx = Sandbox.create(timeout=2)
    deadline = time.time() + 15
    while time.time() < deadline and sbx.is_running():
        time.sleep(0.3)
    assert not sbx.is_running()
    assert sbx.sandbox_id not in [s.sandbox_id for s in Sandbox.list().next_items()]
