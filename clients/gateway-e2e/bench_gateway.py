"""A tools/call through `cordon gateway` against the same call made directly to the same
upstream server (the official SDK's MCPServer, already running, unsandboxed), side by side in
one run, with the same client. Also the start time of the sandboxed upstream (from the
gateway's audit log). Run:

    CORDON_BIN=target/release/cordon /tmp/gwvenv/bin/python clients/gateway-e2e/bench_gateway.py [N]
"""

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
N = int(sys.argv[1]) if len(sys.argv) > 1 else 300
CORDON = os.environ.get("CORDON_BIN") or str(REPO / "target" / "debug" / "cordon")


async def timed_calls(params) -> list[float]:
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            name = "files.list_dir" if params.command == CORDON else "list_dir"
            for _ in range(20):  # warm-up
                await s.call_tool(name, {"path": "/tmp"})
            out = []
            for _ in range(N):
                t0 = time.perf_counter()
                r = await s.call_tool(name, {"path": "/tmp"})
                out.append((time.perf_counter() - t0) * 1000)
                assert not r.is_error
            return out


def main():
    root = Path(tempfile.mkdtemp(prefix="cordon-gw-bench-"))
    os.chmod(root, 0o755)
    audit = root / "audit.jsonl"
    venv = Path(sys.prefix)
    python = str(venv / "bin" / "python")
    config = root / "gateway.toml"
    config.write_text(f"""
[gateway]
audit = "{audit}"
[servers.files]
command = ["{python}", "{HERE}/upstream_server.py", "files"]
ro = ["{HERE}", "{venv}"]
[[rules]]
tool = "files.list_dir"
paths = {{ path = {{ deny = ["/system/**"] }} }}
rate = "100000/second"
""")
    direct = StdioServerParameters(command=python, args=[str(HERE / "upstream_server.py"), "files"])
    gateway = StdioServerParameters(command=CORDON, args=["gateway", "--config", str(config)])
    results = {}
    # Interleaved rounds, so that drift of the machine hits both sides alike.
    for _ in range(2):
        for label, params in (("direct", direct), ("gateway", gateway)):
            results.setdefault(label, []).extend(anyio.run(timed_calls, params))
    d, g = statistics.median(results["direct"]), statistics.median(results["gateway"])
    p90 = lambda xs: sorted(xs)[int(len(xs) * 0.9)]
    starts = [r["start_ms"] for r in map(json.loads, audit.read_text().splitlines()) if r["event"] == "server.started"]
    print(f"tools/call, {len(results['direct'])} calls each, median (p90) in ms")
    print(f"  direct to the upstream (unsandboxed): {d:.3f} ({p90(results['direct']):.3f})")
    print(f"  through cordon gateway (sandboxed):   {g:.3f} ({p90(results['gateway']):.3f})")
    print(f"  added by the gateway: {g - d:+.3f} ms median (target: at most +1 ms)")
    print(f"  start of the sandboxed upstream (sandbox + initialize + tools/list): "
          f"median {statistics.median(starts):.1f} ms over {len(starts)} starts")


if __name__ == "__main__":
    main()
