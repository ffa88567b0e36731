"""Side by side in one run: an HTTP request to a server inside a sandbox through `cordon serve`
(`Sandbox.get_host(port)`: the server relays it into the sandbox's network namespace) against
the same request made from inside the sandbox to 127.0.0.1. The same client code both ways, a
new connection per request (as a browser's first request or a health check): prints both
medians (p50) and p90, and the difference, as JSON; exits 1 if the relay adds more than
`--max-added-ms` (default 1.0) at p50.

    python bench_ports.py [--requests N] [--max-added-ms MS]   # starts its own `cordon serve`
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from conftest import start_server  # noqa: E402

SERVER = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""

# argv: address port host-header count; prints the milliseconds of each request (JSON).
CLIENT = r"""
import http.client, json, sys, time
addr, port, host, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
out = []
for _ in range(n + 5):
    t0 = time.perf_counter()
    c = http.client.HTTPConnection(addr, port, timeout=10)
    c.request("GET", "/", headers={"Host": host})
    r = c.getresponse()
    assert r.status == 200 and r.read() == b"ok", r.status
    c.close()
    out.append((time.perf_counter() - t0) * 1000)
print(json.dumps(out[5:]))
"""

PORT = 8080


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--max-added-ms", type=float, default=1.0)
    a = ap.parse_args()
    srv = start_server(Path(tempfile.mkdtemp(prefix="cordon-ports-bench-")))
    try:
        os.environ.update(E2B_API_URL=srv.url, E2B_SANDBOX_URL=srv.url, E2B_API_KEY=srv.api_key)
        from e2b import Sandbox

        s = Sandbox.create(timeout=600, network={"allow_public_traffic": True})
        try:
            s.files.write("/tmp/srv.py", SERVER)
            s.files.write("/tmp/client.py", CLIENT)
            s.commands.run(f"python3 /tmp/srv.py {PORT}", background=True)
            time.sleep(1.5)
            host = s.get_host(PORT)
            server_port = s.sandbox_domain.rpartition(":")[2]
            client = HERE / "_bench_ports_client.py"
            client.write_text(CLIENT)
            try:
                outside: list[float] = []
                inside: list[float] = []
                # Interleaved rounds, so load on the host weighs on both alike.
                rounds = 4
                for _ in range(rounds):
                    n = a.requests // rounds
                    r = subprocess.run(
                        [sys.executable, str(client), "127.0.0.1", server_port, host, str(n)],
                        capture_output=True, text=True, check=True,
                    )
                    outside += json.loads(r.stdout)
                    r = s.commands.run(f"python3 /tmp/client.py 127.0.0.1 {PORT} localhost:{PORT} {n}")
                    inside += json.loads(r.stdout)
            finally:
                client.unlink(missing_ok=True)
        finally:
            s.kill()
        p50 = {"get_host": statistics.median(outside), "inside": statistics.median(inside)}
        added = p50["get_host"] - p50["inside"]
        print(json.dumps({
            "requests": len(outside),
            "p50_ms": {k: round(v, 3) for k, v in p50.items()},
            "p90_ms": {"get_host": round(pct(outside, 0.9), 3), "inside": round(pct(inside, 0.9), 3)},
            "added_p50_ms": round(added, 3),
            "max_added_ms": a.max_added_ms,
        }))
        return 0 if added <= a.max_added_ms else 1
    finally:
        srv.stop()


if __name__ == "__main__":
    sys.exit(main())
