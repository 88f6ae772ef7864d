"""Traffic source for bench/bier_forwarding.py, run inside the source node's netns
(`ip netns exec NS python bench/bier_sender.py ...`). Sends one prebuilt datagram as fast as batched
sendmmsg allows for SECONDS and prints how many it sent.

  udp  DST PORT SIZE SECONDS                         plain UDP (the kernel forwards it)
  mcast GROUP PORT SIZE SECONDS                      UDP to a multicast group, IP TTL 16 (ipmr forwards it)
  bier DST SIZE SECONDS LABEL BSL BFIR SRC BITS_HEX   MPLS-in-UDP/BIER/IPv4/UDP to a BFR on port 6635
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aidcnet.bier.header import BierHeader
from aidcnet.bier.mpls import MPLS_IN_UDP_PORT
from aidcnet.ipv4 import ROCEV2_PORT, build_udp
from aidcnet.udpio import send_batch

BATCH = 64


def blast(sock: socket.socket, datagram: bytes, dest: tuple[str, int], seconds: float) -> int:
    batch = [(datagram, dest)] * BATCH
    sent = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        n = send_batch(sock, batch)
        sent += n
        if n < BATCH:
            time.sleep(0)  # socket buffer full: let the receiver side drain
    return sent


def main(argv: list[str]) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    if argv[0] == "mcast":
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 16)
        dst, port, size, seconds = argv[1], int(argv[2]), int(argv[3]), float(argv[4])
        sent = blast(sock, b"x" * size, (dst, port), seconds)
    elif argv[0] == "udp":
        dst, port, size, seconds = argv[1], int(argv[2]), int(argv[3]), float(argv[4])
        sent = blast(sock, b"x" * size, (dst, port), seconds)
    else:
        dst, size, seconds = argv[1], int(argv[2]), float(argv[3])
        label, bsl, bfir, src, bits = int(argv[4]), int(argv[5]), int(argv[6]), argv[7], int(argv[8], 16)
        inner = build_udp(src, "232.1.0.1", 49152, ROCEV2_PORT, b"x" * size)
        header = BierHeader(bift_id=label, bitstring=bits, bsl=bsl, ttl=64, bfir_id=bfir, proto=4)
        sent = blast(sock, header.encode() + inner, (dst, MPLS_IN_UDP_PORT), seconds)
    print(sent)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
