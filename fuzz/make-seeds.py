#!/usr/bin/env python3
"""Writes the seed corpora of fuzz/corpus/<target>/: real inputs of each parser.

Tar layers are made with Python's tarfile (ustar, GNU and PAX, plain, gzip and zstd) including
the hostile shapes the unpacker documents; HTTP requests and TLS ClientHellos are captured
from real clients (curl, Python's urllib and ssl, openssl s_client) talking to a listener on
127.0.0.1 that records their first bytes; the rest are documents as registries, SDKs and the
README write them. Re-run it to refresh the seeds: it replaces the `seed-*` files only, so the
findings kept beside them (`crash-*`) stay. Nothing leaves this machine.
"""

import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tarfile
import tempfile
import threading
import urllib.request
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"
REPO = Path(__file__).resolve().parent.parent


def put(target: str, name: str, data: bytes) -> None:
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / f"seed-{name}").write_bytes(data)


# ---------------------------------------------------------------------------- tar layers


def layer(entries, fmt=tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for info, data in entries:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def entry(name, kind=tarfile.REGTYPE, data=b"", mode=0o644, link="", **kw):
    i = tarfile.TarInfo(name)
    i.type = kind
    i.mode = mode
    i.linkname = link
    i.mtime = 1700000000
    if kind == tarfile.REGTYPE:
        i.size = len(data)
    for k, v in kw.items():
        setattr(i, k, v)
    return i, data if kind == tarfile.REGTYPE else None


def tar_seeds():
    d = tarfile.DIRTYPE
    base = [
        entry("etc/", d, mode=0o755),
        entry("etc/os-release", data=b'ID=fuzz\nPRETTY_NAME="fuzz"\n'),
        entry("usr/", d, mode=0o755),
        entry("usr/bin/", d, mode=0o755),
        entry("usr/bin/tool", data=b"#!/bin/sh\necho hi\n", mode=0o755),
        entry("usr/bin/alias", tarfile.SYMTYPE, link="tool"),
        entry("usr/bin/hard", tarfile.LNKTYPE, link="usr/bin/tool"),
        entry("run/", d, mode=0o755),
        entry("run/fifo", tarfile.FIFOTYPE),
        entry("tmp/", d, mode=0o1777),
    ]
    put("tar_unpack", "plain-pax", layer(base))
    put("tar_unpack", "plain-gnu", layer(base, tarfile.GNU_FORMAT))
    put("tar_unpack", "plain-ustar", layer(base, tarfile.USTAR_FORMAT))
    put("tar_unpack", "gzip", gzip.compress(layer(base), mtime=0))
    if shutil.which("zstd"):
        z = subprocess.run(["zstd", "-q", "-c"], input=layer(base), capture_output=True, check=True)
        put("tar_unpack", "zstd", z.stdout)
    hostile = {
        "dotdot": [entry("../escaped", data=b"x"), entry("a/../../escaped2", data=b"x")],
        "absolute": [entry("/etc/passwd", data=b"root::0:0::/:/bin/sh\n")],
        "through-symlink": [
            entry("lib", tarfile.SYMTYPE, link="../canary"),
            entry("lib/file", data=b"overwritten"),
            entry("up", tarfile.SYMTYPE, link="/"),
            entry("up/escaped", data=b"x"),
        ],
        "hardlink-out": [
            entry("h1", tarfile.LNKTYPE, link="../canary/file"),
            entry("h2", tarfile.LNKTYPE, link="/etc/passwd"),
            entry("s", tarfile.SYMTYPE, link=".."),
            entry("h3", tarfile.LNKTYPE, link="s/canary/file"),
        ],
        "file-over-symlink": [
            entry("x", tarfile.SYMTYPE, link="../canary/file"),
            entry("x", data=b"replaced"),
            entry("d", tarfile.SYMTYPE, link="../canary"),
            entry("d/", tarfile.DIRTYPE, mode=0o755),
        ],
        "devices-setid": [
            entry("dev/", d, mode=0o755),
            entry("dev/mem", tarfile.CHRTYPE, devmajor=1, devminor=1),
            entry("dev/sda", tarfile.BLKTYPE, devmajor=8, devminor=0),
            entry("suid", data=b"x", mode=0o4755),
            entry("sgid", data=b"x", mode=0o2755),
            entry("sticky/", d, mode=0o1777),
        ],
        "whiteouts": [
            entry("a/", d, mode=0o755),
            entry("a/.wh.gone", data=b""),
            entry("a/kept", data=b"k"),
            entry("b/", d, mode=0o755),
            entry("b/.wh..wh..opq", data=b""),
            entry(".wh.top", data=b""),
            entry("a/.wh.kept", data=b""),
        ],
        "long-names": [
            entry("d/" + "n" * 200 + "/" + "f" * 120, data=b"long"),
            entry("l" * 150, tarfile.SYMTYPE, link="t" * 300),
        ],
        "modes-zero": [
            entry("locked/", d, mode=0o000),
            entry("locked/inside", data=b"x", mode=0o000),
        ],
    }
    for name, es in hostile.items():
        put("tar_unpack", name, layer(es))
    put("tar_unpack", "dotdot-gnu", layer(hostile["dotdot"], tarfile.GNU_FORMAT))
    put("tar_unpack", "long-names-gnu", layer(hostile["long-names"], tarfile.GNU_FORMAT))
    # PAX extended attributes (file capabilities) and a size the header lies about.
    i, data = entry("cap", data=b"x")
    i.pax_headers = {"SCHILY.xattr.security.capability": "\x01\x00\x00\x02", "path": "paxname"}
    put("tar_unpack", "pax-xattr", layer([(i, data)]))


# ---------------------------------------------------------------------------- registries

D = "sha256:" + "a" * 64
D2 = "sha256:" + "b" * 64


def oci_seeds():
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": D, "size": 1234,
             "platform": {"architecture": "amd64", "os": "linux"}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": D2, "size": 1234,
             "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": D, "size": 566,
             "annotations": {"vnd.docker.reference.digest": D2, "vnd.docker.reference.type": "attestation-manifest"},
             "platform": {"architecture": "unknown", "os": "unknown"}},
        ],
    }
    docker_list = dict(index, mediaType="application/vnd.docker.distribution.manifest.list.v2+json")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": D, "size": 100},
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": D2, "size": 3000},
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": D, "size": 10},
        ],
    }
    docker_manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": D, "size": 100},
        "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "digest": D2, "size": 3000}],
    }
    config = {
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "Entrypoint": ["python3"], "Cmd": ["-c", "print(1)"],
                   "WorkingDir": "/app", "User": "1000:1000"},
        "rootfs": {"type": "layers", "diff_ids": [D, D2]},
    }
    one = {"schemaVersion": 2, "manifests": [{"digest": D, "size": 5}]}
    for i, (name, doc) in enumerate([("index", index), ("docker-list", docker_list), ("manifest", manifest),
                                      ("docker-manifest", docker_manifest), ("config", config), ("layout-index", one)]):
        put("oci_manifest", name, bytes([i % 6]) + json.dumps(doc).encode())
    put("oci_manifest", "platform", b"\x00linux/arm64/v8")
    for name, h in [
        ("hub", 'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/python:pull"'),
        ("ghcr", 'Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:o/r:pull"'),
        ("basic", 'Basic realm="Registry Realm"'),
        ("escaped", r'Bearer realm="a \"q\" b",error="invalid_token", service=unquoted'),
        ("distribution", 'Bearer realm="http://127.0.0.1:5001/auth",service="Docker registry",scope="repository:app:pull,push"'),
    ]:
        put("registry_challenge", name, h.encode())
    for i, r in enumerate([
        "python:3.12-slim", "ghcr.io/o/r:tag", f"localhost:5000/app@{D}", "docker.io/library/alpine",
        "[::1]:5000/x:1", "registry-1.docker.io/library/x", "a/b/c:1", "busybox", f"ubuntu:22.04@{D2}",
        "127.0.0.1:5000/cordon/test-image:latest", "index.docker.io/user/app",
    ]):
        put("image_reference", str(i), r.encode())


# ---------------------------------------------------------------------------- policy


def policy_seeds():
    for i, s in enumerate([
        "pypi.org\npypi.org\n443", "*.example.com\nsub.example.com\n443", "*.example.com\nexample.com\n443",
        "10.0.0.0/8\n10.1.2.3\n80", "[fd00::/8]:*\n[fd00::1]\n22", "127.0.0.1:8080\n127.1\n8080",
        "api.example.com:8443\nAPI.Example.COM.\n8443", "bücher.example\nxn--bcher-kva.example\n443",
        "10.0.0.1\n0x0a000001\n80", "1.2.3.4\n[::ffff:1.2.3.4]\n443", "files.pythonhosted.org\n169.254.169.254\n80",
        "*.*.x\na.b.x\n443", "0.0.0.0/0\n8.8.8.8\n53",
    ]):
        put("egress_allow", str(i), s.encode())
    readme = (REPO / "README.md").read_text()
    blocks = readme.split("```toml\n")[1:]
    for i, b in enumerate(blocks):
        put("profile_toml", f"readme-{i}", b.split("```")[0].encode())
    put("profile_toml", "cli-test", b'name = "mine"\nextends = "strict"\nhostname = "box-1"\n[limits]\ntimeout = "7s"\n')
    put("profile_toml", "typo", b'extends = "default"\n[limits]\nmemroy = "1G"\n')
    put("profile_toml", "floats", b'[limits]\ncpus = 0.5\nmemory = "512M"\n')
    put("wasm_header", "module", b"\0asm\x01\0\0\0\x01\x04\x01\x60\0\0")
    put("wasm_header", "component", b"\0asm\x0d\0\x01\0")
    put("wasm_header", "elf", b"\x7fELF\x02\x01\x01\0")
    tmp = Path(tempfile.mkdtemp())
    wasm = tmp / "seed.wasm"
    if shutil.which("clang"):
        src = tmp / "seed.c"
        src.write_text('#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n')
        r = subprocess.run(["clang", "--target=wasm32-wasi", "-O2", "-o", str(wasm), str(src)], capture_output=True)
        if r.returncode == 0 and wasm.stat().st_size < 64 << 10:
            put("wasm_header", "wasi-hello", wasm.read_bytes())
    shutil.rmtree(tmp)


# ---------------------------------------------------------------------------- captured traffic


def capture(client, tls=False):
    """Runs `client(port)` against a listener on 127.0.0.1 and returns the first bytes it sent."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    got = []

    def serve():
        c, _ = srv.accept()
        c.settimeout(3)
        data = b""
        try:
            while len(data) < 65536:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
                if not tls and b"\r\n\r\n" in data:
                    break
                if tls and len(data) >= 5 and len(data) >= 5 + int.from_bytes(data[3:5], "big"):
                    break
        except OSError:
            pass
        got.append(data)
        try:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" if not tls else b"\x15\x03\x03\x00\x02\x02\x28")
        except OSError:
            pass
        c.close()

    t = threading.Thread(target=serve)
    t.start()
    try:
        client(port)
    except Exception:
        pass
    t.join(10)
    srv.close()
    return got[0] if got else b""


def run(cmd):
    subprocess.run(cmd, capture_output=True, timeout=10, stdin=subprocess.DEVNULL)


def traffic_seeds():
    proxied = {
        "curl": lambda p: run(["curl", "-sS", "--max-time", "5", "-x", f"http://127.0.0.1:{p}", "http://example.com/path?q=1"]),
        "curl-post": lambda p: run(["curl", "-sS", "--max-time", "5", "-x", f"http://127.0.0.1:{p}", "-d", "a=1&b=2",
                                    "http://pypi.org:8080/simple/"]),
        "curl-chunked": lambda p: run(["curl", "-sS", "--max-time", "5", "-x", f"http://127.0.0.1:{p}", "-H",
                                       "Transfer-Encoding: chunked", "-d", "x", "http://[::1]/"]),
        "urllib": lambda p: urllib.request.build_opener(
            urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{p}"})).open("http://files.pythonhosted.org/packages/x.whl", timeout=5),
    }
    for name, client in proxied.items():
        data = capture(client)
        if data:
            put("http_request", name, data)
    for name, raw in {
        "smuggle-cl-te": b"POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "dup-cl": b"POST http://a.example/ HTTP/1.1\r\nContent-Length: 4, 4\r\nContent-Length: 4\r\n\r\nabcd",
        "conn-cl": b"GET http://a.example/ HTTP/1.1\r\nConnection: content-length, x-drop\r\nX-Drop: 1\r\nContent-Length: 0\r\n\r\n",
        "host-mismatch": b"GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n",
        "bare-lf": b"GET http://a.example:81/x#frag HTTP/1.0\nHost: A.EXAMPLE:81\nProxy-Authorization: Basic eA==\n\n",
        "hop": b"GET http://127.1/ HTTP/1.1\r\nTE: trailers\r\nUpgrade: h2c\r\nKeep-Alive: 5\r\nProxy-Connection: keep-alive\r\n\r\n",
    }.items():
        put("http_request", name, raw)

    hellos = {
        "openssl": lambda p: run(["openssl", "s_client", "-connect", f"127.0.0.1:{p}", "-servername", "pypi.org"]),
        "openssl-tls12": lambda p: run(["openssl", "s_client", "-tls1_2", "-connect", f"127.0.0.1:{p}", "-servername", "api.example.com"]),
        "openssl-nosni": lambda p: run(["openssl", "s_client", "-connect", f"127.0.0.1:{p}", "-noservername"]),
        "curl": lambda p: run(["curl", "-sS", "--max-time", "5", "--resolve", f"files.pythonhosted.org:{p}:127.0.0.1",
                               f"https://files.pythonhosted.org:{p}/"]),
        "python-ssl": lambda p: ssl.create_default_context().wrap_socket(
            socket.create_connection(("127.0.0.1", p), timeout=5), server_hostname="github.com"),
    }
    for name, client in hellos.items():
        data = capture(client, tls=True)
        if data:
            put("tls_sni", name, data)
    put("tls_sni", "http", b"GET / HTTP/1.1\r\n\r\n")
    put("tls_sni", "host", b"example.com")


# ---------------------------------------------------------------------------- server doors


def envelope(flags, obj):
    body = json.dumps(obj).encode()
    return bytes([flags]) + len(body).to_bytes(4, "big") + body


def server_seeds():
    start = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo hi"], "envs": {}, "cwd": "/home/user"}, "stdin": False}
    put("connect_envelope", "start", b"\x07" + envelope(0, start))
    put("connect_envelope", "start-end", b"\x00" + envelope(0, start) + envelope(2, {}))
    put("connect_envelope", "stdin", b"\x01" + envelope(0, {"process": {"pid": 12}, "input": {"stdin": "aGkK"}}))
    put("connect_envelope", "compressed", b"\x03" + envelope(1, {}))
    put("connect_envelope", "over-cap", b"\x05\x00\x7f\xff\xff\xff")
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "mcp", "version": "0.1.0"}}}
    for name, m in {
        "initialize": init,
        "initialized": {"jsonrpc": "2.0", "method": "notifications/initialized"},
        "tools-list": {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        "tools-call": {"jsonrpc": "2.0", "id": "c-2", "method": "tools/call",
                       "params": {"name": "run_command", "arguments": {"command": "echo hi"}}},
        "null-id": {"jsonrpc": "2.0", "id": None, "method": "ping"},
        "batch": [{"jsonrpc": "2.0", "id": 1, "method": "ping"}],
        "response": {"jsonrpc": "2.0", "id": 5, "result": {}},
    }.items():
        put("mcp_framing", name, json.dumps(m).encode())
    put("mcp_framing", "garbage", b"{not json")
    put("mcp_framing", "cut", json.dumps(init).encode()[:40])
    boundary = b"fuzzboundary"
    mp = (b"--" + boundary + b"\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/a.txt\"\r\n"
          b"Content-Type: application/octet-stream\r\n\r\nhello\r\n--" + boundary + b"\r\n"
          b"Content-Disposition: form-data; name=\"file\"; filename=\"../../etc/x\"\r\n\r\nx\r\n--" + boundary + b"--\r\n")
    put("upload_body", "multipart", b"\x02" + mp)
    put("upload_body", "multipart-gzip", b"\x03" + gzip.compress(mp, mtime=0))
    put("upload_body", "gzip", b"\x01" + gzip.compress(b"hello world\n" * 10, mtime=0))
    put("upload_body", "gzip-bomb", b"\x01" + gzip.compress(b"\0" * (1 << 20), mtime=0))
    put("upload_body", "gzip-multi", b"\x01" + gzip.compress(b"a", mtime=0) + gzip.compress(b"b", mtime=0))


def gateway_seeds():
    readme = (REPO / "README.md").read_text()
    for i, b in enumerate(readme.split("```toml\n")[1:]):
        text = b.split("```")[0]
        if "[gateway]" in text or "[servers." in text:
            put("gateway_toml", f"readme-{i}", text.encode())
    put("gateway_toml", "e2e", b'''[gateway]
default = "deny"
audit = "audit.jsonl"
log_args = true

[servers.files]
command = ["python3", "upstream_server.py", "files"]
ro = ["/srv"]
rw = ["/data/public", "/data/system"]

[tools.word_count]
description = "Count words"
input = { type = "object", properties = { text = { type = "string" } }, required = ["text"] }
command = ["python3", "-c", "print(1)"]

[[rules]]
tool = "mail.send_email"
args = { properties = { to = { type = "string", pattern = "@company\\\\.com$" } }, required = ["to"] }
when = "!has(args.body) || size(args.body) <= 100"

[[rules]]
tool = "files.*"
paths = { path = { deny = ["/system/**", "/data/system/**"] } }

[[rules]]
tool = "files.list_dir"
rate = "2/second"
''')
    for i, s in enumerate([
        "/system/**\n/system/../system/x", "/system/**\n//system/x", "/system/**\n/tmp/../system/x",
        "/system/**\n/%2e%2e/system/x", "/system/**\n/%252e%252e/system/%2Fx", "/data/*.key\n/data/a.key",
        "/home/*/notes\n/home/u/notes", "/a/{b,c}/**\n/a/c/d", "/**\n/", "/data/secret.txt\n/data/./secret.txt/",
    ]):
        put("gateway_path", str(i), s.encode())


def main():
    for d in CORPUS.glob("*/seed-*"):
        d.unlink()
    tar_seeds()
    oci_seeds()
    policy_seeds()
    traffic_seeds()
    server_seeds()
    gateway_seeds()
    total = sum(f.stat().st_size for f in CORPUS.rglob("*") if f.is_file())
    print(f"{sum(1 for _ in CORPUS.rglob('seed-*'))} seeds, corpus {total} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
