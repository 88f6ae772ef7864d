"""Run inside a network namespace by test_bgp_md5_netns.py: argv = repo root, the client's secret.

A listener with secret "right" and a client with the given secret connect over loopback with TCP-MD5
(RFC 2385, Linux TCP_MD5SIG); prints the outcome, the MD5 counter growth and session_problem's verdict."""

import json
import socket
import struct
import sys

sys.path.insert(0, sys.argv[1])
from aidcnet.bgp.security import md5_deltas, parse_netstat, session_problem

TCP_MD5SIG = getattr(socket, "TCP_MD5SIG", 14)  # linux/tcp.h


def md5(sock: socket.socket, peer: str, key: bytes) -> None:
    # struct tcp_md5sig: sockaddr_storage, flags, prefixlen, keylen, ifindex, key[80]
    addr = struct.pack("=H2s4s", socket.AF_INET, b"\0\0", socket.inet_aton(peer)).ljust(128, b"\0")
    sig = addr + struct.pack("=BBHI", 0, 0, len(key), 0) + key.ljust(80, b"\0")
    sock.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG, sig)


def counters() -> dict[str, int]:
    with open("/proc/net/netstat") as f:
        return parse_netstat(f.read())


base = counters()
with socket.socket() as srv, socket.socket() as cli:
    md5(srv, "127.0.0.1", b"right")
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    md5(cli, "127.0.0.1", sys.argv[2].encode())
    cli.settimeout(1.5)
    try:
        cli.connect(srv.getsockname())
        state = "up"
    except OSError as exc:
        state = f"down ({exc.__class__.__name__})"
d = md5_deltas(counters(), base)
print(json.dumps({"state": state, "deltas": d, "problem": session_problem(state, True, d)}))
