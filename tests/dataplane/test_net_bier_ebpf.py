"""Network-BIER imposition in eBPF (bier_impose) against the Python edge (NetBierEdge + BierDataplane).

The DUT is a leaf: its link 0 is a host port, links 1.. go to BFR-NBRs.  The same IPv4 multicast
frames enter the host port twice, once with only the Python edge running and once with the tc
programs in front of it; every neighbour must get the same BIER packets (UDP payload: BIER header and
inner packet, byte for byte), the same outer headers but for the IPv4 ID and the checksums (a Linux
socket's choice and offload state), and the counters must agree.  The program's copies must also carry
correct checksums.  Packets the program leaves to the Python edge (own bit, several SIs, IP options,
TTL 1, no flow) are part of the mix.

Needs root, clang, bpftool and tc (make setup); a missing tool fails the test with the install command.
"""

from __future__ import annotations

import random
import socket
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest

from aidcnet.agent.bier.dataplane import BierDataplane
from aidcnet.agent.bier.ebpf import EbpfBier, EbpfNetBier, flow_entries, run_cmd, unpin
from aidcnet.agent.bier.net_bier import NetBierEdge
from aidcnet.bier.bift import SELF, build_bifts
from aidcnet.bier.edge import multicast_mac
from aidcnet.bier.header import BierHeader
from aidcnet.ipv4 import checksum16
from tests.dataplane.netlab import PREFIX, NetLab, in_netns

PIN = Path(f"/sys/fs/bpf/{PREFIX}nettest")
BSL = 64
OWN = 9
NAMES = ["N1", "N2", "N3"]
# BFR-ids 1..3 behind N1..N3, 4 and 5 over N2 or N3 (ECMP by entropy), 6 a hole, 9 this leaf
BIRT = {OWN: SELF, 1: ["N1"], 2: ["N2"], 3: ["N3"], 4: ["N2", "N3"], 5: ["N3", "N2"], 7: ["N1"]}
FLOWS = [
    SimpleNamespace(group="232.1.1.1", source=None, bfers=[1, 2, 3]),
    SimpleNamespace(group="232.1.1.1", source="10.77.0.5", bfers=[2]),  # (S,G) wins over (*,G)
    SimpleNamespace(group="232.2.2.2", source=None, bfers=[4, 5, 6]),  # ECMP bits and a hole
    SimpleNamespace(group="232.3.3.3", source=None, bfers=[OWN, 1]),  # own bit: Python edge
    SimpleNamespace(group="232.4.4.4", source=None, bfers=[1, 70]),  # two SIs: Python edge
    SimpleNamespace(group="232.5.5.5", source=None, bfers=[6]),  # no BIFT row: all dropped
]


def ip_udp(src: str, dst: str, sport: int, dport: int, payload: bytes, ttl: int, tos: int,
           ident: int, options: bytes = b"", zero_csum: bool = False) -> bytes:  # fmt: skip
    """An IPv4/UDP packet with correct checksums (or UDP checksum 0)."""
    ihl = 5 + len(options) // 4
    total = ihl * 4 + 8 + len(payload)
    s, d = socket.inet_aton(src), socket.inet_aton(dst)
    hdr = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, tos, total, ident, 0, ttl, 17, 0, s, d) + options
    hdr = hdr[:10] + struct.pack("!H", checksum16(hdr)) + hdr[12:]
    ulen = 8 + len(payload)
    csum = 0
    if not zero_csum:
        pseudo = s + d + struct.pack("!BBH", 0, 17, ulen)
        csum = checksum16(pseudo + struct.pack("!HHHH", sport, dport, ulen, 0) + payload) or 0xFFFF
    return hdr + struct.pack("!HHHH", sport, dport, ulen, csum) + payload


def frames(lab: NetLab) -> list[bytes]:
    rng = random.Random(13)
    groups = ["232.1.1.1", "232.2.2.2", "232.3.3.3", "232.4.4.4", "232.5.5.5", "232.9.9.9"]
    out = []
    for i in range(400):
        group = rng.choice(groups)
        src = rng.choice(["10.77.0.2", "10.77.0.5"])
        size = rng.choice((0, 1, 2, 3, 5, 64, 255, 256, 257, 1000, 1400))
        ttl = 1 if i % 50 == 7 else rng.choice((2, 16, 64))
        options = b"\x01\x01\x01\x00" if i % 40 == 3 else b""
        pkt = ip_udp(src, group, rng.randrange(1, 65536), rng.randrange(1, 65536), rng.randbytes(size), ttl,
                     rng.choice((0, 0x28)), rng.getrandbits(16), options, zero_csum=i % 9 == 4)  # fmt: skip
        out.append(multicast_mac(socket.inet_aton(group)) + lab.nbr_mac[0] + b"\x08\x00" + pkt)
    return out


class Leaf:
    def __init__(self, lab: NetLab) -> None:
        labels = {n: {(0, BSL, si): 900 + 10 * i + si for si in range(2)} for i, n in enumerate(NAMES)}
        bifts = build_bifts(BIRT, BSL, labels, ecmp_seed=5)
        nbrs = {n: (lab.nbr_addr[i + 1], lab.dut_if[i + 1]) for i, n in enumerate(NAMES)}
        with in_netns(lab.dut):
            self.dp = BierDataplane(OWN, BSL, 0, bifts, nbrs, {(0, BSL, 0): 500})
            self.edge = NetBierEdge(self.dp, [lab.dut_if[0]], FLOWS, [])
        self.lab = lab
        self.fast: EbpfBier | None = None
        self.net: EbpfNetBier | None = None

    def start_ebpf(self, obj: Path) -> None:
        run = run_cmd(self.lab.run_prefix())
        self.fast = EbpfBier(self.dp, obj, self.lab.dut_addr, pin_dir=PIN, run=run)
        self.net = EbpfNetBier(self.fast, self.edge, [self.lab.dut_if[0]], FLOWS)
        with in_netns(self.lab.dut):
            self.fast.start()
            self.net.start()

    def poll(self) -> int:
        return self.edge.drain() + self.dp.poll_once()

    def counters(self) -> dict[str, int]:
        if self.net is None:
            return {**self.dp.counters(), **{f"edge.{k}": v for k, v in self.edge.counters().items()}}
        assert self.fast is not None
        return {**self.fast.counters(), **{f"edge.{k}": v for k, v in self.net.counters().items()}}

    def close(self) -> None:
        if self.net is not None:
            self.net.stop()
        if self.fast is not None:
            self.fast.stop()
        self.edge.close()
        self.dp.close()
        unpin(PIN)


def run_leaf(lab: NetLab, obj: Path | None, send) -> tuple[list[list[bytes]], dict[str, int]]:
    leaf = Leaf(lab)
    try:
        if obj is not None:
            leaf.start_ebpf(obj)
        send()
        got = lab.capture(settle=0.05, poll=leaf.poll)
        return got, leaf.counters()
    finally:
        leaf.close()


PYTHON_GROUPS = ("232.3.3.3", "232.4.4.4", "232.9.9.9")
"""Groups whose flows the program leaves to the Python edge (own bit, two SIs, no flow)."""


def left_to_python(inner: bytes) -> bool:
    """Whether the program passes this (inner) IPv4 packet to the Python edge."""
    return inner[0] & 0xF != 5 or inner[8] <= 1 or socket.inet_ntoa(inner[16:20]) in PYTHON_GROUPS


def verify_checksums(frame: bytes) -> None:
    """The outer IPv4 header and UDP datagram of a copy check out (RFC 791, RFC 768).  A copy the
    Python edge imposed left its socket with the UDP checksum to offload (the pseudo-header sum)."""
    assert checksum16(frame[14:34]) == 0, "outer IPv4 checksum"
    ulen = int.from_bytes(frame[38:40], "big")
    pseudo = frame[26:34] + struct.pack("!BBH", 0, 17, ulen)
    blen = 12 + BSL // 8
    if left_to_python(frame[42 + blen :]):
        field = int.from_bytes(frame[40:42], "big")
        assert field == 0xFFFF - checksum16(pseudo) or checksum16(pseudo + frame[34 : 34 + ulen]) == 0
        return
    assert checksum16(pseudo + frame[34 : 34 + ulen]) == 0, f"outer UDP checksum of {frame.hex()}"


def same_ip_id(frame: bytes) -> bytes:
    """The BIER packet of a copy with its inner IPv4 ID and header checksum blanked: a host's socket
    numbers its packets anew in each run."""
    inner = 42 + 12 + BSL // 8
    return frame[42 : inner + 4] + b"\0\0" + frame[inner + 6 : inner + 10] + b"\0\0" + frame[inner + 12 :]


def compare(
    lab: NetLab,
    got: dict[str, list[list[bytes]]],
    c: dict[str, dict[str, int]],
    punted: int,
    bier=lambda f: f[42:],
    full_checksums: bool = True,
) -> None:
    py, eb = got["python"], got["ebpf"]
    for i in range(1, lab.n):
        assert len(eb[i]) == len(py[i]), f"neighbour {i}: {len(eb[i])} copies, Python {len(py[i])}"
        # with the program in front, what it leaves to Python goes out later: compare as multisets
        ebs, pys = sorted(eb[i], key=bier), sorted(py[i], key=bier)
        assert [bier(f) for f in ebs] == [bier(f) for f in pys], f"neighbour {i}: BIER packets differ"
        for a, b in zip(ebs, pys, strict=True):
            assert a[:18] + a[20:24] + a[26:40] == b[:18] + b[20:24] + b[26:40], f"neighbour {i}: headers"
            if full_checksums:
                verify_checksums(a)
    assert sum(map(len, eb)) > 0
    ebpf, python = dict(c["ebpf"]), dict(c["python"])
    assert ebpf.pop("edge.ebpf.edge-punted") == punted
    assert ebpf.pop("ebpf.punted") == 0
    diff = {k: (ebpf.get(k, 0), python.get(k, 0)) for k in sorted(set(ebpf) | set(python))
            if ebpf.get(k, 0) != python.get(k, 0)}  # fmt: skip
    assert not diff, f"counters differ (ebpf, python): {diff}"


def test_flow_entries_leave_the_python_edge_what_the_program_cannot_impose() -> None:
    entries, kept = flow_entries(FLOWS, OWN, BSL, {0: 500})
    assert [(socket.inet_ntoa(s), socket.inet_ntoa(g), label, bits) for s, g, label, bits in entries] == [
        ("0.0.0.0", "232.1.1.1", 500, 0b111),
        ("10.77.0.5", "232.1.1.1", 500, 0b10),
        ("0.0.0.0", "232.2.2.2", 500, 0b111000),
        ("0.0.0.0", "232.5.5.5", 500, 0b100000),
    ]
    assert kept == [
        "(*,232.3.3.3): this BFR is a BFER (local delivery)",
        "(*,232.4.4.4): BFERs in SIs [0, 1]",
    ]


@pytest.mark.parametrize("lab", [4], indirect=True)
def test_imposition_matches_the_python_edge(lab: NetLab, bier_obj: Path) -> None:
    """Injected frames (complete or zero UDP checksums, odd lengths, options, TTL 1, every flow kind)."""
    pkts = frames(lab)
    got, c = {}, {}
    for mode in ("python", "ebpf"):
        got[mode], c[mode] = run_leaf(lab, bier_obj if mode == "ebpf" else None, lambda: lab.send(pkts))
    punted = sum(left_to_python(f[14:]) for f in pkts)
    assert 0 < punted < len(pkts)
    compare(lab, got, c, punted)
    assert c["ebpf"]["edge.imposed"] > 100 and c["ebpf"]["imposed"] > 100


@pytest.mark.parametrize("lab", [4], indirect=True)
def test_imposition_completes_offloaded_udp_checksums(lab: NetLab, bier_obj: Path) -> None:
    """A host's UDP socket sends multicast over veth with the checksum left to offload
    (CHECKSUM_PARTIAL): both edges finish it before imposing, and count it."""
    sh_prefix = ["ip", "-n", lab.nbrs[0], "route", "replace", "224.0.0.0/4", "dev", lab.nbr_if[0]]
    run_cmd()(sh_prefix)
    rng = random.Random(3)
    payloads = [rng.randbytes(rng.choice((0, 1, 3, 100, 999))) for _ in range(60)]

    def send() -> None:
        with in_netns(lab.nbrs[0]):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((lab.nbr_addr[0], 41000))  # the same ports (and so Entropy) in both runs
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 8)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
        try:
            for i, p in enumerate(payloads):
                s.sendto(p, ("232.1.1.1" if i % 2 else "232.2.2.2", 7000 + i))
        finally:
            s.close()

    got, c = {}, {}
    for mode in ("python", "ebpf"):
        got[mode], c[mode] = run_leaf(lab, bier_obj if mode == "ebpf" else None, send)
    assert c["python"]["edge.csum-completed"] == len(payloads), "the sender did not offload: nothing tested"
    compare(lab, got, c, 0, bier=same_ip_id, full_checksums=False)
    inner = 42 + 12 + BSL // 8
    for frames in got["ebpf"][1:]:
        for f in frames:
            # the skb is still CHECKSUM_PARTIAL: the outer field holds its pseudo-header sum, as a
            # socket's packet does, so that the next BFR's incremental update keeps it right
            ulen = int.from_bytes(f[38:40], "big")
            pseudo = f[26:34] + struct.pack("!BBH", 0, 17, ulen)
            assert int.from_bytes(f[40:42], "big") == 0xFFFF - checksum16(pseudo)
            # and the completed inner UDP checksum verifies
            ulen = int.from_bytes(f[inner + 24 : inner + 26], "big")
            pseudo = f[inner + 12 : inner + 20] + struct.pack("!BBH", 0, 17, ulen)
            assert checksum16(pseudo + f[inner + 20 : inner + 20 + ulen]) == 0


@pytest.mark.parametrize("lab", [4], indirect=True)
def test_bier_from_a_host_port_reaches_the_forwarding_program(lab: NetLab, bier_obj: Path) -> None:
    """Host-BIER: the GPU host on the host port is a BFR neighbour too, so that port runs bier_impose
    (pref 48) in front of bier_rx (pref 49). BIER the host sends is not an imposition and must go on to
    bier_rx: a TC_ACT_OK from bier_impose ended the port's filter chain, and the Python dataplane behind
    the stack forwarded every such packet."""
    names = ["H", *NAMES]
    birt = {OWN: SELF, 8: ["H"], 1: ["N1"], 2: ["N2"], 3: ["N3"]}
    labels = {n: {(0, BSL, si): 900 + 10 * i + si for si in range(2)} for i, n in enumerate(names)}
    bifts = build_bifts(birt, BSL, labels, ecmp_seed=5)
    nbrs = {n: (lab.nbr_addr[i], lab.dut_if[i]) for i, n in enumerate(names)}
    with in_netns(lab.dut):
        dp = BierDataplane(OWN, BSL, 0, bifts, nbrs, {(0, BSL, 0): 500})
        edge = NetBierEdge(dp, [lab.dut_if[0]], FLOWS, [])
    fast = EbpfBier(dp, bier_obj, lab.dut_addr, pin_dir=PIN, run=run_cmd(lab.run_prefix()))
    net = EbpfNetBier(fast, edge, [lab.dut_if[0]], FLOWS)
    try:
        with in_netns(lab.dut):
            fast.start()
            net.start()
        bitstrings = (0b1, 0b10, 0b100, 0b111, 0b110)  # BFR-ids 1..3: N1..N3
        packets = [
            BierHeader(bift_id=500, bitstring=b, bsl=BSL, ttl=64, entropy=b, bfir_id=8).encode() + b"pl%d" % b
            for b in bitstrings
        ]
        lab.send([lab.frame_in(p) for p in packets])
        got = lab.capture(settle=0.05, poll=lambda: edge.drain() + dp.poll_once())
        assert [len(frames) for frames in got[1:]] == [2, 3, 3]
        assert dp.counters().get("rx.packets", 0) == 0, "the Python dataplane forwarded host-BIER"
        assert fast.counters()["forwarded"] == len(packets)
    finally:
        net.stop()
        fast.stop()
        edge.close()
        dp.close()
        unpin(PIN)


@pytest.mark.parametrize("lab", [4], indirect=True)
def test_reliable_data_imposed_in_the_kernel_is_reported_and_retransmissions_go_to_the_python_edge(
    lab: NetLab, bier_obj: Path
) -> None:
    """reliable-net-bier on the default dataplane: the leaf's program imposes a source's first
    transmissions (and reports each, so its aggregation keeps a window over the BFERs it imposed for); a
    retransmission (flag R) goes to the Python edge, which narrows it to the BFERs that have not confirmed
    it (its on_impose hook, here only watched)."""
    from aidcnet.agent.reliable.node import NET_SPORT
    from aidcnet.reliable.header import RELIABLE_UDP_PORT, Data

    host = "10.77.0.2"

    def frame(seq: int, retransmit: bool) -> bytes:
        data = Data(bfir_id=40, flow_id=3, seq=seq, payload=b"r" * 100, retransmit=retransmit).encode()
        pkt = ip_udp(host, "232.1.1.1", NET_SPORT, RELIABLE_UDP_PORT, data, 8, 0, seq)
        return multicast_mac(socket.inet_aton("232.1.1.1")) + lab.nbr_mac[0] + b"\x08\x00" + pkt

    leaf = Leaf(lab)
    hooked: list[tuple[int, ...]] = []
    leaf.edge.set_hooks(
        lambda _pkt, bfers, _src: hooked.append(bfers) or bfers, lambda *_a: None, RELIABLE_UDP_PORT
    )
    try:
        leaf.start_ebpf(bier_obj)
        assert leaf.fast is not None
        reports = []
        leaf.fast.report(RELIABLE_UDP_PORT, reports.append)
        lab.send([frame(s, retransmit=s == 2) for s in range(3)])
        got = lab.capture(settle=0.05, poll=leaf.poll)
        assert sum(map(len, got[1:])) == 3 * 3  # every one imposed for BFERs 1..3, one of them by Python
        leaf.fast.poll_reports()
        assert [(r.src, r.downstream, r.imposed) for r in reports] == [(host, 0b111, True)] * 2
        assert [r.head[28:29] for r in reports] == [b"\x11"] * 2  # Ver 1, DATA
        assert hooked == [(1, 2, 3)], "the retransmission reached the Python edge's hook"
        c = leaf.counters()
        assert c["edge.ebpf.edge-punted"] == 1 and c["ebpf.reported"] == 2
    finally:
        leaf.close()
