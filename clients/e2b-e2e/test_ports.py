"""Ports into sandboxes through `cordon serve`, attacked: `Sandbox.get_host(port)` names
`{port}-{id}.{sandboxDomain}`, and the server relays a request for that host to the port inside
that sandbox. A client holds no API key there, so: a sandbox without public traffic opens only to
its own traffic access token; nothing but the named sandbox's own loopback can be reached (not the
host's ports, not the server's, not another sandbox's); framing that a front end and the sandbox's
server could read differently, and oversized heads, are refused before the sandbox sees a byte.
Requests go to the server's address with the `Host` header set (what a resolver pointing the
names at the server gives), plus one over TLS with the name as SNI.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from urllib.parse import urlsplit

import pytest
from e2b import Sandbox

# Records each request's line and headers to a file, answers with them (JSON), and streams
# `/stream` in two chunks a second apart; `Upgrade: echo` switches to echoing bytes.
SERVER = r"""
import http.server, json, sys, time, socketserver
log = open(sys.argv[2], "a", buffering=1)
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        log.write(self.requestline + "\n")
        if self.headers.get("Upgrade") == "echo":
            self.send_response(101)
            self.send_header("Upgrade", "echo")
            self.send_header("Connection", "Upgrade")
            self.end_headers()
            self.wfile.flush()
            while True:
                b = self.connection.recv(1024)
                if not b:
                    return
                self.connection.sendall(b)
        if self.path == "/stream":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"first", b"second"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
                time.sleep(1.5)
            self.wfile.write(b"0\r\n\r\n")
            return
        out = json.dumps({"path": self.path, "headers": dict(self.headers.items()),
                          "body": body.decode(errors="replace"), "who": sys.argv[3]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = answer
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""

PORT = 8080


def serve_in(sbx: Sandbox, port: int = PORT, who: str = "a") -> str:
    """Starts the recording server on `port` in `sbx`; returns the path of its request log."""
    sbx.files.write("/tmp/srv.py", SERVER)
    log = f"/tmp/requests-{port}.log"
    sbx.commands.run(f"python3 /tmp/srv.py {port} {log} {who}", background=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        r = sbx.commands.run(
            f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 1)\" && echo up || true"
        )
        if "up" in r.stdout:
            return log
        time.sleep(0.2)
    raise AssertionError(f"the server in the sandbox did not listen on {port}")


def server_addr(sbx: Sandbox) -> tuple[str, int]:
    # sandboxDomain is `localhost:<server port>`: the server's own address.
    host, _, port = sbx.sandbox_domain.rpartition(":")
    assert host == "localhost", sbx.sandbox_domain
    return "127.0.0.1", int(port)


def request(
    sbx: Sandbox,
    host: str,
    path: str = "/",
    headers: dict | None = None,
    method: str = "GET",
    body: bytes | None = None,
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(*server_addr(sbx), timeout=20)
    conn.request(method, path, body=body, headers={"Host": host, **(headers or {})})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def raw(sbx: Sandbox, data: bytes) -> bytes:
    s = socket.create_connection(server_addr(sbx), timeout=10)
    s.sendall(data)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except socket.timeout:
        pass
    s.close()
    return out


@pytest.fixture
def private():
    s = Sandbox.create(timeout=300, network={"allow_public_traffic": False})
    try:
        yield s
    finally:
        s.kill()


@pytest.fixture
def public():
    s = Sandbox.create(timeout=300, network={"allow_public_traffic": True})
    try:
        yield s
    finally:
        s.kill()


def test_a_port_of_a_sandbox_without_public_traffic_needs_its_token(private):
    serve_in(private)
    host = private.get_host(PORT)
    assert private.traffic_access_token
    assert request(private, host)[0] == 403
    assert request(private, host, headers={"e2b-traffic-access-token": "ta_" + "0" * 48})[0] == 403
    # The envd access token is not the traffic token.
    assert (
        request(private, host, headers={"e2b-traffic-access-token": private._envd_access_token})[0]
        == 403
    )
    status, body = request(
        private, host, headers={"e2b-traffic-access-token": private.traffic_access_token}
    )
    assert status == 200, body
    # The token stops at the server: the program in the sandbox never sees it.
    assert b"traffic-access-token" not in body.lower()


def test_one_sandboxs_token_opens_no_other_sandboxs_port(private):
    other = Sandbox.create(timeout=300, network={"allow_public_traffic": False})
    try:
        serve_in(private)
        assert other.traffic_access_token != private.traffic_access_token
        status, _ = request(
            private,
            private.get_host(PORT),
            headers={"e2b-traffic-access-token": other.traffic_access_token},
        )
        assert status == 403
    finally:
        other.kill()


def test_public_ports_need_no_token_and_keep_the_clients_host(public):
    serve_in(public)
    host = public.get_host(PORT)
    status, body = request(public, host, path="/x?y=1")
    assert status == 200, body
    assert b'"path": "/x?y=1"' in body
    assert host.encode() in body


def test_the_hosts_own_ports_are_out_of_reach(public):
    """A port that only the host listens on (and the server's own) answers 502, never the host's
    program: the connection is made inside the sandbox's network namespace."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    host_port = listener.getsockname()[1]
    hits = []

    def accept():
        while True:
            try:
                c, _ = listener.accept()
            except OSError:
                return
            hits.append(1)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhost-secret")
            c.close()

    threading.Thread(target=accept, daemon=True).start()
    try:
        for port in (host_port, server_addr(public)[1]):
            status, body = request(public, public.get_host(port))
            assert status == 502, (port, body)
            assert b"host-secret" not in body
        assert hits == []
    finally:
        listener.close()


def test_another_sandboxs_loopback_is_out_of_reach(public):
    other = Sandbox.create(timeout=300, network={"allow_public_traffic": True})
    try:
        serve_in(other, 9090, who="other")
        # Port 9090 listens in `other` only: through `public`'s name it is nothing.
        status, body = request(public, public.get_host(9090))
        assert status == 502, body
        status, body = request(other, other.get_host(9090))
        assert status == 200 and b'"who": "other"' in body
    finally:
        other.kill()


def test_ambiguous_framing_is_refused_before_the_sandbox(public):
    log = serve_in(public)
    host = public.get_host(PORT).encode()
    smuggle = (
        b"POST / HTTP/1.1\r\nHost: " + host + b"\r\nContent-Length: 44\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    two_lengths = (
        b"POST / HTTP/1.1\r\nHost: " + host + b"\r\nContent-Length: 4\r\n"
        b"Content-Length: 40\r\n\r\nabcdGET /smuggled HTTP/1.1\r\n\r\n"
    )
    for attack in (smuggle, two_lengths):
        answer = raw(public, attack)
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    seen = public.commands.run(f"cat {log} || true").stdout
    assert "smuggled" not in seen
    assert "POST" not in seen


def test_oversized_headers_are_refused(public):
    log = serve_in(public)
    status, _ = request(public, public.get_host(PORT), headers={"X-Big": "a" * 40_000})
    assert status == 431
    assert "GET" not in public.commands.run(f"cat {log} || true").stdout


def test_streamed_answers_and_upgrades_are_relayed(public):
    serve_in(public)
    host = public.get_host(PORT)
    conn = http.client.HTTPConnection(*server_addr(public), timeout=20)
    t0 = time.monotonic()
    conn.request("GET", "/stream", headers={"Host": host})
    r = conn.getresponse()
    first = r.read1(64)
    assert b"first" in first
    # The first chunk arrives before the program has written the second.
    assert time.monotonic() - t0 < 1.4
    assert b"second" in r.read()
    conn.close()

    s = socket.create_connection(server_addr(public), timeout=10)
    s.sendall(
        f"GET / HTTP/1.1\r\nHost: {host}\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1024)
    assert head.startswith(b"HTTP/1.1 101"), head
    s.sendall(b"ping over the upgraded connection")
    got = b""
    while len(got) < 33:
        got += s.recv(1024)
    assert got == b"ping over the upgraded connection"
    s.close()


def test_tls_on_the_servers_port_for_the_names_under_the_domain(public, server):
    serve_in(public)
    host = public.get_host(PORT)
    name = host.rpartition(":")[0]
    ctx = ssl.create_default_context(cafile=str(server.data_dir / "ports-ca-localhost.pem"))
    with socket.create_connection(server_addr(public), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname=name) as t:
            t.sendall(f"GET /tls HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while True:
                b = t.recv(65536)
                if not b:
                    break
                data += b
    assert data.startswith(b"HTTP/1.1 200"), data[:200]
    assert b'"path": "/tls"' in data
    # No certificate for a name outside the domain.
    with socket.create_connection(server_addr(public), timeout=10) as s:
        with pytest.raises(ssl.SSLError):
            ctx.wrap_socket(s, server_hostname="example.com")


def test_create_and_connect_answer_the_domain_and_the_traffic_token(private):
    assert urlsplit(f"http://{private.sandbox_domain}").hostname == "localhost"
    again = Sandbox.connect(private.sandbox_id)
    assert again.sandbox_domain == private.sandbox_domain
    assert again.traffic_access_token == private.traffic_access_token


def test_a_paused_sandbox_wakes_on_a_request_only_when_created_to(public):
    serve_in(public)
    public.pause()
    # Without autoResume a paused sandbox's ports answer 409, and it stays paused.
    assert request(public, public.get_host(PORT))[0] == 409
    assert public.get_info().state.value == "paused"
    public.connect()

    waking = Sandbox.create(
        timeout=300,
        network={"allow_public_traffic": False},
        lifecycle={"on_timeout": "pause", "auto_resume": True},
    )
    try:
        serve_in(waking)
        waking.pause()
        host = waking.get_host(PORT)
        # The token is checked before anything wakes.
        assert request(waking, host)[0] == 403
        assert waking.get_info().state.value == "paused"
        status, _ = request(
            waking, host, headers={"e2b-traffic-access-token": waking.traffic_access_token}
        )
        assert status == 200
        assert waking.get_info().state.value == "running"
    finally:
        waking.kill()


def test_envd_and_interpreter_ports_under_the_domain_are_the_e2b_doors(public):
    """`https://49983-<id>.<domain>` is where an SDK told no E2B_SANDBOX_URL sends its sandbox
    calls: the E2B door serves them there, with the sandbox's access token as on the API's URL."""
    host = public.get_host(49983)
    ok = {"X-Access-Token": public._envd_access_token}
    assert request(public, host, path="/health", headers=ok)[0] in (200, 204)
    rpc = {"Content-Type": "application/json", "Connect-Protocol-Version": "1"}
    status, _ = request(public, host, "/process.Process/List", rpc, "POST", b"{}")
    assert status == 401
    status, body = request(
        public,
        host,
        "/process.Process/List",
        {**rpc, "X-Access-Token": public._envd_access_token},
        "POST",
        b"{}",
    )
    assert status == 200, body
    # The traffic token is no envd token.
    status, _ = request(
        public,
        host,
        "/process.Process/List",
        {**rpc, "e2b-traffic-access-token": public.traffic_access_token},
        "POST",
        b"{}",
    )
    assert status == 401


def test_a_sandbox_paused_to_disk_comes_back_with_the_same_port_grant(private):
    """Its processes are gone after a files-only pause, its grant is not: the same traffic token
    opens the port of the server started again after the resume, and a wrong one still does not."""
    token = private.traffic_access_token
    assert private.pause(keep_memory=False)
    private.connect()
    serve_in(private)
    host = private.get_host(PORT)
    assert request(private, host)[0] == 403, "still not public"
    status, body = request(private, host, headers={"e2b-traffic-access-token": token})
    assert status == 200, body
