"""The replay service's membership signalling against the IGMP leaf, across a veth pair between two network
namespaces (needs root and `ip`): an igmp receiver's per-op kernel join reaches the leaf as IGMPv3
INCLUDE {S} for (S,G) and its leave removes it; a proxy source's report installs the receivers' BFER at
the leaf and its empty report withdraws it, each counted with its bytes."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from ipaddress import IPv4Address

import pytest

from aidcnet.agent.igmp.service import _Port
from aidcnet.agent.replay import service as rs
from aidcnet.agent.replay.protocol import ReplayLoad, Report
from aidcnet.agent.replay.signalling import (
    PROXY_REPORT_BYTES_SENT,
    PROXY_REPORTS_SENT,
    ProxyReports,
    ReceiverJoins,
)
from aidcnet.igmp.codec import encode
from aidcnet.igmp.node import IgmpLeaf, PortConfig
from aidcnet.igmp.router import FilterMode, IgmpTimers
from aidcnet.modes import Mode
from tests.unit.aidcnet.agent.bier.test_net_bier import netns

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 for network namespaces"
)

NS_R, NS_H = f"igR-r{os.getpid()}", f"igR-h{os.getpid()}"
R_ADDR, H_ADDR = IPv4Address("10.78.0.1"), IPv4Address("10.78.0.2")
GROUP, SOURCE = IPv4Address("239.101.0.3"), IPv4Address("10.255.0.9")
RECEIVER = IPv4Address("10.255.0.2")  # a receiver's loopback behind BFER 4
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
        ip("-n", NS_H, "link", "set", "lo", "up")
        ip("-n", NS_H, "route", "add", "224.0.0.0/4", "dev", "eth1")
        yield
    finally:
        for ns in (NS_R, NS_H):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=15)


def leaf_and_port(proxy: bool) -> tuple[IgmpLeaf, _Port]:
    with netns(NS_R):
        port = _Port("hp1", R_ADDR)
    leaf = IgmpLeaf(
        [PortConfig("hp1", R_ADDR, True, proxy)], TIMERS, 1, 64, IPv4Address("10.255.0.1"), [],
        {RECEIVER: 4}, ["igmp", "proxy"], [], time.monotonic(),
    )  # fmt: skip
    return leaf, port


async def pump(port: _Port, leaf: IgmpLeaf, seconds: float) -> None:
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
        await asyncio.sleep(0.02)


def test_igmp_receiver_join_and_leave_reach_the_leaf(link) -> None:
    leaf, port = leaf_and_port(proxy=False)

    async def run() -> None:
        svc = rs.ReplayService("10.255.0.2")
        joins = ReceiverJoins(svc, ReplayLoad(Mode.IGMP, interface="eth1"))
        with netns(NS_H):
            joins.member_join(str(GROUP), str(SOURCE))
            joins.member_join(str(GROUP), str(SOURCE))  # a second op on the same (S,G): the same socket
        assert len(joins.held) == 1
        await pump(port, leaf, 0.5)
        table = leaf.links["hp1"].table.snapshot(time.monotonic())
        assert table[GROUP].mode is FilterMode.INCLUDE and table[GROUP].requested == {SOURCE}, table
        assert leaf.counters["rx-bytes"] > 0
        joins.member_leave(str(GROUP), str(SOURCE))  # one op still needs it
        await pump(port, leaf, 2 * TIMERS.lmqi + 0.5)
        assert GROUP in leaf.links["hp1"].table.snapshot(time.monotonic())
        joins.member_leave(str(GROUP), str(SOURCE))
        await pump(port, leaf, 2 * TIMERS.lmqi + 1.0)
        assert leaf.links["hp1"].table.snapshot(time.monotonic()) == {}
        assert joins.held == {}

    try:
        asyncio.run(run())
    finally:
        port.close()


def test_proxy_reports_install_and_withdraw_at_the_leaf(link) -> None:
    leaf, port = leaf_and_port(proxy=True)

    async def run() -> None:
        svc = rs.ReplayService(str(SOURCE))
        steps = (Report(0, True, str(GROUP), (str(RECEIVER),)), Report(0, False, str(GROUP), ()))
        load = ReplayLoad(Mode.PROXY, interface="eth1", reports=steps)
        reports = ProxyReports(svc, load)
        reports.add(load)
        with netns(NS_H):
            reports.sock = reports.open_socket()
        try:
            reports.send(0, True)
            await pump(port, leaf, 0.3)
            assert [(f.source, f.group, f.bfers) for f in leaf.flows()] == [(SOURCE, GROUP, (4,))]
            reports.send(0, False)
            await pump(port, leaf, 0.3)
            assert leaf.flows() == []
        finally:
            reports.close()
        assert svc.counters[PROXY_REPORTS_SENT] == 2 and not svc.tally.errors
        # What the agent counts as sent is what the leaf heard, byte for byte.
        assert leaf.counters["proxy-reports"] == 2
        assert leaf.counters["rx-bytes"] == svc.counters[PROXY_REPORT_BYTES_SENT]

    try:
        asyncio.run(run())
    finally:
        port.close()
