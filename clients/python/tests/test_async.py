"""The asynchronous client against a real `cordon serve`."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Dict, List

import pytest

from cordon_sdk import (
    AsyncCommandHandle,
    AsyncSandbox,
    AuthenticationError,
    CordonTimeoutError,
    NotFoundError,
    SandboxError,
)

from .conftest import Server

pytestmark = pytest.mark.anyio


async def test_async_lifecycle(conn: Dict[str, Any]) -> None:
    tag = uuid.uuid4().hex
    sb = await AsyncSandbox.create(metadata={"suite": tag}, ttl=120, **conn)
    try:
        info = await sb.info()
        assert info.state == "running" and info.metadata == {"suite": tag}
        listed = await AsyncSandbox.list(metadata={"suite": tag}, **conn)
        assert [s.id for s in listed] == [sb.id]
        info = await sb.set_ttl("20m")
        assert info.expires_at - info.created_at >= 1190
        again = await AsyncSandbox.connect(sb.id, **conn)
        assert (await again.commands.run("echo hi")).stdout == "hi\n"
        await again.close()
    finally:
        assert await sb.kill() is True
        await sb.close()
    assert await AsyncSandbox.list(metadata={"suite": tag}, **conn) == []


async def test_async_context_managers(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(**conn) as sb:
        sid = sb.id
        assert await sb.is_running()
    async with await AsyncSandbox.create(**conn) as sb2:
        sid2 = sb2.id
    for s in (sid, sid2):
        probe = AsyncSandbox(s, **conn)
        assert (await probe.info()).state == "deleted"
        with pytest.raises(NotFoundError):
            await probe.commands.run("true")
        await probe.close()


async def test_async_commands(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(**conn) as sb:
        o = await sb.commands.run("echo out; echo err >&2; exit 2", env={"A": "1"})
        assert (o.status, o.exit_code, o.stdout, o.stderr) == ("exited", 2, "out\n", "err\n")
        assert (await sb.commands.run("cat", stdin="piped")).stdout == "piped"
        assert (await sb.commands.run("pwd", cwd="/tmp")).stdout == "/tmp\n"
        o = await sb.commands.run("sleep 10", timeout=0.5)
        assert o.status == "timeout"
        # several commands at once in one sandbox
        outs = await asyncio.gather(*(sb.commands.run(["sh", "-c", f"sleep 0.2; echo {i}"]) for i in range(5)))
        assert [x.stdout for x in outs] == [f"{i}\n" for i in range(5)]


async def test_async_streaming_callbacks(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(**conn) as sb:
        out: List[str] = []
        err: List[str] = []

        async def on_out(s: str) -> None:
            await asyncio.sleep(0)
            out.append(s)

        o = await sb.commands.run(
            "for i in 1 2 3 4 5; do echo $i; echo x$i >&2; sleep 0.05; done",
            on_stdout=on_out,
            on_stderr=err.append,  # plain functions work too
        )
        assert o.ok
        assert "".join(out) == "1\n2\n3\n4\n5\n" == o.stdout
        assert "".join(err) == "x1\nx2\nx3\nx4\nx5\n"
        assert len(out) > 1


async def test_async_background(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(**conn) as sb:
        h = await sb.commands.run("cat", background=True)
        assert isinstance(h, AsyncCommandHandle)
        await h.send_stdin("one\n")
        await h.send_stdin("two\n", close=True)
        o = await h.wait(10)
        assert o.stdout == "one\ntwo\n"
        assert h.id in {c.command_id for c in await sb.commands.list()}

        h2 = await sb.commands.run("sleep 30", background=True)
        with pytest.raises(CordonTimeoutError):
            await h2.wait(0.3)
        assert (await h2.info()).running
        await h2.kill()
        o2 = await h2.wait(10)
        assert o2.status == "signaled" and o2.signal == 9


async def test_async_files(conn: Dict[str, Any]) -> None:
    async with AsyncSandbox.create(**conn) as sb:
        await sb.files.mkdir("/workspace/a/b")
        await sb.files.write("/workspace/a/b/f.txt", "data")
        assert await sb.files.read_text("/workspace/a/b/f.txt") == "data"
        assert [e.name for e in await sb.files.list("/workspace/a/b")] == ["f.txt"]
        st = await sb.files.stat("/workspace/a/b/f.txt")
        assert st.size == 4 and st.type == "file"
        await sb.files.move("/workspace/a/b/f.txt", "/workspace/g.txt")
        assert await sb.files.exists("/workspace/g.txt")
        assert not await sb.files.exists("/workspace/a/b/f.txt")
        await sb.files.remove("/workspace/a", recursive=True)
        with pytest.raises(NotFoundError):
            await sb.files.list("/workspace/a")
        with pytest.raises(SandboxError) as e:
            await sb.files.write("../../etc/passwd", "x")
        assert e.value.status == 403


async def test_async_errors(server: Server, conn: Dict[str, Any]) -> None:
    with pytest.raises(AuthenticationError) as e:
        await AsyncSandbox.list(base_url=server.url, api_key="cdn_wrong")
    assert e.value.status == 401
    with pytest.raises(AuthenticationError):
        async with AsyncSandbox.create(base_url=server.url, api_key="cdn_wrong"):
            pass
    with pytest.raises(NotFoundError):
        await AsyncSandbox.connect("nonode-0000000000000000", **conn)
    sb = await AsyncSandbox.create(**conn)
    await sb.kill()
    with pytest.raises(NotFoundError):
        await sb.commands.run("true", on_stdout=print)
    with pytest.raises(NotFoundError):
        await sb.files.read("x")
    await sb.close()


async def test_async_one_shot_run(conn: Dict[str, Any]) -> None:
    o = await AsyncSandbox.run(["sh", "-c", "echo $Y; exit 3"], env={"Y": "why"}, **conn)
    assert o.status == "exited" and o.exit_code == 3 and o.stdout == "why\n"
