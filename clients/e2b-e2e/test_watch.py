"""files.watch_dir with the published sync SDK (CreateWatcher / GetWatcherEvents /
RemoveWatcher): changes made inside the sandbox, by commands and by the files API, come back
as events; a watcher cannot reach outside the sandbox or another sandbox's directory."""

from __future__ import annotations

import pytest
from e2b import FilesystemEventType


def _events(h) -> set:
    return {(e.name, e.type) for e in h.get_new_events()}


def test_watch_dir_reports_creates_writes_chmods_and_removes(sbx):
    sbx.files.make_dir("/home/user/w")
    sbx.files.write("/home/user/w/old.txt", "x")
    h = sbx.files.watch_dir("/home/user/w")
    assert _events(h) == set()

    sbx.files.write("/home/user/w/new.txt", "hello")
    sbx.commands.run("echo more >> /home/user/w/old.txt")
    ev = _events(h)
    assert ("new.txt", FilesystemEventType.CREATE) in ev, ev
    assert ("old.txt", FilesystemEventType.WRITE) in ev, ev
    # Nothing happened since: nothing to report.
    assert _events(h) == set()

    sbx.commands.run("chmod 600 /home/user/w/new.txt; rm /home/user/w/old.txt; mkdir /home/user/w/sub; touch /home/user/w/sub/deep")
    ev = _events(h)
    assert ("new.txt", FilesystemEventType.CHMOD) in ev, ev
    assert ("old.txt", FilesystemEventType.REMOVE) in ev, ev
    assert ("sub", FilesystemEventType.CREATE) in ev, ev
    # Not recursive: the file inside the new directory is not reported.
    assert not any(name.startswith("sub/") for name, _ in ev), ev
    h.stop()
    with pytest.raises(Exception):
        h.get_new_events()


def test_recursive_watch_sees_nested_changes(sbx):
    sbx.files.make_dir("/home/user/r/a")
    h = sbx.files.watch_dir("/home/user/r", recursive=True)
    sbx.commands.run("mkdir -p /home/user/r/a/b && echo hi > /home/user/r/a/b/f")
    ev = _events(h)
    assert ("a/b", FilesystemEventType.CREATE) in ev, ev
    assert ("a/b/f", FilesystemEventType.CREATE) in ev, ev
    h.stop()


def test_watchers_stay_inside(sbx):
    from e2b import Sandbox

    # A host path is the sandbox's path of that name: the host's /etc changes are invisible,
    # and a missing directory is an error rather than an empty watch.
    with pytest.raises(Exception):
        sbx.files.watch_dir("/no/such/dir")
    other = Sandbox.create(timeout=60)
    try:
        h = sbx.files.watch_dir("/home/user")
        other.files.write("/home/user/theirs.txt", "other sandbox")
        assert not any("theirs" in name for name, _ in _events(h))
        h.stop()
    finally:
        other.kill()


def test_async_watch_dir_streams_events():
    import asyncio

    from e2b import AsyncSandbox

    async def until(seen: list, want) -> bool:
        for _ in range(100):
            if want in {(e.name, e.type) for e in seen}:
                return True
            await asyncio.sleep(0.05)
        return False

    async def go():
        s = await AsyncSandbox.create(timeout=60)
        try:
            await s.files.make_dir("/home/user/aw")
            seen: list = []
            h = await s.files.watch_dir("/home/user/aw", on_event=seen.append)
            await s.files.write("/home/user/aw/f.txt", "x")
            created = await until(seen, ("f.txt", FilesystemEventType.CREATE))
            await s.commands.run("rm /home/user/aw/f.txt")
            removed = await until(seen, ("f.txt", FilesystemEventType.REMOVE))
            await h.stop()
            return created, removed
        finally:
            await s.kill()

    assert asyncio.run(go()) == (True, True)
