"""The async flavour of the SDKs."""

from __future__ import annotations

import asyncio


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

