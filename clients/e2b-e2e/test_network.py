"""E2B's internet access mapped onto cordon's egress allowlist, only ever on loopback: a site on
the host's 127.0.0.1 stands for "the internet"; what may not reach it is refused by the
sandbox's proxy (or there is no proxy at all), checked from outside."""

from __future__ import annotations

import http.server
import threading
from typing import Iterator

import pytest
from e2b import Sandbox
from e2b.exceptions import InvalidArgumentException, SandboxException


class _Hello(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self) -> None:
        type(self).hits += 1
        body = b"hello from the host"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def site() -> Iterator[int]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


def _fetch(port: int) -> str:
    # Through the proxy cordon names in HTTP_PROXY (a server sandbox always has one, so its
    # allowlist can change while it runs); with none, a direct connection, which the
    # sandbox's own network namespace cannot make.
    return (
        f'if [ -n "$HTTP_PROXY" ]; then p="--proxy $HTTP_PROXY"; else p=""; fi; '
        f'curl -sSf --max-time 5 --noproxy "" $p http://127.0.0.1:{port}/'
    )


def test_no_internet_means_no_network(site):
    s = Sandbox.create(timeout=60, allow_internet_access=False)
    try:
        r = s.commands.run(_fetch(site) + "; echo rc=$?")
        assert "hello" not in r.stdout and "rc=0" not in r.stdout, r.stdout
        info = Sandbox.get_info(s.sandbox_id)
        assert info.allow_internet_access is False
    finally:
        s.kill()
    assert _Hello.hits == 0


def test_allow_out_becomes_the_allowlist(site):
    hits = _Hello.hits
    s = Sandbox.create(
        timeout=60,
        network={"allow_out": [f"127.0.0.1:{site}"], "deny_out": ["0.0.0.0/0"]},
    )
    try:
        assert s.commands.run(_fetch(site)).stdout == "hello from the host"
        # Another port on the same address is not on the list: the proxy refuses it.
        r = s.commands.run(_fetch(site + 1 if site < 65535 else site - 1) + "; echo rc=$?")
        assert "rc=0" not in r.stdout
        info = Sandbox.get_info(s.sandbox_id)
        assert info.allow_internet_access is True
    finally:
        s.kill()
    assert _Hello.hits == hits + 1


def test_what_cannot_hold_is_refused(site):
    for network, word in (
        ({"allow_out": ["0.0.0.0/0"]}, "allowOut"),
        ({"egress_proxy": {"address": "127.0.0.1:1080"}}, "egressProxy"),
        ({"allow_out": ["not a host"]}, "allowOut"),
    ):
        with pytest.raises((SandboxException, InvalidArgumentException)) as e:
            Sandbox.create(timeout=30, network=network)
        assert word in str(e.value), (network, str(e.value))


def test_server_default_egress_for_internet_access(tmp_path, site):
    """`cordon serve --e2b-allow-net`: what "internet access" means on this server. A sandbox
    created with the SDK's defaults gets it; one without internet access does not."""
    from conftest import start_server

    srv = start_server(tmp_path / "data", ["--e2b-allow-net", f"127.0.0.1:{site}"])
    try:
        opts = {"api_key": srv.api_key, "api_url": srv.url, "sandbox_url": srv.url}
        s = Sandbox.create(timeout=60, **opts)
        try:
            assert s.commands.run(_fetch(site)).stdout == "hello from the host"
            assert Sandbox.get_info(s.sandbox_id, **opts).allow_internet_access is True
        finally:
            s.kill()
        s = Sandbox.create(timeout=60, allow_internet_access=False, **opts)
        try:
            r = s.commands.run(_fetch(site) + "; echo rc=$?")
            assert "rc=0" not in r.stdout
        finally:
            s.kill()
        # A deny list over a non-empty allowlist is not expressible: refused, not ignored.
        with pytest.raises(SandboxException) as e:
            Sandbox.create(timeout=30, network={"deny_out": ["10.0.0.0/8"]}, **opts)
        assert "denyOut" in str(e.value)
    finally:
        srv.stop()


def test_update_network_replaces_the_allowlist(site):
    """`update_network` while the sandbox runs: the proxy's allowlist is replaced at once."""
    s = Sandbox.create(timeout=60, allow_internet_access=False)
    try:
        r = s.commands.run(_fetch(site) + "; echo rc=$?")
        assert "rc=0" not in r.stdout
        s.update_network({"allow_out": [f"127.0.0.1:{site}"], "deny_out": ["0.0.0.0/0"]})
        assert s.commands.run(_fetch(site)).stdout == "hello from the host"
        assert Sandbox.get_info(s.sandbox_id).allow_internet_access is True
        s.update_network({"allow_internet_access": False})
        r = s.commands.run(_fetch(site) + "; echo rc=$?")
        assert "rc=0" not in r.stdout
        with pytest.raises(SandboxException) as e:
            s.update_network({"allow_out": ["0.0.0.0/0"]})
        assert "allowOut" in str(e.value)
    finally:
        s.kill()
