"""Traffic source for bench/bier_forwarding_netns.py, run inside the source's netns
(`ip netns exec NS python bench/bier_sender.py ...`). Sends one prebuilt datagram as fast as batched
sendmmsg allows for SECONDS and prints how many it sent.

  udp  DST PORT SIZE SECONDS                         plain UDP (the kernel forwards it)
  mcast GROUP PORT SIZE SECONDS                      UDP to a multicast group, IP TTL 16 (ipmr forwards it)
  bier DST SIZE SECONDS LABEL BSL BFIR SRC BITS_HEX   MPLS-in-UDP/BIER/IPv4/UDP to a BFR on port 6635
"""

from __future__ import annotations

import argparse
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


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = p.add_subparsers(dest="kind", required=True)
    for kind in ("udp", "mcast"):
        k = kinds.add_parser(kind)
        k.add_argument("dst")
        k.add_argument("port", type=int)
        k.add_argument("size", type=int)
        k.add_argument("seconds", type=float)
    k = kinds.add_parser("bier")
    k.add_argument("dst")
    k.add_argument("size", type=int)
    k.add_argument("seconds", type=float)
    k.add_argument("label", type=int)
    k.add_argument("bsl", type=int)
    k.add_argument("bfir", type=int)
    k.add_argument("src")
    k.add_argument("bits", type=lambda v: int(v, 16), help="BitString in hex")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    if args.kind == "mcast":
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 16)
    if args.kind in ("udp", "mcast"):
        sent = blast(sock, b"x" * args.size, (args.dst, args.port), args.seconds)
    else:
        inner = build_udp(args.src, "232.1.0.1", 49152, ROCEV2_PORT, b"x" * args.size)
        header = BierHeader(
            bift_id=args.label, bitstring=args.bits, bsl=args.bsl, ttl=64, bfir_id=args.bfir, proto=4
        )
        sent = blast(sock, header.encode() + inner, (args.dst, MPLS_IN_UDP_PORT), args.seconds)
    print(sent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
