"""The IGMP service on two leaves (test_net_bier's namespaces, their leaf ports now with addresses):
kernel receivers join, the BFER leaf reports over BIER, the BFIR leaf's net-BIER flows follow; a
Receiver Proxy Report from an allowed port changes the very next packet's BitString, one from another
port is dropped and counted.  Needs root."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from aidcnet.agent.bier.dataplane import BierDataplane
from aidcnet.agent.bier.net_bier import NetBierEdge
from aidcnet.agent.igmp.service import IgmpService
from aidcnet.bier.bift import build_bifts
from aidcnet.bier.routing import compute_birts
from aidcnet.config import Bier, Igmp, IgmpPort
from aidcnet.igmp.codec import GroupRecord, RecordType, Report, encode
from aidcnet.igmp.extensions import ProxyReport
from aidcnet.igmp.node import ALL_V3_ROUTERS
from tests.unit.aidcnet.agent.bier.test_net_bier import (
    BSL,
    CORE,
    G1,
    G2,
    HOSTS,
    IP_RECVTTL,
    PORT,
    Lab,
    ip,
    netns,
)
from tests.unit.node_files import bier_knobs, igmp_knobs

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")

PORT_ADDR = {("l1", "hp1"): "10.99.1.1", ("l1", "hp2"): "10.99.3.1",
             ("l2", "hp1"): "10.99.2.1", ("l2", "hp2"): "10.99.4.1"}  # fmt: skip
IDS = {"l1": 1, "l2": 2}
RECEIVERS = {ipaddress.IPv4Address(HOSTS["hB"]): 2, ipaddress.IPv4Address(HOSTS["hC"]): 1,
             ipaddress.IPv4Address(HOSTS["hD"]): 2}  # fmt: skip
TIMERS = dict(query_interval=4.0, query_response_interval=1.0, last_member_query_interval=0.2)


class IgmpLab(Lab):
    def __init__(self, control_cost: float = 0.0, prefix: str = "igA") -> None:
        super().__init__()
        self.ns = {n: f"{prefix}{os.getpid() % 10000}{n}" for n in self.ns}
        self.igmp: dict[str, IgmpService] = {}
        self.control_cost = control_cost

    def _leaves(self) -> None:
        for (leaf, port), addr in PORT_ADDR.items():
            ip("-n", self.ns[leaf], "addr", "add", f"{addr}/24", "dev", port)
        adj = {"l1": ["l2"], "l2": ["l1"]}
        birts = compute_birts(adj, IDS)
        labels = {"l1": {(0, BSL, 0): 1000}, "l2": {(0, BSL, 0): 1100}}
        for leaf, other in (("l1", "l2"), ("l2", "l1")):
            with netns(self.ns[leaf]):
                bifts = build_bifts(birts[leaf], BSL, {other: labels[other]})
                dp = BierDataplane(IDS[leaf], BSL, 0, bifts, {other: (CORE[other], "core")}, labels[leaf],
                                   bind_addr=CORE[leaf])  # fmt: skip
                self.dps[leaf] = dp
                dp.deliver = lambda p, b, pr, h, leaf=leaf: self.chained[leaf].append((p, b, pr))
                edge = self.edges[leaf] = NetBierEdge(dp, ["hp1", "hp2"], [], [])
                bier = Bier(bfr_id=IDS[leaf], **bier_knobs(bsl=BSL), host_ports=["hp1", "hp2"])
                shell = SimpleNamespace(edge=edge, dataplane=dp, net_ebpf=None, bier=bier)
                config = SimpleNamespace(
                    loopback=ipaddress.IPv4Interface(f"10.255.255.{IDS[leaf]}/32"),
                    interfaces=[
                        SimpleNamespace(name=p, ipv4=ipaddress.IPv4Interface(f"{a}/24"))
                        for (lf, p), a in PORT_ADDR.items()
                        if lf == leaf
                    ],
                )
                igmp = Igmp(
                    **igmp_knobs(control_cost=self.control_cost, **TIMERS),
                    ports=[IgmpPort(name="hp1", proxy=True), IgmpPort(name="hp2")],
                    bfirs=[1, 2],
                    receivers=RECEIVERS,
                )
                self.igmp[leaf] = IgmpService(igmp, shell, config)  # type: ignore[arg-type]
            dp.attach(self.loop)
            edge.attach(self.loop)
            self.igmp[leaf].attach(self.loop)

    def close(self) -> None:
        for svc in self.igmp.values():
            svc.close()
        self.loop.run_until_complete(asyncio.sleep(0.05))  # let the cancelled timer tasks finish
        super().close()

    def flows(self, leaf: str) -> list[tuple[str | None, str, tuple[int, ...]]]:
        return [
            (str(f.source) if f.source else None, str(f.group), f.bfers) for f in self.igmp[leaf].leaf.flows()
        ]

    def proxy_report(self, group: str, receivers: list[str], src: str = HOSTS["hA"]) -> None:
        """hA sends its first-hop router a Receiver Proxy Report for (src, group), then at once..."""
        report = ProxyReport(
            ipaddress.IPv4Address(group),
            ipaddress.IPv4Address(src),
            tuple(map(ipaddress.IPv4Address, receivers)),
        ).to_report()
        with netns(self.ns["hA"]):
            s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_IGMP)
        with s:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(src))
            s.sendto(encode(report), (str(ALL_V3_ROUTERS), 0))


@pytest.fixture(scope="module")
def lab() -> Iterator[IgmpLab]:
    lab = IgmpLab()
    try:
        lab.build()  # _hosts() joins: hB G1 and G2, hC G1, hD G1 (test_net_bier.RECEIVERS)
        yield lab
    finally:
        lab.close()


def test_kernel_joins_reach_the_bfir(lab: IgmpLab) -> None:
    # Joins happened when the sockets opened; the kernels repeat their reports, the querier asks too.
    lab.pump(
        lambda: (None, G1, (1, 2)) in lab.flows("l1") and (None, G2, (2,)) in lab.flows("l1"), timeout=6.0
    )
    assert lab.flows("l2") == lab.flows("l1")  # every leaf is a BFIR: both hear both BFERs
    status = lab.igmp["l2"].status()
    assert set(status["ports"]["hp1"]["groups"]) == {G1, G2}
    assert status["member_ports"] == {G1: ["hp1", "hp2"], G2: ["hp1"]}
    assert status["counters"]["bier-reports-out"] >= 1 and status["counters"].get("dropped", 0) == 0
    # Queries are counted to the byte: IPv4 with Router Alert (24) and at least the 12-octet v3 query.
    sent, octets = status["counters"]["shell.queries-sent"], status["counters"]["shell.query-bytes-sent"]
    assert sent >= 1 and octets >= 36 * sent
    lab.reset()
    lab.send(b"igmp-g1")
    lab.pump(lambda: all(lab.got[(h, G1)] for h in ("hB", "hC", "hD")))
    lab.settle()
    assert lab.received() == {(h, G1): [(b"igmp-g1", 7)] for h in ("hB", "hC", "hD")}


def test_leave_prunes_within_lmqt(lab: IgmpLab) -> None:
    lab.pump(lambda: (None, G1, (1, 2)) in lab.flows("l1"), timeout=6.0)
    lab.rx.pop(("hC", G1)).close()  # hC's kernel sends TO_IN({}) for G1
    t0 = time.monotonic()
    lab.pump(lambda: (None, G1, (2,)) in lab.flows("l1"), timeout=3.0)
    # LMQT at the BFER port (2 x 0.2 s) then LMQT at the BFIR (another 0.4 s), plus the pump's steps
    assert time.monotonic() - t0 < 2.0
    lab.reset()
    lab.send(b"after-leave")
    lab.pump(lambda: bool(lab.got[("hB", G1)]) and bool(lab.got[("hD", G1)]))
    lab.settle()
    assert lab.got[("hC", G1)] == []


def test_proxy_report_changes_the_next_packet(lab: IgmpLab) -> None:
    with netns(lab.ns["hC"]):  # hC joins G2 too: IGMP then gives (*, G2) -> {1, 2}
        s = lab._sock(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((G2, PORT))
        s.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
        s.setsockopt(
            socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton(G2) + socket.inet_aton(HOSTS["hC"])
        )
    lab.rx[("hC", G2)] = s
    lab.got[("hC", G2)] = []
    lab.pump(lambda: (None, G2, (1, 2)) in lab.flows("l1"), timeout=6.0)
    lab.reset()
    before = lab.counters()["l1"]
    # (hA, G2) to hC only (BFER 1): overrides IGMP's (*, G2); the data follows the report at once
    lab.proxy_report(G2, [HOSTS["hC"]])
    lab.send(b"proxied", group=G2)
    lab.pump(lambda: bool(lab.got[("hC", G2)]))
    lab.settle()
    assert lab.received() == {("hC", G2): [(b"proxied", 7)]}  # hB joined G2, but the source named hC
    assert (HOSTS["hA"], G2, (1,)) in lab.flows("l1")
    assert lab.counters()["l1"]["imposed"] == before["imposed"] + 1
    # removal: the next packet follows IGMP again, to both
    lab.reset()
    lab.proxy_report(G2, [])
    lab.send(b"igmp-again", group=G2)
    lab.pump(lambda: bool(lab.got[("hB", G2)]) and bool(lab.got[("hC", G2)]))
    lab.settle()
    assert lab.received() == {("hB", G2): [(b"igmp-again", 7)], ("hC", G2): [(b"igmp-again", 7)]}


def test_proxy_report_from_a_port_not_allowed_is_dropped(lab: IgmpLab) -> None:
    svc = lab.igmp["l2"]  # hB sits on l2 hp1... which allows proxies; hD on hp2 does not
    report = ProxyReport(ipaddress.IPv4Address(G1), ipaddress.IPv4Address(HOSTS["hD"]),
                         (ipaddress.IPv4Address(HOSTS["hB"]),)).to_report()  # fmt: skip
    with netns(lab.ns["hD"]):
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_IGMP)
    with s:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(HOSTS["hD"]))
        s.sendto(encode(report), (str(ALL_V3_ROUTERS), 0))
    lab.pump(lambda: svc.leaf.counters["port.hp2.dropped.proxy-port-not-allowed"] == 1)
    assert all(f[0] != HOSTS["hD"] for f in lab.flows("l2"))


def _join(lab: IgmpLab, host: str, group: str) -> None:
    """``host`` joins ``group`` for the lab's port (kept in lab.rx, as the lab's own receivers)."""
    if (host, group) in lab.rx:
        return
    with netns(lab.ns[host]):
        s = lab._sock(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((group, PORT))
        s.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
        mreq = socket.inet_aton(group) + socket.inet_aton(HOSTS[host])
        s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
    lab.rx[(host, group)] = s
    lab.got[(host, group)] = []


def test_proxy_report_behind_a_burst_of_reports_still_changes_the_next_packet(lab: IgmpLab) -> None:
    """The source's port holds 200 other reports (its own joins) ahead of its proxy report and the data:
    the FHR reads every report queued before the packet (before, 64 at a time: the data went with IGMP's
    set while the proxy report waited in the socket behind the joins)."""
    _join(lab, "hC", G2)
    _join(lab, "hB", G2)
    lab.pump(lambda: (None, G2, (1, 2)) in lab.flows("l1"), timeout=6.0)
    lab.reset()
    changes = lab.igmp["l1"].leaf.counters["bier-changes"]
    with netns(lab.ns["hA"]):
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_IGMP)
    with s:  # sent while the leaves' loop stands still: all of it is queued when the data is read
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(HOSTS["hA"]))
        for k in range(200):
            group = ipaddress.IPv4Address("239.50.0.1") + k
            s.sendto(
                encode(Report((GroupRecord(RecordType.CHANGE_TO_EXCLUDE_MODE, group),))),
                (str(ALL_V3_ROUTERS), 0),
            )
    lab.proxy_report(G2, [HOSTS["hB"]])  # (hA, G2) to hB alone, overriding IGMP's {1, 2}
    lab.send(b"behind-the-burst", group=G2)
    lab.pump(lambda: bool(lab.got[("hB", G2)]))
    lab.settle()
    assert lab.received() == {("hB", G2): [(b"behind-the-burst", 7)]}
    assert lab.igmp["l1"].leaf.counters["port.hp1.reports"] >= 200
    # The burst was taken a socketful at a time and derived once each: a few change reports to the
    # BFIRs, not one per join (each of which every BFIR would have had to apply).
    assert lab.igmp["l1"].leaf.counters["bier-changes"] - changes <= 4
    lab.proxy_report(G2, [])
    lab.pump(lambda: (HOSTS["hA"], G2, (2,)) not in lab.flows("l1"))


# -- the modelled control plane (no time scale here: the cost is wall seconds) -------------------------------
COST = 0.25


@pytest.fixture(scope="module")
def modelled() -> Iterator[IgmpLab]:
    lab = IgmpLab(control_cost=COST, prefix="igM")
    try:
        lab.build()
        yield lab
    finally:
        lab.close()


def _quiet(lab: IgmpLab) -> None:
    """Wait until both leaves have served everything they were sent (joins, query answers)."""
    lab.pump(lambda: (None, G1, (1, 2)) in lab.flows("l1"), timeout=8.0)
    lab.pump(lambda: all(not len(svc.control or ()) for svc in lab.igmp.values()), timeout=8.0)


def _seen_at(lab: IgmpLab, leaf: str, flow: tuple[str | None, str, tuple[int, ...]], timeout: float) -> float:
    lab.pump(lambda: flow in lab.flows(leaf), timeout=timeout)
    return time.monotonic()


def test_modelled_proxy_report_counts_from_arrival_and_takes_one_cost(modelled: IgmpLab) -> None:
    lab = modelled
    _quiet(lab)
    served = lab.igmp["l1"].control.counters["served"]  # type: ignore[union-attr]
    lab.reset()
    t0 = time.monotonic()
    t0_ns = time.time_ns()
    lab.proxy_report(G1, [HOSTS["hC"]])  # (hA, G1) -> hC only, overriding IGMP's {1, 2}
    lab.send(b"too-soon")  # right behind the report: the FHR's control plane is still on it
    lab.pump(lambda: all(lab.got[(h, G1)] for h in ("hB", "hC", "hD")))
    took = _seen_at(lab, "l1", (HOSTS["hA"], G1, (1,)), timeout=COST + 2.0) - t0
    assert COST <= took < COST + 1.0, took
    lab.settle()
    lab.reset()
    lab.send(b"after-cost")
    lab.pump(lambda: bool(lab.got[("hC", G1)]))
    lab.settle()
    assert lab.received() == {("hC", G1): [(b"after-cost", 7)]}
    # The history (what a run's membership latency is read from) has the channel at its modelled
    # moment: the report's kernel stamp plus one cost, not when our Python got to it.
    history = lab.igmp["l1"].history(t0_ns)
    (changes,) = [h for source, group, h in history["flows"] if (source, group) == (HOSTS["hA"], G1)]
    moment, bfers = changes[-1]
    assert bfers == [1] and t0_ns + COST * 1e9 <= moment < t0_ns + (COST + 0.5) * 1e9
    counters = lab.igmp["l1"].all_counters()
    assert counters["control.served"] > served and counters.get("control.late", 0) == 0
    assert counters["control.cost-ns"] == round(COST * 1e9)
    lab.proxy_report(G1, [])
    lab.pump(lambda: (HOSTS["hA"], G1, (1,)) not in lab.flows("l1"), timeout=COST + 2.0)


def test_modelled_join_pays_the_bfer_and_the_bfir(modelled: IgmpLab) -> None:
    """A kernel join is served at its leaf (one cost), whose report over BIER is served at the BFIR
    (another): the BitString there changes no sooner than two costs after the join."""
    lab = modelled
    _quiet(lab)
    before = lab.igmp["l2"].all_counters()
    t0 = time.monotonic()
    with netns(lab.ns["hC"]):  # hC (behind l1) joins G2: BFER 1 joins (*, G2) at the BFIR l2
        s = lab._sock(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((G2, PORT))
        s.setsockopt(
            socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton(G2) + socket.inet_aton(HOSTS["hC"])
        )
    took = _seen_at(lab, "l2", (None, G2, (1, 2)), timeout=2 * COST + 3.0) - t0
    assert took >= 2 * COST, took
    after = lab.igmp["l2"].all_counters()
    assert after["control.served"] > before["control.served"]
    assert after.get("control.late", 0) == 0
    # The report over BIER was served from the kernel's stamp of its arrival, not from our reading.
    assert after.get("shell.control-unstamped", 0) == 0
    assert lab.igmp["l2"].status()["control_plane"]["cost_ns"] == round(COST * 1e9)
    s.close()
