"""The datagrams each sender puts on the wire, against docs/replay-payload.md's Transport table: unicast one
stream per receiver from the loopback's QP port ((message id + receiver index) mod qps) to the receiver's
4791; IP multicast once to the op's group from the loopback's port 49152 with TTL 8; host-BIER each message
once through the BIER service with the receivers' BFR-ids and the op id as its flow. Payloads are the
fragments of docs/replay-payload.md, stamped with the op's scheduled time."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

from aidcnet.agent.replay.protocol import Receiver, ReplayLoad, ReplayOp
from aidcnet.agent.replay.service import ReplayService
from aidcnet.ipv4 import QP_PORT_BASE, ROCEV2_PORT
from aidcnet.modes import Mode
from aidcnet.replay import build_fragments

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
Datagram = tuple[str, int, str, int, int, bytes]  # src, sport, dst, dport, ttl, payload


def _udp_sent(cap: socket.socket) -> list[Datagram]:
    """What left on lo (AF_PACKET sees each datagram once as outgoing): UDP only."""
    out = []
    while True:
        try:
            packet, addr = cap.recvfrom(65536)
        except (BlockingIOError, TimeoutError):
            return sorted(out)
        if addr[2] != PACKET_OUTGOING or packet[9] != 17:
            continue
        ihl = (packet[0] & 0xF) * 4
        udp = packet[ihl:]
        src, dst = socket.inet_ntoa(packet[12:16]), socket.inet_ntoa(packet[16:20])
        sport, dport = int.from_bytes(udp[0:2], "big"), int.from_bytes(udp[2:4], "big")
        out.append((src, sport, dst, dport, packet[8], bytes(udp[8:])))


def _replay(load: ReplayLoad, bier: Any = None) -> tuple[list[Datagram], int]:
    """Run ``load`` on a service at 127.0.0.1 starting 20 ms from now; what it sent, and the start."""
    cap = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
    cap.bind(("lo", 0))

    async def run() -> int:
        svc = ReplayService("127.0.0.1", bier=bier)
        await svc.listen()
        try:
            svc.load(load.to_wire())
            start = time.time_ns() + 20_000_000
            svc.start({"start_ns": start})
            assert svc.task is not None
            await asyncio.wait_for(svc.task, 5.0)
            assert not svc.tally.errors, svc.tally.errors
            return start
        finally:
            svc.close()

    try:
        start = asyncio.run(run())
        cap.settimeout(0.2)
        return _udp_sent(cap), start
    finally:
        cap.close()


def test_unicast_sends_one_stream_per_receiver_from_its_qp(private_lo) -> None:
    receivers = {"h2": Receiver("127.0.0.2"), "h3": Receiver("127.0.0.3")}
    ops = (ReplayOp(3, 0.0, 10_000, ("h2", "h3")), ReplayOp(4, 0.01, 300, ("h3",)))
    sent, start = _replay(ReplayLoad(Mode.UNICAST, ops, receivers, max_datagram=4000, qps=4))
    expected = []
    for op in ops:
        frags = build_fragments(op.id, op.size, start + int(op.t * 1e9), 4000)
        for j, name in enumerate(op.receivers):
            sport = QP_PORT_BASE + (op.id + j) % 4
            dst = receivers[name].address
            expected += [("127.0.0.1", sport, dst, ROCEV2_PORT, 64, f) for f in frags]
    assert sent == sorted(expected)


def test_ip_multicast_sends_each_op_once_to_its_group(private_lo) -> None:
    ops = (
        ReplayOp(5, 0.0, 9_000, ("h2", "h3"), "239.100.0.7"),
        ReplayOp(6, 0.0, 100, ("h2",), "239.100.0.8"),
    )
    load = ReplayLoad(
        Mode.NET_BIER, ops, {"h2": Receiver("10.0.0.2"), "h3": Receiver("10.0.0.3")}, interface="lo"
    )
    sent, start = _replay(load)
    expected = [
        ("127.0.0.1", QP_PORT_BASE, op.group, ROCEV2_PORT, 8, f)
        for op in ops
        for f in build_fragments(op.id, op.size, start, load.max_datagram)
    ]
    assert sent == sorted(expected)


class _Bier:
    """The BIER service as the host-BIER sender sees it: what it is handed."""

    def __init__(self) -> None:
        self.host = object()
        self.sent: list[tuple[list[bytes], list[int], int]] = []

    def send_message(self, batch: list[bytes], bits: list[int], flow: int) -> None:
        self.sent.append((list(batch), list(bits), flow))


def test_host_bier_hands_each_message_once_to_the_bier_service(private_lo) -> None:
    bier = _Bier()
    receivers = {"h2": Receiver("10.0.0.2", 2), "h3": Receiver("10.0.0.3", 7)}
    ops = (ReplayOp(9, 0.0, 20_000, ("h3", "h2")),)
    sent, start = _replay(ReplayLoad(Mode.HOST_BIER, ops, receivers, max_datagram=4000), bier)
    assert sent == []  # nothing of its own: the BIER service sends
    assert bier.sent == [(build_fragments(9, 20_000, start, 4000), [7, 2], 9)]
