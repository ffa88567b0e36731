"""Fixtures: a real `cordon serve` on loopback (started as clients/python/tests does), and
Debian's Chromium driven by Playwright, headless, with screenshots kept as test artifacts
(`$CONSOLE_ARTIFACTS`, default /tmp/cordon-console-artifacts).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import Iterator

import pytest

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location(
    "cordon_server_fixture", HERE.parent / "python" / "tests" / "conftest.py"
)
assert _spec and _spec.loader
_fixture = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _fixture
_spec.loader.exec_module(_fixture)
start_server = _fixture.start_server
Server = _fixture.Server

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("CONSOLE_ARTIFACTS", "/tmp/cordon-console-artifacts"))


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator["Server"]:
    srv = start_server(tmp_path_factory.mktemp("cordon-console-data"))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: scripts/test.sh installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        # Flags from this machine's notes: no background networking (the host's network is
        # closed; only loopback is used), a fresh profile.
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser, request):
    ctx = browser.new_context(accept_downloads=True)
    pg = ctx.new_page()
    errors: list = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("dialog", lambda d: errors.append("a dialog opened: " + d.message))
    yield pg
    pg.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    ctx.close()
    assert not errors, errors
