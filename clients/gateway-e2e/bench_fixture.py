"""A `resources/read` and a `tools/call` of the MCP conformance suite's fixture server, made
directly to it and through `cordon gateway --listen` (the fixture as its `url` upstream, and as
a stdio upstream in a sandbox), side by side in one run with the same client (the official
Python SDK over streamable HTTP, everything on loopback). scripts/mcp-conformance.sh runs it
with MCP_BENCH=N after the suite:

    python bench_fixture.py N KEY direct=URL gateway=URL gateway-stdio=URL

prints each target's median and p90 in ms and what the gateway adds to the median.
"""

import statistics
import sys

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

try:
    import httpx2 as httpx  # mcp >= 2
except ImportError:  # pragma: no cover - mcp 1.x
    import httpx

N = int(sys.argv[1])
KEY = sys.argv[2]
TARGETS = dict(a.split("=", 1) for a in sys.argv[3:])
OPS = {
    "resources/read": lambda s: s.read_resource("test://static-text"),
    "tools/call": lambda s: s.call_tool("test_simple_text", {}),
}


async def timed(url: str, op) -> list[float]:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                for _ in range(20):  # warm-up
                    await op(s)
                out = []
                for _ in range(N):
                    t0 = anyio.current_time()
                    await op(s)
                    out.append((anyio.current_time() - t0) * 1000)
                return out


def main():
    results: dict = {}
    # Interleaved rounds, so that drift of the machine hits every target alike.
    for _ in range(2):
        for op_name, op in OPS.items():
            for label, url in TARGETS.items():
                results.setdefault((op_name, label), []).extend(anyio.run(timed, url, op))
    p90 = lambda xs: sorted(xs)[int(len(xs) * 0.9)]
    for op_name in OPS:
        base = statistics.median(results[(op_name, "direct")])
        print(f"{op_name}, {2 * N} each, median (p90) in ms:")
        for label in TARGETS:
            xs = results[(op_name, label)]
            m = statistics.median(xs)
            added = "" if label == "direct" else f"  added {m - base:+.3f} ms (target: at most +1 ms)"
            print(f"  {label:14} {m:.3f} ({p90(xs):.3f}){added}")


if __name__ == "__main__":
    main()
