"""Runs/s of an RL-shaped Python problem (a solution and 5 asserts), side by side: bare
`python3` (no sandbox), `cordon run` (a cold sandbox each), and SandboxFusion's `/run_code`
through the published client against a real `cordon serve`, each with the same concurrency.

    CORDON_BIN=target/debug/cordon python clients/fusion-e2e/bench.py --runs 200 --concurrency 4
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import endpoint_of, start_server  # noqa: E402

# The interpreter a sandbox runs (the host's system one), not a shim earlier on PATH.
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else "python3"
CODE = "def solve(x):\n    return x * 3\n\n" + "\n".join(f"assert solve({i}) == {i * 3}" for i in range(5)) + "\n"


def rate(n: int, conc: int, one) -> float:
    t = time.perf_counter()
    with ThreadPoolExecutor(conc) as ex:
        ok = sum(ex.map(lambda _: one(), range(n)))
    dt = time.perf_counter() - t
    assert ok == n, f"{n - ok} runs failed"
    return n / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=4)
    a = ap.parse_args()
    cordon = os.environ.get("CORDON_BIN", "target/debug/cordon")
    from sandbox_fusion import RunCodeRequest, run_code

    def bare() -> bool:
        return subprocess.run([PYTHON, "-c", CODE], capture_output=True).returncode == 0

    def cold() -> bool:
        return subprocess.run([cordon, "run", "--", "python3", "-c", CODE], capture_output=True).returncode == 0

    with tempfile.TemporaryDirectory() as d:
        srv = start_server(Path(d) / "data")
        try:
            ep = endpoint_of(srv, srv.api_key)

            def fusion() -> bool:
                r = run_code(RunCodeRequest(code=CODE, language="python"), endpoint=ep, max_attempts=1)
                return r.status == "Success"

            rows = [("bare python3", rate(a.runs, a.concurrency, bare)),
                    ("cordon run (cold)", rate(a.runs, a.concurrency, cold)),
                    ("/run_code, sandbox-fusion client", rate(a.runs, a.concurrency, fusion))]
        finally:
            srv.stop()
    base = rows[0][1]
    print(f"{a.runs} runs, concurrency {a.concurrency}, {os.cpu_count()} CPUs")
    for name, r in rows:
        print(f"  {name:36s} {r:8.1f} runs/s  ({r / base:.2f}x bare)")


if __name__ == "__main__":
    main()
