"""A plain IP multicast application for the network-BIER tests, run inside a node's netns with
`ip netns exec NS python mcast_app.py ...`: exactly what a host application would do, nothing BIER."""

from __future__ import annotations

import json
import select
import socket
import struct
import sys
import time


def receive(group: str, port: int, ifname: str, seconds: float) -> None:
    """Listen until a line arrives on stdin (the test says stop) or ``seconds`` pass, then report."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((group, port))
    ifindex = socket.if_nametoindex(ifname)
    # ip_mreqn: group, any local address, this interface
    mreqn = struct.pack("4s4si", socket.inet_aton(group), socket.inet_aton("0.0.0.0"), ifindex)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreqn)
    print("ready", flush=True)
    got = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([sock, sys.stdin], [], [], left)
        if sys.stdin in readable:
            break
        if sock in readable:
            data, addr = sock.recvfrom(65535)
            got.append({"payload": data.decode(errors="replace"), "from": addr[0]})
    while True:  # anything already queued still counts
        try:
            data, addr = sock.recvfrom(65535, socket.MSG_DONTWAIT)
        except BlockingIOError:
            break
        got.append({"payload": data.decode(errors="replace"), "from": addr[0]})
    print(json.dumps(got), flush=True)


def app(port: int, seconds: float) -> None:
    """A host application on 127.0.0.1:PORT, where host-BIER hands delivered payloads."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", port))
    print("ready", flush=True)
    got = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            got.append(sock.recv(65535).decode(errors="replace"))
        except TimeoutError:
            break
    print(json.dumps(got), flush=True)


def send(group: str, port: int, ifname: str, count: int, tag: str, source: str = "") -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if source:
        # Like a GPU application bound to its GPU (loopback) address: that is the S of (S,G).
        sock.bind((source, 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 8)
    # The sender's own kernel would loop the group back to its local listener; only the network counts.
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
    sock.setsockopt(
        socket.IPPROTO_IP,
        socket.IP_MULTICAST_IF,
        struct.pack(
            "4s4si", socket.inet_aton(group), socket.inet_aton("0.0.0.0"), socket.if_nametoindex(ifname)
        ),
    )
    for seq in range(count):
        sock.sendto(f"{tag}:{seq}".encode(), (group, port))
        time.sleep(0.01)


if __name__ == "__main__":
    if sys.argv[1] == "app":
        app(int(sys.argv[2]), float(sys.argv[3]))
        sys.exit(0)
    mode, group, port, ifname = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if mode == "recv":
        receive(group, port, ifname, float(sys.argv[5]))
    else:
        send(group, port, ifname, int(sys.argv[5]), sys.argv[6], *(sys.argv[7:8]))
