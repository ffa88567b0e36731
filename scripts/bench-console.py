#!/usr/bin/env python3
"""The web console's cost to the server: a real `cordon serve` with N sandboxes (200 by
default), its console's live table open in Debian's Chromium (Playwright), and

- the server's CPU time per second of wall time, idle and with the table open (the table
  refreshes every 2 s): the console's cost is the difference, which must stay under 100 ms/s;
- warm exec (`POST /v1/sandboxes/{id}/exec` of `true`) latency without and with the table
  open, interleaved in rounds so drift on the machine affects both alike.

Server CPU time is utime + stime of the `cordon serve` process (/proc/PID/stat), which covers
its request handling and its samplers (not the sandboxes' own processes). Loopback only.

    python3 scripts/bench-console.py --cordon target/debug/cordon [--sandboxes 200] [--json]

Needs: requests and playwright (clients/console-e2e/requirements.txt) and Debian's chromium.
Prints a table (or JSON); exits 1 if the console's cost is 100 ms/s or more.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List

import requests

REPO = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def load_fixture():
    spec = importlib.util.spec_from_file_location("cordon_server_fixture", REPO / "clients" / "python" / "tests" / "conftest.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    f = stat[stat.rindex(")") + 2 :].split()
    return (int(f[11]) + int(f[12])) / TICK


def server_cpu_ms_per_s(pid: int, seconds: float) -> float:
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) * 1000 / (time.monotonic() - t0)


def exec_latencies(url: str, key: str, sid: str, runs: int) -> List[float]:
    out = []
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {key}"
    for _ in range(runs):
        t0 = time.perf_counter()
        r = s.post(f"{url}/v1/sandboxes/{sid}/exec", json={"cmd": ["true"]}, timeout=60)
        out.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200 and r.json()["exit_code"] == 0, r.text
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cordon", default=str(REPO / "target" / "debug" / "cordon"))
    ap.add_argument("--sandboxes", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=20.0, help="each CPU window")
    ap.add_argument("--rounds", type=int, default=4, help="exec rounds per variant, interleaved")
    ap.add_argument("--runs", type=int, default=25, help="execs per round")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    os.environ["CORDON_BIN"] = a.cordon
    fixture = load_fixture()
    from playwright.sync_api import expect, sync_playwright

    data = Path(tempfile.mkdtemp(prefix="cordon-bench-console-"))
    server = fixture.start_server(data / "data")
    result: Dict[str, object] = {"sandboxes": a.sandboxes, "binary": a.cordon}
    try:
        pid = server.proc.pid
        key = server.new_key(max_sandboxes=a.sandboxes + 10, rps=100000)
        h = {"Authorization": f"Bearer {key}"}

        def make(_: int) -> str:
            r = requests.post(server.url + "/v1/sandboxes", json={"memory": "64M", "ttl": "30m"}, headers=h, timeout=120)
            assert r.status_code == 201, r.text
            return r.json()["id"]

        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            ids = list(pool.map(make, range(a.sandboxes)))
        result["create_s"] = round(time.monotonic() - t0, 1)
        time.sleep(5)  # the creates' own work settles; a few samples of each sandbox exist
        target = ids[0]
        exec_latencies(server.url, key, target, 5)  # warm
        result["server_cpu_ms_per_s_idle"] = round(server_cpu_ms_per_s(pid, a.seconds), 1)

        chromium = shutil.which("chromium") or "/usr/bin/chromium"
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=chromium, headless=True,
                                  args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"])
            page = b.new_page()
            page.goto(server.url + "/console")
            page.fill("#key", key)
            page.click("#signin")
            # (The page's CSP allows no eval: waits go through locators.)
            expect(page.locator("#sandboxes tr")).to_have_count(a.sandboxes, timeout=120_000)
            result["server_cpu_ms_per_s_console"] = round(server_cpu_ms_per_s(pid, a.seconds), 1)
            # Warm exec, interleaved: console open (this page), then closed (a blank page).
            with_console: List[float] = []
            without: List[float] = []
            for _ in range(a.rounds):
                page.goto(server.url + "/console#/")
                expect(page.locator("#sandboxes tr")).to_have_count(a.sandboxes, timeout=120_000)
                time.sleep(2.5)  # past the page's first load: the table as it stays open
                with_console += exec_latencies(server.url, key, target, a.runs)
                page.goto("about:blank")
                time.sleep(2.5)  # the last refresh's requests are done
                without += exec_latencies(server.url, key, target, a.runs)
            b.close()
        med = lambda v: round(statistics.median(v), 1)  # noqa: E731
        p90 = lambda v: round(sorted(v)[int(len(v) * 0.9) - 1], 1)  # noqa: E731
        result["exec_ms_median_without_console"] = med(without)
        result["exec_ms_median_with_console"] = med(with_console)
        result["exec_ms_p90_without_console"] = p90(without)
        result["exec_ms_p90_with_console"] = p90(with_console)
        result["console_cost_ms_per_s"] = round(
            float(result["server_cpu_ms_per_s_console"]) - float(result["server_cpu_ms_per_s_idle"]), 1)
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k:36} {v}")
    return 0 if float(result["console_cost_ms_per_s"]) < 100 else 1


if __name__ == "__main__":
    sys.exit(main())
