"""NetBierEdge with real sockets: six network namespaces joined by veth pairs (needs root).

::

    hA (sender 10.99.1.2, .3) --eth1==hp1-- l1 (BFR-id 1) --core==core-- l2 (BFR-id 2) --hp1==eth1-- hB
    hC (member port)          --eth1==hp2--/   10.255.0.0/31   10.255.0.1/31      \\--hp2==eth1-- hD

l1 flows: (10.99.1.2, 239.1.1.1) -> {1, 2}; (*, 239.1.1.1) -> {2}.  Members: l1 hp1 and hp2
(hp1 is the sender's own port), l2 hp1 for 239.1.1.1 and 239.2.2.2.  hD's socket joins
239.1.1.1 but its leaf port has no membership, so it must get nothing.  Both leaves run in
this process: their sockets are opened inside their namespace (setns), and a socket stays in
the namespace it was created in.  Hosts are the namespaces' own kernels with ordinary UDP
sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from aidcnet.agent.bier.dataplane import BierDataplane
from aidcnet.agent.bier.net_bier import NetBierEdge
from aidcnet.bier.bift import build_bifts
from aidcnet.bier.header import BierProto
from aidcnet.bier.routing import compute_birts
from aidcnet.config import BierFlow, BierMembership

BSL = 64
G1, G2 = "239.1.1.1", "239.2.2.2"
PORT = 5000
HOSTS = {"hA": "10.99.1.2", "hB": "10.99.2.2", "hC": "10.99.3.2", "hD": "10.99.4.2"}
SENDER_OTHER = "10.99.1.3"  # a second address on hA: a source without an (S,G) entry
CORE = {"l1": "10.255.0.0", "l2": "10.255.0.1"}
LINKS = [("l1", "hp1", "hA", "eth1"), ("l1", "hp2", "hC", "eth1"), ("l2", "hp1", "hB", "eth1"),
         ("l2", "hp2", "hD", "eth1"), ("l1", "core", "l2", "core")]  # fmt: skip
FLOWS = {
    "l1": [BierFlow(group=G1, source=HOSTS["hA"], bfers=[1, 2]), BierFlow(group=G1, bfers=[2])],
    "l2": [],
}
MEMBERS = {
    "l1": [BierMembership(group=G1, interfaces=["hp1", "hp2"])],
    "l2": [BierMembership(group=G1, interfaces=["hp1"]), BierMembership(group=G2, interfaces=["hp1"])],
}
RECEIVERS = [("hB", G1), ("hB", G2), ("hC", G1), ("hD", G1)]
IP_RECVTTL = 12  # linux/in.h; not exported by Python's socket module
CLONE_NEWNET = 0x40000000
TIMEOUT = 5.0
SETTLE = 0.3  # after the positive event, how long a copy that should not exist gets to show up

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def netns(name: str) -> Iterator[None]:
    """Run the block in network namespace ``name`` (sockets created here stay in it)."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


def ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=15)
    if r.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")


class Lab:
    def __init__(self) -> None:
        prefix = f"nbt{os.getpid()}"
        self.ns = {n: f"{prefix}{n}" for n in ("l1", "l2", "hA", "hB", "hC", "hD")}
        self.created: list[str] = []
        self.socks: list[socket.socket] = []
        self.dps: dict[str, BierDataplane] = {}
        self.edges: dict[str, NetBierEdge] = {}
        self.chained: dict[str, list[tuple[bytes, int, int]]] = {"l1": [], "l2": []}
        self.rx: dict[tuple[str, str], socket.socket] = {}
        self.got: dict[tuple[str, str], list[tuple[bytes, int | None]]] = {k: [] for k in RECEIVERS}
        self.sniffed_back = 0  # frames for G1 arriving at the sender's own interface
        self.loop = asyncio.new_event_loop()

    # -- setup / teardown -------------------------------------------------------------------------
    def build(self) -> None:
        for name in self.ns.values():
            if os.path.exists(f"/run/netns/{name}"):  # left by a crashed run under a reused pid
                ip("netns", "del", name)
            ip("netns", "add", name)
            self.created.append(name)
            ip("-n", name, "link", "set", "lo", "up")
        for a, ifa, b, ifb in LINKS:
            ip("-n", self.ns[a], "link", "add", ifa, "type", "veth", "peer", "name", ifb, "netns", self.ns[b])
            ip("-n", self.ns[a], "link", "set", ifa, "up")
            ip("-n", self.ns[b], "link", "set", ifb, "up")
        for leaf, addr in CORE.items():
            ip("-n", self.ns[leaf], "addr", "add", f"{addr}/31", "dev", "core")
        for host, addr in HOSTS.items():
            ns = self.ns[host]
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth1")
            # A route back to every source, so reverse-path filtering passes whatever its setting.
            ip("-n", ns, "route", "add", "10.99.0.0/16", "dev", "eth1")
            ip("-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth1")
        ip("-n", self.ns["hA"], "addr", "add", f"{SENDER_OTHER}/24", "dev", "eth1")
        self._leaves()
        self._hosts()

    def _leaves(self) -> None:
        adj = {"l1": ["l2"], "l2": ["l1"]}
        ids = {"l1": 1, "l2": 2}
        birts = compute_birts(adj, ids)
        labels = {"l1": {(0, BSL, 0): 1000}, "l2": {(0, BSL, 0): 1100}}
        for leaf, other in (("l1", "l2"), ("l2", "l1")):
            with netns(self.ns[leaf]):
                bifts = build_bifts(birts[leaf], BSL, {other: labels[other]})
                nbrs = {other: (CORE[other], "core")}
                dp = BierDataplane(ids[leaf], BSL, 0, bifts, nbrs, labels[leaf], bind_addr=CORE[leaf])
                self.dps[leaf] = dp
                dp.deliver = lambda p, b, pr, h, leaf=leaf: self.chained[leaf].append((p, b, pr))
                self.edges[leaf] = NetBierEdge(dp, ["hp1", "hp2"], FLOWS[leaf], MEMBERS[leaf])
            dp.attach(self.loop)
            self.edges[leaf].attach(self.loop)

    def _hosts(self) -> None:
        for host, group in RECEIVERS:
            with netns(self.ns[host]):
                s = self._sock(socket.AF_INET, socket.SOCK_DGRAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((group, PORT))  # bound to the group: this socket sees that group only
                mreq = socket.inet_aton(group) + socket.inet_aton(HOSTS[host])
                s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
                s.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
                self.rx[(host, group)] = s
        with netns(self.ns["hA"]):
            self.sniffer = self._sock(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
            self.sniffer.bind(("eth1", 0x0800))

    def _sock(self, *args: int) -> socket.socket:
        s = socket.socket(*args)
        s.setblocking(False)
        self.socks.append(s)
        return s

    def close(self) -> None:
        errors: list[str] = []
        for edge in self.edges.values():
            edge.close()
        for dp in self.dps.values():
            with contextlib.suppress(Exception):  # never attached if the build failed half-way
                dp.detach(self.loop)
            dp.close()
        for s in self.socks:
            s.close()
        self.loop.close()
        for name in self.created:
            try:
                ip("netns", "del", name)
            except RuntimeError as exc:
                errors.append(str(exc))
        leftover = [n for n in self.created if os.path.exists(f"/run/netns/{n}")]
        assert not errors and not leftover, (errors, leftover)

    # -- traffic ----------------------------------------------------------------------------------
    def send(
        self, payload: bytes, group: str = G1, ttl: int = 8, src: str = HOSTS["hA"], port: int = PORT
    ) -> None:
        with netns(self.ns["hA"]):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with s:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, ttl)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
            s.bind((src, 0))
            s.sendto(payload, (group, port))

    def collect(self) -> None:
        for key, s in self.rx.items():
            while True:
                try:
                    data, anc, _flags, _addr = s.recvmsg(65535, socket.CMSG_SPACE(4))
                except BlockingIOError:
                    break
                ttl = None
                for level, kind, value in anc:
                    if level == socket.IPPROTO_IP and kind == socket.IP_TTL:
                        ttl = struct.unpack("i", value[:4])[0]
                self.got[key].append((data, ttl))
        while True:
            try:
                frame, addr = self.sniffer.recvfrom(65535)
            except BlockingIOError:
                break
            if addr[2] != socket.PACKET_OUTGOING and frame[16:20] == socket.inet_aton(G1):
                self.sniffed_back += 1

    def pump(self, until: Callable[[], bool], timeout: float = TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.loop.run_until_complete(asyncio.sleep(0.01))
            self.collect()
            if until():
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s; received {self.received()}")

    def settle(self) -> None:
        end = time.monotonic() + SETTLE
        while time.monotonic() < end:
            self.loop.run_until_complete(asyncio.sleep(0.01))
            self.collect()

    def received(self) -> dict[tuple[str, str], list[tuple[bytes, int | None]]]:
        return {k: v for k, v in self.got.items() if v}

    def reset(self) -> None:
        self.settle()
        for v in self.got.values():
            v.clear()
        self.sniffed_back = 0

    def counters(self) -> dict[str, dict[str, int]]:
        return {leaf: e.counters() for leaf, e in self.edges.items()}


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    lab = Lab()
    try:
        lab.build()
        yield lab
    finally:
        lab.close()


@pytest.fixture
def fresh(lab: Lab) -> Iterator[Lab]:
    lab.reset()
    yield lab
    check_accounting(lab)


def delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {leaf: {k: v - before[leaf].get(k, 0) for k, v in c.items() if v != before[leaf].get(k, 0)}
            for leaf, c in after.items()}  # fmt: skip


def check_accounting(lab: Lab) -> None:
    for leaf, c in lab.counters().items():
        ingress = ("unmatched", "imposed", "impose-errors", "ttl-expired-in", "malformed-in")
        for scope in ("", "port.hp1.", "port.hp2."):
            assert c[scope + "captured"] == sum(c[scope + k] for k in ingress), (leaf, scope, c)
        egress = ("sent", "no-members", "ingress-only", "ttl-expired-out", "malformed-out", "not-multicast")
        assert c["delivered"] == sum(c[k] for k in egress), (leaf, c)
        assert c["emitted"] == c["port.hp1.emitted"] + c["port.hp2.emitted"]
        # The kernel filter keeps IGMP reports, link-local groups and our own frames out.
        assert c["ignored"] == 0 and c["rx-errors"] == 0 and c["emit-errors"] == 0, (leaf, c)


# -- the tests --------------------------------------------------------------------------------------
def test_sg_flow_reaches_remote_and_local_members_exactly_once(fresh: Lab) -> None:
    lab = fresh
    before = lab.counters()
    payloads = [b"sg-%03d-" % i + bytes(range(i % 200)) for i in range(20)]
    for p in payloads:
        lab.send(p)  # a new socket each time: 20 source ports, 20 entropies
    want = sorted((p, 7) for p in payloads)  # sent with TTL 8, one IP hop across the BIER domain
    lab.pump(lambda: len(lab.got[("hB", G1)]) >= 20 and len(lab.got[("hC", G1)]) >= 20)
    lab.settle()
    assert sorted(lab.got[("hB", G1)]) == want
    assert sorted(lab.got[("hC", G1)]) == want  # same leaf, other port: the BFIR's own bit
    assert lab.got[("hD", G1)] == []  # joined, but its port is no member at l2
    assert lab.got[("hB", G2)] == []
    assert lab.sniffed_back == 0  # the sender's own port never gets its packet back
    d = delta(before, lab.counters())
    assert d["l1"]["port.hp1.captured"] == 20 and d["l1"]["port.hp1.imposed"] == 20
    assert d["l1"]["port.hp2.emitted"] == 20 and "port.hp1.emitted" not in d["l1"]
    assert d["l2"]["port.hp1.emitted"] == 20 and "port.hp2.emitted" not in d["l2"]
    assert d["l2"]["delivered"] == d["l2"]["sent"] == 20


def test_any_source_fallback_skips_the_local_member(fresh: Lab) -> None:
    lab = fresh
    lab.send(b"star-g", src=SENDER_OTHER)  # no (S,G) for this source: (*,G) -> BFER 2 only
    lab.pump(lambda: bool(lab.got[("hB", G1)]))
    lab.settle()
    assert lab.received() == {("hB", G1): [(b"star-g", 7)]}
    assert lab.sniffed_back == 0


def test_ttl_one_is_dropped_at_the_bfir(fresh: Lab) -> None:
    lab = fresh
    before = lab.counters()["l1"]["port.hp1.ttl-expired-in"]
    lab.send(b"ttl-1", ttl=1)  # the default multicast TTL of a host
    lab.pump(lambda: lab.counters()["l1"]["port.hp1.ttl-expired-in"] > before)
    lab.settle()
    assert lab.received() == {}
    assert lab.counters()["l1"]["port.hp1.ttl-expired-in"] == before + 1


def test_group_without_flow_is_counted_unmatched(fresh: Lab) -> None:
    lab = fresh
    before = lab.counters()
    lab.send(b"no-flow", group=G2)  # l2 has members for G2, but l1 no flow
    lab.pump(lambda: lab.counters()["l1"]["unmatched"] > before["l1"]["unmatched"])
    lab.settle()
    assert lab.received() == {}
    d = delta(before, lab.counters())
    ingress = {"captured": 1, "captured-bytes": 35, "unmatched": 1}  # 20 + 8 + 7 octets
    assert d["l1"] == {**ingress, **{f"port.hp1.{k}": v for k, v in ingress.items()}}


def test_link_local_groups_are_not_captured(fresh: Lab) -> None:
    lab = fresh
    before = lab.counters()
    lab.send(b"mdns", group="224.0.0.251", port=5353)
    lab.send(b"after")  # same socket path and order: once this arrived, the first had its chance
    lab.pump(lambda: bool(lab.got[("hB", G1)]))
    lab.settle()
    d = delta(before, lab.counters())
    assert d["l1"]["captured"] == 1 and "ignored" not in d["l1"]
    assert lab.got[("hB", G1)] == [(b"after", 7)]


def test_bfer_drops_ttl_expired_and_malformed_payloads(fresh: Lab) -> None:
    """What another BFIR might let through: IPv4 with TTL 1, and bytes that are no IPv4 packet."""
    lab = fresh
    good = bytearray(_udp_packet(b"bfer-ttl", ttl=1))
    before = lab.counters()["l2"]
    lab.dps["l1"].impose(bytes(good), [2], proto=BierProto.IPV4)
    lab.dps["l1"].impose(b"\x45junk", [2], proto=BierProto.IPV4)
    lab.pump(lambda: lab.counters()["l2"]["delivered"] >= before["delivered"] + 2)
    lab.settle()
    after = lab.counters()["l2"]
    assert after["ttl-expired-out"] == before["ttl-expired-out"] + 1
    assert after["malformed-out.truncated"] == before["malformed-out.truncated"] + 1
    assert after["ttl-expired"] == after["ttl-expired-in"] + after["ttl-expired-out"]
    assert lab.received() == {}


def test_bfer_reemits_an_imposed_ipv4_packet_with_ttl_decremented(fresh: Lab) -> None:
    lab = fresh
    lab.dps["l1"].impose(_udp_packet(b"direct", ttl=3), [2], proto=BierProto.IPV4)
    lab.pump(lambda: bool(lab.got[("hB", G1)]))
    lab.settle()
    assert lab.received() == {("hB", G1): [(b"direct", 2)]}  # the host kernel verified the checksum


def test_other_payloads_go_to_the_previous_callback(fresh: Lab) -> None:
    """Not Proto 4, or IPv4 to a unicast address (what host-BIER carries): not network-BIER's."""
    lab = fresh
    before = lab.counters()["l2"]
    unicast = _udp_packet(b"host-bier", ttl=64, group=HOSTS["hB"])
    lab.dps["l1"].impose(b"an ipv6 packet", [2], proto=BierProto.IPV6)
    lab.dps["l1"].impose(unicast, [2], proto=BierProto.IPV4)
    lab.pump(lambda: len(lab.chained["l2"]) >= 2)
    lab.settle()
    assert lab.chained["l2"] == [(b"an ipv6 packet", 1, BierProto.IPV6), (unicast, 1, BierProto.IPV4)]
    d = delta({"l2": before}, {"l2": lab.counters()["l2"]})["l2"]
    assert d == {"passed": 2}
    assert lab.received() == {}
    lab.chained["l2"].clear()


def test_bad_configuration_is_rejected_and_close_restores_the_callback(lab: Lab) -> None:
    with netns(lab.ns["l1"]):
        bifts = build_bifts(compute_birts({"x": []}, {"x": 1})["x"], BSL)  # a lone BFR-id 1
        dp = BierDataplane(1, BSL, 0, bifts, {}, {(0, BSL, 0): 2000}, bind_addr="127.0.0.1", port=0)
        try:
            with pytest.raises(OSError, match="'nosuch0'"):
                NetBierEdge(dp, ["hp2", "nosuch0"], [], [])
            with pytest.raises(ValueError, match="'hp1' is not in host_ports"):
                NetBierEdge(dp, ["hp2"], [], [BierMembership(group=G1, interfaces=["hp1"])])
            with pytest.raises(ValueError, match="listed twice"):
                NetBierEdge(dp, ["hp2", "hp2"], [], [])
            with pytest.raises(ValueError, match="not routable multicast"):
                NetBierEdge(dp, ["hp2"], [], [BierMembership(group="224.0.0.9", interfaces=["hp2"])])

            def previous(p: bytes, b: int, pr: int, h: bytes) -> None:
                return None

            dp.deliver = previous
            edge = NetBierEdge(dp, ["hp2"], [], [])
            assert dp.deliver == edge.deliver
            edge.close()
            assert dp.deliver is previous
        finally:
            dp.close()


def _udp_packet(payload: bytes, ttl: int, src: str = HOSTS["hA"], group: str = G1) -> bytes:
    udp = struct.pack(">HHHH", 40000, PORT, 8 + len(payload), 0) + payload  # UDP checksum 0: none
    hdr = bytearray(struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, ttl, 17, 0,
                                socket.inet_aton(src), socket.inet_aton(group)))  # fmt: skip
    words = sum(struct.unpack(">10H", hdr))
    while words >> 16:
        words = (words & 0xFFFF) + (words >> 16)
    hdr[10:12] = struct.pack(">H", ~words & 0xFFFF)
    return bytes(hdr) + udp
