"""get_metrics() with the published SDK: what the sandbox's processes use right now (CPU since
the previous request, resident memory) and its scratch disk, against its limits."""

from __future__ import annotations

import time


def test_metrics_follow_what_the_sandbox_does(sbx):
    (idle,) = sbx.get_metrics()
    assert idle.cpu_count >= 1
    assert idle.mem_total > 0 and idle.disk_total > 0
    assert 0 <= idle.cpu_used_pct <= 100
    assert idle.disk_used < idle.disk_total

    # Burn CPU and hold 96 MiB for a few seconds, and fill 8 MiB of scratch disk.
    sbx.commands.run(
        "python3 -c \"import time; x = bytearray(96 << 20); x[::4096] = b'1' * len(x[::4096]); t = time.time()\n"
        "while time.time() - t < 6: pass\"",
        background=True,
    )
    sbx.commands.run("head -c 8M /dev/urandom > /tmp/blob")
    sbx.get_metrics()  # starts the CPU window
    time.sleep(1.5)
    (busy,) = sbx.get_metrics()
    assert busy.cpu_used_pct > 10, busy
    assert busy.mem_used >= 96 << 20, busy
    assert busy.mem_used <= busy.mem_total
    assert busy.disk_used >= idle.disk_used + (8 << 20), (idle, busy)
    assert busy.timestamp.year >= 2024

    # Once the burner is done, the CPU reading falls back and its memory is gone.
    time.sleep(6)
    sbx.get_metrics()
    time.sleep(1)
    (after,) = sbx.get_metrics()
    assert after.cpu_used_pct < busy.cpu_used_pct, (busy, after)
    assert after.mem_used < 96 << 20, after
