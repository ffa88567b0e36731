"""Side by side in one run: the E2B SDK's `Sandbox.create()` + `run_code("1+1")` + `kill()`
through cordon's E2B door, against cordon's own SDK doing the same. Prints both medians and
their ratio as JSON; exits 1 if the E2B door adds more than `--max-ratio` (default 1.2).

    python bench.py [--iterations N] [--max-ratio R]       # starts its own `cordon serve`
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from conftest import start_server  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=15)
    ap.add_argument("--max-ratio", type=float, default=1.2)
    a = ap.parse_args()
    srv = start_server(Path(tempfile.mkdtemp(prefix="cordon-e2b-bench-")))
    try:
        os.environ.update(E2B_API_URL=srv.url, E2B_SANDBOX_URL=srv.url, E2B_API_KEY=srv.api_key)
        from cordon_sdk import Sandbox as Native
        from e2b_code_interpreter import Sandbox as E2B

        def native() -> None:
            s = Native.create(base_url=srv.url, api_key=srv.api_key)
            r = s.code.run("1+1")
            assert r.results[0].text == "2", r
            s.kill()

        def e2b() -> None:
            s = E2B.create()
            ex = s.run_code("1+1")
            assert ex.text == "2", ex
            s.kill()

        # One warm-up each (imports, connection pools, the page cache of python3).
        native()
        e2b()
        times: dict[str, list[float]] = {"native": [], "e2b": []}
        for _ in range(a.iterations):
            # Interleaved, so load on the host weighs on both alike.
            for name, fn in (("native", native), ("e2b", e2b)):
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) * 1000)
        med = {k: statistics.median(v) for k, v in times.items()}
        ratio = med["e2b"] / med["native"]
        print(json.dumps({
            "iterations": a.iterations,
            "native_median_ms": round(med["native"], 1),
            "e2b_median_ms": round(med["e2b"], 1),
            "ratio": round(ratio, 3),
            "max_ratio": a.max_ratio,
        }))
        return 0 if ratio <= a.max_ratio else 1
    finally:
        srv.stop()


if __name__ == "__main__":
    sys.exit(main())
