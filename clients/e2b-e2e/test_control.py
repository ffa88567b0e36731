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


def test_rate_limit_covers_control_plane_and_envd(server):
    """E2B calls spend from the owning key's rate limit like native ones: control-plane calls
    with the key, envd and interpreter calls with the sandbox's token. Over it, the SDK raises
    its RateLimitException; the other keys are untouched; revoking the key closes the door."""
    from e2b import RateLimitException
    from e2b_code_interpreter import Sandbox as CI

    def key_ids() -> set:
        return {line.split("\t")[0] for line in server.cordon("keys", "list").splitlines() if line.strip()}

    before = key_ids()
    key = server.new_key(rps=3)
    (key_id,) = key_ids() - before
    s = CI.create(timeout=120, api_key=key)
    try:
        # envd (Connect RPC and plain HTTP) and the interpreter: a burst runs out.
        with pytest.raises(RateLimitException):
            for _ in range(30):
                s.commands.list()
        time.sleep(1.5)
        with pytest.raises(RateLimitException):
            for _ in range(30):
                s.files.exists("/home/user")
        time.sleep(1.5)
        # (the interpreter SDK maps only 404 and 502 to its own types: a 429 is a
        # SandboxException that names it)
        with pytest.raises(SandboxException, match="429.*rate limit"):
            for _ in range(30):
                s.run_code("1")
        time.sleep(1.5)
        # The control plane, with the SDK's retries off (with them on it waits Retry-After).
        with pytest.raises(RateLimitException):
            for _ in range(30):
                Sandbox.list(api_key=key, retries=0).next_items()
        # Another key is not slowed by it, and the sandbox works again a second later.
        assert Sandbox.list().next_items() is not None
        time.sleep(1.5)
        assert s.commands.run("echo again").stdout == "again\n"
        # A revoked key's sandbox tokens stop working too.
        server.cordon("keys", "revoke", key_id)
        with pytest.raises(AuthenticationException):
            s.commands.run("echo no")
    finally:
        # The sandbox outlives its key: end it with the server's own key.
        Sandbox.kill(s.sandbox_id)


def test_lifecycle_says_what_a_timeout_does(server):
    """A timeout kills the sandbox unless pause-on-timeout was asked for; the info says which."""
    for lifecycle, on_timeout in ((None, "kill"), ({"on_timeout": "pause"}, "pause")):
        s = Sandbox.create(timeout=30, lifecycle=lifecycle) if lifecycle else Sandbox.create(timeout=30)
        try:
            info = s.get_info()
            assert info.lifecycle is not None and info.lifecycle["on_timeout"] == on_timeout, info.lifecycle
        finally:
            s.kill()
