"""The async flavour of the SDKs, and what this server does not offer yet answering with an
error that says so (never a hang or a pretend success)."""

from __future__ import annotations

import asyncio

import pytest


def test_async_sdks():
    from e2b import AsyncSandbox
    from e2b_code_interpreter import AsyncSandbox as AsyncCI

    async def go():
        s = await AsyncSandbox.create(timeout=120)
        try:
            r, w = await asyncio.gather(
                s.commands.run("echo async"),
                s.files.write("/home/user/a.txt", "async file"),
            )
            assert r.stdout == "async\n"
            assert await s.files.read("/home/user/a.txt") == "async file"
            h = await s.commands.run("sleep 0.2; echo later", background=True)
            assert (await h.wait()).stdout == "later\n"
        finally:
            await s.kill()
        ci = await AsyncCI.create(timeout=120)
        try:
            ex = await ci.run_code("6 * 7")
            assert ex.text == "42"
        finally:
            await ci.kill()

    asyncio.run(go())


def test_unsupported_features_say_so(sbx):
    from e2b import PtySize
    from e2b_code_interpreter import Sandbox as CI

    with pytest.raises(Exception) as e:
        sbx.pty.create(PtySize(rows=24, cols=80))
    assert "PTY" in str(e.value)
    ci = CI.connect(sbx.sandbox_id)
    with pytest.raises(Exception) as e:
        ci.run_code("1", envs={"A": "b"})
    assert "env_vars" in str(e.value)
    # None of it hurt the sandbox.
    assert sbx.is_running()
    assert sbx.commands.run("echo fine").stdout == "fine\n"
