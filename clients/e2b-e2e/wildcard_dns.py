"""A DNS server for test namespaces: every name under the given suffixes is 127.0.0.1.

`Sandbox.get_host(port)` names `{port}-{id}.{sandboxDomain}`, and E2B's tests open that name
(https://8001-….localhost:PORT); this host's resolver (glibc, no systemd-resolved) does not
map `*.localhost` to loopback as RFC 6761 suggests, so scripts/e2b-suite.sh runs this inside
its loopback-only network namespace, with /etc/resolv.conf (bind-mounted in its own mount
namespace) pointing here. Threat model: only processes of that namespace can reach it; it
answers A queries under the suffixes with 127.0.0.1, AAAA there with no address, and
NXDOMAIN for everything else — it never forwards a query. Standard library only.

    python wildcard_dns.py [--listen 127.0.0.1:53] SUFFIX...
"""

import argparse
import socket
import struct


def parse_question(data: bytes):
    """(id, flags, qname, qtype, end of question) or None for a malformed query."""
    if len(data) < 12:
        return None
    qid, flags, qdcount = struct.unpack("!HHH", data[:6])
    if qdcount != 1:
        return None
    labels, i = [], 12
    while True:
        if i >= len(data):
            return None
        n = data[i]
        i += 1
        if n == 0:
            break
        if n > 63 or i + n > len(data):
            return None
        labels.append(data[i : i + n].decode("ascii", "replace").lower())
        i += n
    if i + 4 > len(data):
        return None
    qtype, _qclass = struct.unpack("!HH", data[i : i + 4])
    return qid, flags, ".".join(labels), qtype, i + 4


def answer(data: bytes, suffixes) -> bytes | None:
    q = parse_question(data)
    if q is None:
        return None
    qid, flags, name, qtype, end = q
    question = data[12:end]
    ours = any(name == s or name.endswith("." + s) for s in suffixes)
    rd = flags & 0x0100
    if not ours:
        # Response, recursion available, NXDOMAIN.
        return struct.pack("!HHHHHH", qid, 0x8083 | rd, 1, 0, 0, 0) + question
    if qtype == 1:  # A
        record = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 5, 4) + socket.inet_aton("127.0.0.1")
        return struct.pack("!HHHHHH", qid, 0x8480 | rd, 1, 1, 0, 0) + question + record
    # Authoritative, no error, no records (AAAA and the rest).
    return struct.pack("!HHHHHH", qid, 0x8480 | rd, 1, 0, 0, 0) + question


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", default="127.0.0.1:53")
    ap.add_argument("suffix", nargs="+")
    a = ap.parse_args()
    host, port = a.listen.rsplit(":", 1)
    suffixes = [s.lower().strip(".") for s in a.suffix]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, int(port)))
    while True:
        data, peer = sock.recvfrom(512)
        reply = answer(data, suffixes)
        if reply is not None:
            sock.sendto(reply, peer)


if __name__ == "__main__":
    main()
