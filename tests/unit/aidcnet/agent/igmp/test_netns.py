"""The IGMP socket shell against real Linux receivers: two network namespaces joined by a veth pair
(needs root and `ip`).  A kernel receiver in igA-h joins with IP_ADD_MEMBERSHIP and
IP_ADD_SOURCE_MEMBERSHIP; the agent's raw IGMP port socket and an IgmpLeaf in igA-r query and build the
table; it must match what the receiver's sockets asked for, then forget what they drop."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from ipaddress import IPv4Address

import pytest

from aidcnet.agent.igmp.service import _Port
from aidcnet.igmp.codec import encode
from aidcnet.igmp.node import IgmpLeaf, PortConfig
from aidcnet.igmp.router import FilterMode, IgmpTimers
from tests.unit.aidcnet.agent.bier.test_net_bier import netns

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 for network namespaces"
)

NS_R, NS_H = f"igA-r{os.getpid()}", f"igA-h{os.getpid()}"
R_ADDR, H_ADDR = IPv4Address("10.77.0.1"), IPv4Address("10.77.0.2")
ASM, SSM, SRC = "239.7.7.7", "232.7.7.7", "10.9.9.9"
TIMERS = IgmpTimers(query_interval=3.0, query_response_interval=1.0, last_member_query_interval=0.2)


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=15)


@pytest.fixture(scope="module")
def link():
    for ns in (NS_R, NS_H):
        ip("netns", "add", ns)
    try:
        ip("-n", NS_R, "link", "add", "hp1", "type", "veth", "peer", "name", "eth1", "netns", NS_H)
        ip("-n", NS_R, "addr", "add", f"{R_ADDR}/24", "dev", "hp1")
        ip("-n", NS_H, "addr", "add", f"{H_ADDR}/24", "dev", "eth1")
        ip("-n", NS_R, "link", "set", "hp1", "up")
        ip("-n", NS_H, "link", "set", "eth1", "up")
        yield
    finally:
        for ns in (NS_R, NS_H):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=15)


def pump(port: _Port, leaf: IgmpLeaf, seconds: float) -> None:
    """The service's loop, in miniature: tick, send what is due, read what arrived."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sends = leaf.tick(time.monotonic())
        while True:
            for _port, q in sends.queries:
                port.sock.sendto(encode(q), ("224.0.0.1" if q.is_general else str(q.group), 0))
            try:
                packet = port.rx.recv(65536)
            except BlockingIOError:
                break
            sends = leaf.receive("hp1", packet, time.monotonic())
        time.sleep(0.02)


def test_kernel_receivers_make_the_table(link) -> None:
    with netns(NS_R):
        port = _Port("hp1", R_ADDR)
    loopback = IPv4Address("10.255.0.1")
    leaf = IgmpLeaf(
        [PortConfig("hp1", R_ADDR)], TIMERS, 1, 64, loopback, [], {}, ["igmp"], [], time.monotonic()
    )
    try:
        with netns(NS_H):
            asm = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            asm.setsockopt(
                socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, IPv4Address(ASM).packed + H_ADDR.packed
            )
            ssm = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            mreq_source = IPv4Address(SSM).packed + H_ADDR.packed + IPv4Address(SRC).packed  # ip_mreq_source
            ssm.setsockopt(socket.IPPROTO_IP, 39, mreq_source)  # IP_ADD_SOURCE_MEMBERSHIP
        pump(port, leaf, 1.5)
        table = leaf.links["hp1"].table.snapshot(time.monotonic())
        assert IPv4Address(ASM) in table, (dict(leaf.counters), table)
        assert table[IPv4Address(ASM)].mode is FilterMode.EXCLUDE
        assert table[IPv4Address(SSM)].mode is FilterMode.INCLUDE
        assert table[IPv4Address(SSM)].requested == {IPv4Address(SRC)}
        assert leaf.status(time.monotonic())["ports"]["hp1"]["querier"] is True
        # A General Query round: the kernel answers with current-state records; the table stays.
        pump(port, leaf, TIMERS.qi + TIMERS.qri + 0.5)
        assert set(leaf.links["hp1"].table.snapshot(time.monotonic())) == {IPv4Address(ASM), IPv4Address(SSM)}
        assert leaf.counters["port.hp1.reports"] >= 3
        assert leaf.counters["dropped"] == 0
        asm.close()  # the kernel sends TO_IN({}); our Q(G) goes unanswered; gone after LMQT
        pump(port, leaf, 2 * TIMERS.lmqi + 1.0)
        assert set(leaf.links["hp1"].table.snapshot(time.monotonic())) == {IPv4Address(SSM)}
        ssm.close()
        pump(port, leaf, 2 * TIMERS.lmqi + 1.0)
        assert leaf.links["hp1"].table.snapshot(time.monotonic()) == {}
    finally:
        port.close()
