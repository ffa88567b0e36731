"""State that outlives a sandbox, driven by the published E2B SDK: create_snapshot, a sandbox
created from the snapshot (its id as the template), list_snapshots, delete_snapshot, fork(count)
and the Volume API (create, connect, list, mount into sandboxes, destroy). Files only: what is
not carried (memory, processes) is named in the answer, and asking for memory is refused."""

from __future__ import annotations

import uuid

import pytest


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_a_sandbox_created_from_a_snapshot_starts_with_its_files(sbx):
    from e2b import Sandbox

    sbx.files.write("/home/user/state.txt", "before the snapshot")
    snap = sbx.create_snapshot(name=_name("snap"))
    assert snap.snapshot_id
    # The parent runs on, and what it writes later is not in the snapshot.
    sbx.files.write("/home/user/state.txt", "after the snapshot")
    child = Sandbox.create(snap.snapshot_id, timeout=120)
    try:
        assert child.files.read("/home/user/state.txt") == "before the snapshot"
        r = child.commands.run("cat /home/user/state.txt")
        assert r.stdout == "before the snapshot"
    finally:
        child.kill()
        Sandbox.delete_snapshot(snap.snapshot_id)


def test_snapshots_are_listed_by_sandbox_and_deleted(sbx):
    from e2b import Sandbox

    name = _name("listed")
    snap = Sandbox.create_snapshot(sbx.sandbox_id, name=name)
    mine = [s.snapshot_id for s in sbx.list_snapshots().next_items()]
    assert mine == [snap.snapshot_id]
    everyone = [s.snapshot_id for s in Sandbox.list_snapshots().next_items()]
    assert snap.snapshot_id in everyone
    assert Sandbox.delete_snapshot(snap.snapshot_id) is True
    assert snap.snapshot_id not in [s.snapshot_id for s in Sandbox.list_snapshots().next_items()]
    # Deleting it again, or one that never was, is "not found", not an error.
    assert Sandbox.delete_snapshot(snap.snapshot_id) is False
    # And a create naming it as its template no longer finds it.
    with pytest.raises(Exception, match="not found"):
        Sandbox.create(snap.snapshot_id, timeout=60)


def test_a_memory_snapshot_is_refused_not_pretended(sbx):
    from e2b.exceptions import SandboxException

    with pytest.raises(SandboxException, match="memory"):
        sbx.create_snapshot(name=_name("full"), mode="full")
    # A filesystem snapshot is what this server offers.
    snap = sbx.create_snapshot(name=_name("fs"), mode="filesystem")
    type(sbx).delete_snapshot(snap.snapshot_id)


def test_forks_see_the_parents_files_and_not_its_later_writes(sbx):
    sbx.files.write("/home/user/seed.txt", "from the parent")
    forks = sbx.fork(count=2, timeout=120)
    try:
        assert len(forks) == 2
        for f in forks:
            assert not isinstance(f, Exception), f
        a, b = forks
        assert len({sbx.sandbox_id, a.sandbox_id, b.sandbox_id}) == 3
        sbx.files.write("/home/user/seed.txt", "parent wrote later")
        a.files.write("/home/user/seed.txt", "fork a wrote")
        assert b.files.read("/home/user/seed.txt") == "from the parent"
        assert a.files.read("/home/user/seed.txt") == "fork a wrote"
        assert sbx.files.read("/home/user/seed.txt") == "parent wrote later"
        assert sbx.is_running()
    finally:
        for f in forks:
            if not isinstance(f, Exception):
                f.kill()


def test_two_sandboxes_on_one_volume_share_it_and_destroy_waits_for_them():
    from e2b import Sandbox, Volume
    from e2b.exceptions import VolumeException

    name = _name("vol")
    vol = Volume.create(name)
    assert vol.name == name
    assert Volume.connect(vol.volume_id).name == name
    assert name in [v.name for v in Volume.list()]
    a = Sandbox.create(timeout=120, volume_mounts={"/data": vol})
    b = Sandbox.create(timeout=120, volume_mounts={"/mnt/shared": name})
    try:
        a.files.write("/data/from-a.txt", "written by a")
        assert b.files.read("/mnt/shared/from-a.txt") == "written by a"
        b.commands.run("echo written by b > /mnt/shared/from-b.txt")
        assert a.files.read("/data/from-b.txt") == "written by b\n"
        # Mounted: refused, and the files are still there.
        with pytest.raises(VolumeException, match="(?i)in use|mount"):
            Volume.destroy(vol.volume_id)
        assert a.files.read("/data/from-a.txt") == "written by a"
    finally:
        a.kill()
        b.kill()
    assert Volume.destroy(vol.volume_id) is True
    assert name not in [v.name for v in Volume.list()]
    assert Volume.destroy(vol.volume_id) is False


def test_a_volumes_files_are_read_and_written_without_a_sandbox_and_sandboxes_see_them():
    from e2b import Sandbox, Volume

    vol = Volume.create(_name("files"))
    try:
        st = vol.write_file("/dir/a.txt", "hello volume", force=True)
        assert (st.name, st.type, st.size) == ("a.txt", "file", 12)
        assert vol.read_file("/dir/a.txt") == "hello volume"
        assert vol.read_file("/dir/a.txt", format="bytes") == b"hello volume"
        assert vol.get_info("/dir").type == "directory"
        assert [e.name for e in vol.list("/dir")] == ["a.txt"]
        assert vol.exists("/dir/a.txt") and not vol.exists("/dir/none")
        made = vol.make_dir("/deep/er", force=True)
        assert made.type == "directory"
        # Set-user-ID is dropped whoever asks; another owner than the sandbox user is refused.
        assert vol.update_metadata("/dir/a.txt", mode=0o4755).mode & 0o7777 == 0o755
        with pytest.raises(Exception, match="sandbox user"):
            vol.update_metadata("/dir/a.txt", uid=0)
        sbx = Sandbox.create(timeout=120, volume_mounts={"/data": vol})
        try:
            assert sbx.files.read("/data/dir/a.txt") == "hello volume"
            sbx.commands.run("echo from the sandbox > /data/dir/b.txt")
            # A link the sandbox plants resolves inside the volume, never on the host.
            sbx.commands.run("ln -s /etc /data/etc-link && ln -s ../../../../../etc/passwd /data/up")
        finally:
            sbx.kill()
        assert vol.read_file("/dir/b.txt") == "from the sandbox\n"
        host_passwd = open("/etc/passwd", "rb").read()
        for path in ("/etc-link/passwd", "/up", "/../../../etc/passwd"):
            try:
                got = vol.read_file(path, format="bytes")
            except Exception:
                continue
            assert got != host_passwd, path
        vol.remove("/dir")
        assert not vol.exists("/dir/a.txt")
    finally:
        Volume.destroy(vol.volume_id)


def test_a_volume_token_opens_its_own_volume_only(server):
    from e2b import Volume

    a = Volume.create(_name("tok-a"))
    b = Volume.create(_name("tok-b"))
    try:
        a.write_file("/x", "a's", force=True)
        # b's handle with a's token: refused, and nothing written into a or b.
        forged = Volume(b.volume_id, b.name, token=a.token)
        with pytest.raises(Exception):
            forged.write_file("/y", "forged", force=True)
        with pytest.raises(Exception):
            Volume(a.volume_id, a.name, token="cdnv:nobody:" + a.name + ":00").read_file("/x")
        assert not b.exists("/y") and not a.exists("/y")
        # Another key does not get the token of a volume it cannot see.
        other = server.cordon("keys", "create", "--name", _name("tok")).strip().splitlines()[-1].strip()
        with pytest.raises(Exception):
            Volume.connect(a.volume_id, api_key=other)
    finally:
        Volume.destroy(a.volume_id)
        Volume.destroy(b.volume_id)


def test_another_keys_snapshots_volumes_and_sandboxes_are_invisible(sbx, server):
    from e2b import Sandbox, Volume
    from e2b.exceptions import NotFoundException, SandboxException

    other = server.cordon("keys", "create", "--name", _name("other")).strip().splitlines()[-1].strip()
    snap = sbx.create_snapshot(name=_name("mine"))
    vol = Volume.create(_name("minevol"))
    try:
        assert snap.snapshot_id not in [s.snapshot_id for s in Sandbox.list_snapshots(api_key=other).next_items()]
        assert vol.name not in [v.name for v in Volume.list(api_key=other)]
        with pytest.raises(Exception, match="not found"):
            Sandbox.create(snap.snapshot_id, timeout=60, api_key=other)
        with pytest.raises(Exception, match="(?i)not found|volume"):
            Sandbox.create(timeout=60, volume_mounts={"/data": vol.name}, api_key=other)
        with pytest.raises((NotFoundException, SandboxException)):
            Sandbox.fork(sbx.sandbox_id, api_key=other)
        with pytest.raises(SandboxException):
            Sandbox.create_snapshot(sbx.sandbox_id, name=_name("stolen"), api_key=other)
        # Deleting them with the other key finds nothing, and they are still there.
        assert Sandbox.delete_snapshot(snap.snapshot_id, api_key=other) is False
        assert Volume.destroy(vol.volume_id, api_key=other) is False
        assert snap.snapshot_id in [s.snapshot_id for s in sbx.list_snapshots().next_items()]
        assert vol.name in [v.name for v in Volume.list()]
    finally:
        Sandbox.delete_snapshot(snap.snapshot_id)
        Volume.destroy(vol.volume_id)


@pytest.mark.parametrize("name", ["../../escape", "/etc", "a/b", ".", "..", "x" * 200, "Upper"])
def test_hostile_snapshot_and_volume_names_are_refused_and_write_nothing(sbx, server, name):
    from e2b import Sandbox, Volume
    from e2b.exceptions import SandboxException, VolumeException

    outside = sorted(p.name for p in server.data_dir.parent.iterdir())
    # 400, saying what a name may be.
    with pytest.raises(SandboxException, match="1 to 63 characters"):
        sbx.create_snapshot(name=name)
    with pytest.raises(VolumeException, match="1 to 63 characters"):
        Volume.create(name)
    assert [s for s in Sandbox.list_snapshots().next_items() if name in s.snapshot_id] == []
    assert sorted(p.name for p in server.data_dir.parent.iterdir()) == outside
