#!/usr/bin/env python3
"""Writes the synchronous client (and its tests) from the asynchronous source.

The async code is the one hand-written implementation; its sync twin is produced by rewriting
it line by line, the way httpcore does it: ``async def`` -> ``def``, ``await x`` -> ``x``,
``async with``/``async for`` -> ``with``/``for``, ``AsyncX``/``_AsyncX`` -> ``X``/``_X`` and the
few async names of the standard library and httpx in SUBS below. The two outputs are checked in,
so readers and type checkers see plain code.

Where the two must differ, a line of the source says so at its end:

    code  # sync: other code     the sync file has ``other code`` here (same indentation)
    code  # async-only           the sync file has no such line

    python3 clients/python/scripts/unasync.py           # rewrite the sync files
    python3 clients/python/scripts/unasync.py --check   # exit 1 (and show a diff) if they differ

CI (scripts/test.sh) runs ``--check``: a sync file edited by hand, or an async change without
regenerating, fails the build.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path
from typing import List, Tuple

ROOT = Path(__file__).resolve().parents[1]

# (async source, sync output), relative to clients/python.
FILES: List[Tuple[str, str]] = [
    ("src/cordon_sdk/async_sandbox.py", "src/cordon_sdk/sandbox.py"),
    ("tests/test_client_async.py", "tests/test_client_sync.py"),
]

# Applied in order to every line (after the pragmas), as regular expressions.
SUBS: List[Tuple[str, str]] = [
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\basync for\b", "for"),
    (r"\bawait ", ""),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\b__aiter__\b", "__iter__"),
    (r"\b__anext__\b", "__next__"),
    (r"\bStopAsyncIteration\b", "StopIteration"),
    (r"\basynccontextmanager\b", "contextmanager"),
    (r"\baclose\b", "close"),
    (r"\baread\b", "read"),
    (r"\baiter_lines\b", "iter_lines"),
    (r"\baiter_bytes\b", "iter_bytes"),
    (r"\bacall\b", "call"),
    # AsyncSandbox -> Sandbox, _AsyncHttp -> _Http, httpx.AsyncClient -> httpx.Client, ...
    (r"\b(_?)Async(?=[A-Z])", r"\1"),
    (r"\basync_sandbox\b", "sandbox"),
    (r"\btest_client_async\b", "test_client_sync"),
    (r"\basynchronous\b", "synchronous"),
    (r"\bAn synchronous\b", "A synchronous"),
    (r"\ban synchronous\b", "a synchronous"),
]

_PRAGMA = re.compile(r"^(?P<indent>\s*)(?P<code>.*?)\s+# (?:sync: (?P<sync>.*)|(?P<only>async-only))\s*$")

HEADER = "# Generated from {src} by clients/python/scripts/unasync.py: edit that file, then run the script.\n"


def unasync_line(line: str) -> List[str]:
    """The sync form of one source line (none when the line is async-only)."""
    m = _PRAGMA.match(line)
    if m:
        if m.group("only"):
            return []
        return [f"{m.group('indent')}{m.group('sync')}\n"]
    for pattern, repl in SUBS:
        line = re.sub(pattern, repl, line)
    return [line]


def unasync_text(text: str, src: str) -> str:
    out = [HEADER.format(src=src)]
    for line in text.splitlines(keepends=True):
        out.extend(unasync_line(line))
    return "".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 when a sync file is out of date")
    args = ap.parse_args()
    stale = 0
    for src, dst in FILES:
        want = unasync_text((ROOT / src).read_text(encoding="utf-8"), Path(src).name)
        path = ROOT / dst
        have = path.read_text(encoding="utf-8") if path.exists() else ""
        if have == want:
            continue
        if args.check:
            stale += 1
            sys.stdout.writelines(
                difflib.unified_diff(
                    have.splitlines(keepends=True),
                    want.splitlines(keepends=True),
                    f"{dst} (checked in)",
                    f"{dst} (from {src})",
                )
            )
        else:
            path.write_text(want, encoding="utf-8")
            print(f"wrote {dst}")
    if stale:
        print(
            f"\n{stale} generated file(s) differ from their async source: run clients/python/scripts/unasync.py",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
