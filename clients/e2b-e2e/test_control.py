"""The control plane through `e2b.Sandbox` as published: create, connect, list, info, kill,
timeouts, and the errors the SDK turns into its own exceptions."""

from __future__ import annotations

import time
import uuid

import pytest
from e2b import Sandbox, SandboxQuery
from e2b.exceptions import AuthenticationException, NotFoundException, SandboxException


def test_create_info_kill(server):
    tag = uuid.uuid4().hex[:8]
    s = Sandbox.create(timeout=120, metadata={"tag": tag}, envs={"GREETING": "hi"})
    try:
        assert s.sandbox_id
        info = s.get_info()
        assert info.sandbox_id == s.sandbox_id
        assert info.metadata == {"tag": tag}
        assert info.state.value == "running"
        left = (info.end_at - info.started_at).total_seconds()
        assert 110 <= left <= 130, left
        assert s.is_running()
        # The sandbox's env vars reach its commands.
        assert s.commands.run("echo $GREETING").stdout == "hi\n"
    finally:
        assert s.kill() is True
    assert Sandbox.kill(s.sandbox_id) is False
    with pytest.raises(NotFoundException):
        Sandbox.get_info(s.sandbox_id)
    assert not s.is_running()


def test_connect_from_elsewhere_sees_the_same_sandbox(sbx):
    sbx.files.write("/home/user/mark.txt", "here")
    other = Sandbox.connect(sbx.sandbox_id)
    assert other.sandbox_id == sbx.sandbox_id
    assert other.files.read("/home/user/mark.txt") == "here"
    assert other.commands.run("cat mark.txt").stdout == "here"


def test_list_filters_by_metadata_and_pages(server):
    tag = uuid.uuid4().hex[:8]
    made = [Sandbox.create(timeout=120, metadata={"tag": tag, "n": str(i)}) for i in range(3)]
    try:
        pager = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}), limit=2)
        first = pager.next_items()
        assert len(first) == 2 and pager.has_next
        second = pager.next_items()
        assert len(second) == 1 and not pager.has_next
        ids = {x.sandbox_id for x in first + second}
        assert ids == {m.sandbox_id for m in made}
        one = Sandbox.list(query=SandboxQuery(metadata={"tag": tag, "n": "1"})).next_items()
        assert [x.sandbox_id for x in one] == [made[1].sandbox_id]
        assert all(x.state.value == "running" for x in first)
    finally:
        for m in made:
            m.kill()
    assert Sandbox.list(query=SandboxQuery(metadata={"tag": tag})).next_items() == []


def test_timeout_kills_the_sandbox_and_set_timeout_extends_it():
    s = Sandbox.create(timeout=3)
    keep = Sandbox.create(timeout=3)
    try:
        keep.set_timeout(60)
        s.commands.run("sleep 300", background=True)
        deadline = time.monotonic() + 15
        while s.is_running() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not s.is_running(), "the sandbox outlived its timeout"
        with pytest.raises(NotFoundException):
            Sandbox.connect(s.sandbox_id)
        assert keep.is_running()
        assert keep.commands.run("echo alive").stdout == "alive\n"
    finally:
        keep.kill()
        s.kill()


def test_wrong_api_key_is_refused(server):
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="cdn_not_a_key")
    with pytest.raises(AuthenticationException):
        Sandbox.list(api_key="cdn_not_a_key").next_items()


def test_unknown_template_is_an_error():
    with pytest.raises(SandboxException) as e:
        Sandbox.create(template="no-such-template")
    assert "no-such-template" in str(e.value)


def test_another_keys_sandbox_is_invisible(server, sbx):
    other = server.new_key()
    with pytest.raises(NotFoundException):
        Sandbox.connect(sbx.sandbox_id, api_key=other)
    assert Sandbox.kill(sbx.sandbox_id, api_key=other) is False
    assert sbx.is_running()


def test_quota_is_the_keys_quota(server):
    from e2b.exceptions import RateLimitException

    key = server.new_key(max_sandboxes=1)
    s = Sandbox.create(api_key=key, timeout=60)
    try:
        with pytest.raises(RateLimitException):
            Sandbox.create(api_key=key, timeout=60)
    finally:
        s.kill()
    Sandbox.create(api_key=key, timeout=60).kill()


def test_a_killed_sandbox_says_so():
    from e2b.exceptions import SandboxNotRunningException

    s = Sandbox.create(timeout=60)
    s.kill()
    with pytest.raises(SandboxNotRunningException):
        s.commands.run("echo never")
    with pytest.raises(SandboxNotRunningException):
        s.files.read("/home/user/x")
