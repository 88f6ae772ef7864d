"""FARE traffic from a GPU host, in the two modes of the seed draft (draft-xu-rtgwg-fare-in-sun §3).

* per-flow (§3.1): every QP is one UDP source port from the GPU's loopback; the kernel hashes the source
  port (``fib_multipath_hash_policy=1``) over the weighted nexthops BGP installed. The sender does nothing
  about planes: the weights alone decide.
* per-packet (§3.2): one QP per plane; the sender sprays packets over the planes with smooth weighted
  round-robin on the weights BGP computed, each plane's socket bound to its interface (SO_BINDTODEVICE),
  which makes the kernel use that interface's nexthop of the multipath route.

Either way the result is measured with the interfaces' own tx counters, not with what we meant to send.
Every datagram to UDP 4791 carries a RoCEv2 BTH (``aidcnet.rocev2``): a queue pair per flow (per plane when
spraying), its PSN counting that QP's packets.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from pathlib import Path

from aidcnet.fare.weights import SmoothWeightedRoundRobin
from aidcnet.ipv4 import QP_PORT_BASE, ROCEV2_PORT
from aidcnet.rocev2 import data_qp, send_only


def tx_packets(devs: Iterable[str]) -> dict[str, int]:
    return {dev: int(Path(f"/sys/class/net/{dev}/statistics/tx_packets").read_text()) for dev in devs}


def _socket(src: str, sport: int, dev: str | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if dev is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, dev.encode())
    sock.bind((src, sport))
    return sock


def send_per_flow(
    src: str, dst: str, flows: int, packets: int, size: int, first_port: int = QP_PORT_BASE
) -> int:
    """``flows`` QPs (source ports first_port..), ``packets`` each; returns packets handed to the kernel."""
    sent = 0
    for i in range(flows):
        sport = first_port + i % (65536 - first_port)
        with _socket(src, sport) as sock:
            for psn in range(packets):
                sock.sendto(send_only(data_qp(i), psn, size), (dst, ROCEV2_PORT))
                sent += 1
    return sent


def send_per_packet(
    src: str, dst: str, weights: Mapping[str, int], packets: int, size: int, first_port: int = QP_PORT_BASE
) -> dict[str, int]:
    """Spray ``packets`` over the interfaces in ``weights`` (one QP each); returns packets per interface."""
    planes = sorted(weights)
    socks = {dev: _socket(src, first_port + i, dev) for i, dev in enumerate(planes)}
    counts = dict.fromkeys(socks, 0)
    try:
        spray = SmoothWeightedRoundRobin(weights)
        for _ in range(packets):
            dev = next(spray)
            qp = data_qp(planes.index(dev))
            socks[dev].sendto(send_only(qp, counts[dev], size), (dst, ROCEV2_PORT))
            counts[dev] += 1
    finally:
        for sock in socks.values():
            sock.close()
    return counts
