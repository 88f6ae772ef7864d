"""RFC 8296 §6 edge policy on both dataplanes: eBPF (bier.c policy_drop, maps written by
BierMaps.write_policy) and Python (BierDataplane.set_edge_policy) against the pure decision
(aidcnet.bier.edge_policy.check) on the same frames, counters under the same names.

The DUT is BFR-B of RFC 8279 Figure 1 (neighbours A, C, E on links 0, 1, 2).  Link 0 is a host port:
10.77.0.2 is a BFIR host (BFR-id 9, may reach BFR-ids 1 and 3), 10.77.0.4 a BFIR host that may reach
the whole domain (BFR-id 10), 10.77.0.3 a host that is no BFIR.  Links 1 and 2 are fabric ports open to
C and E only.  Frames come from each of them, from a stranger on link 0 and from a non-BFR on link 1,
with every header variant the policy judges.

Needs root, clang, bpftool and tc (make setup), like test_bier_ebpf.py; run with
AIDCLAB_NETNS_PREFIX=<yours>- on a shared machine.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import struct
from pathlib import Path

import pytest

from aidcnet.bier.bift import bifts_by_label, build_bifts
from aidcnet.bier.edge_policy import FABRIC, HOST, HostBfir, PortPolicy, check
from aidcnet.bier.forwarding import forward_packet
from aidcnet.bier.header import BierHeader, parse_fields
from aidcnet.bier.routing import compute_birts, undirected
from aidcnet.ipv4 import checksum16
from tests.dataplane.netlab import ETH_P_IP, NetLab, in_netns, udp_frame
from tests.dataplane.test_bier_ebpf import CHUNK, Dut, _unpin, check_frames, check_payloads, expected
from tests.unit.aidcnet.bier.test_bier_forwarding import FIG1_EDGES, FIG1_IDS

__all__ = ["_unpin"]  # the autouse fixture that unpins the maps after each test

BSL = 64
NAMES = ["A", "C", "E"]
BFIR, WHOLE, RECEIVER, STRANGER = "10.77.0.2", "10.77.0.4", "10.77.0.3", "10.77.0.99"
FABRIC_STRANGER = "10.77.1.77"
# BSL 256 with BFR-ids in every 64-bit word: the program compares the BitString word by word
WIDE_IDS = {"A": 250, "D": 1, "E": 130, "F": 70}


def policy(lab: NetLab, bsl: int = BSL, ids=FIG1_IDS) -> dict[str, PortPolicy]:
    """A policy per DUT interface, as BierService hands them to the dataplane; BFIR may address D and
    E only."""
    host = PortPolicy(
        HOST, hosts={BFIR: HostBfir.reaching(9, [ids["D"], ids["E"]], bsl), WHOLE: HostBfir(10)}
    )
    policies = {
        lab.dut_if[0]: host,
        lab.dut_if[1]: PortPolicy(FABRIC, neighbors=frozenset({lab.nbr_addr[1]})),
        lab.dut_if[2]: PortPolicy(FABRIC, neighbors=frozenset({lab.nbr_addr[2]})),
    }
    return policies


def frame(bits: int, bfir: int, bsl: int = BSL) -> bytes:
    return BierHeader(
        bift_id=500, bitstring=bits, bsl=bsl, ttl=64, entropy=bits % 0xFFFFF, bfir_id=bfir
    ).encode() + (b"pl%d.%d" % (bits, bfir))


def traffic(lab: NetLab, bsl: int = BSL, ids=FIG1_IDS) -> list[tuple[int, str, bytes]]:
    """(link, source address, UDP payload): every BitString of the 4 BFR-ids from each sender."""
    out = []
    order = sorted(ids.values())
    for k in range(1, 16):
        bits = sum(1 << (order[j] - 1) for j in range(4) if k >> j & 1)
        pkt = functools.partial(frame, bsl=bsl)

        out += [(0, BFIR, pkt(bits, 9)), (0, BFIR, pkt(bits, 4)), (0, RECEIVER, pkt(bits, 9))]
        out += [(0, WHOLE, pkt(bits, 10)), (0, WHOLE, pkt(bits, 9)), (0, STRANGER, pkt(bits, 9))]
        out += [(1, lab.nbr_addr[1], pkt(bits, 2)), (1, FABRIC_STRANGER, pkt(bits, 2))]
    return out


class Senders:
    """A raw socket in each neighbour's netns, so frames with any source enter the DUT on any link."""

    def __init__(self, lab: NetLab) -> None:
        self.lab = lab
        self.socks = []
        for i in range(lab.n):
            with in_netns(lab.nbrs[i]):
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
                s.bind((lab.nbr_if[i], 0))
                self.socks.append(s)

    def run(self, dut: Dut, frames: list[tuple[int, str, bytes]]) -> list[list[bytes]]:
        lab = self.lab
        got: list[list[bytes]] = [[] for _ in range(lab.n)]
        for start in range(0, len(frames), CHUNK):
            for link, src, payload in frames[start : start + CHUNK]:
                f = udp_frame(
                    lab.dut_mac[link], lab.nbr_mac[link], src, lab.dut_addr[link], 6635, 6635, payload
                )
                self.socks[link].send(f)
                # one frame at a time: copies then leave in the order the pure code lists them
                for i, fs in enumerate(lab.capture(settle=0.005, poll=dut.poll)):
                    got[i] += fs
        return got

    def close(self) -> None:
        for s in self.socks:
            s.close()


def _fold_sources(c: dict[str, int]) -> dict[str, int]:
    """The program counts every non-neighbour source as rx.src.other; the Python one per address."""
    out: dict[str, int] = {}
    for k, v in c.items():
        if k.startswith("rx.src.") and not k.startswith("rx.src.other."):
            k = "rx.src.other." + k.rsplit(".", 1)[1]
        out[k] = out.get(k, 0) + v
    return out


def _tables(lab: NetLab, bsl: int = BSL, ids=FIG1_IDS):
    birt = compute_birts(undirected(FIG1_EDGES), ids)["B"]
    bifts = build_bifts(birt, bsl, {n: {(0, bsl, 0): 1000 + 100 * i} for i, n in enumerate(NAMES)})
    local_labels = {(0, bsl, 0): 500}
    return bifts, local_labels, bifts_by_label(bifts, local_labels)


@pytest.mark.parametrize("lab", [3], indirect=True)
@pytest.mark.parametrize(("bsl", "ids"), [(BSL, FIG1_IDS), (256, WIDE_IDS)], ids=["bsl64", "bsl256-wide"])
def test_edge_policy_same_drops_on_both_dataplanes(lab: NetLab, bier_obj: Path, bsl: int, ids) -> None:
    bifts, local_labels, tables = _tables(lab, bsl, ids)
    nbr_index = {n: i for i, n in enumerate(NAMES)}
    policies = policy(lab, bsl, ids)
    frames = traffic(lab, bsl, ids)

    # what the pure code says: the policy's verdict on the frame's port, then RFC 8279 §6.5 on the rest
    want_reasons: dict[str, int] = {}
    accepted = []
    for link, src, payload in frames:
        f = parse_fields(payload, 0, bsl)
        port = lab.dut_if[link]
        why = check(policies[port], src, 0, f[12], f[11])
        if why is None:
            accepted.append(payload)
        else:
            key = f"dropped-policy.{port}.{why}"
            want_reasons[key] = want_reasons.get(key, 0) + 1
    want, want_local = expected(lab, tables, nbr_index, accepted)
    assert want_local == [] and accepted
    assert set(want_reasons) == {  # every reason is exercised
        f"dropped-policy.{lab.dut_if[0]}.bitstring-outside-set",
        f"dropped-policy.{lab.dut_if[0]}.forged-bfir-id",
        f"dropped-policy.{lab.dut_if[0]}.not-bfir",
        f"dropped-policy.{lab.dut_if[1]}.not-bfr-neighbor",
    }

    senders = Senders(lab)
    results = {}
    try:
        for mode in ("ebpf", "python"):
            dut = Dut(lab, None, bsl, bifts, NAMES, local_labels)
            try:
                dut.dp.set_edge_policy(policies)
                if mode == "ebpf":
                    dut.start_ebpf(bier_obj)
                got = senders.run(dut, frames)
                c = dut.counters()
            finally:
                dut.close()
            check_frames(got, want) if mode == "ebpf" else check_payloads(got, want)
            assert dut.got == [], mode
            for key, n in want_reasons.items():
                assert c[key] == n, (mode, key, c[key], n)
            assert c["dropped-policy"] == sum(want_reasons.values()), mode
            results[mode] = _fold_sources(c)
    finally:
        senders.close()
    ebpf, py = results["ebpf"], results["python"]
    assert ebpf.pop("ebpf.punted") == 0  # the program judged every frame itself
    diff = {
        k: (ebpf.get(k, 0), py.get(k, 0))
        for k in sorted(set(ebpf) | set(py))
        if ebpf.get(k, 0) != py.get(k, 0)
    }
    assert not diff, f"counters differ (ebpf, python): {diff}"
    assert py["rx.packets"] == len(frames)


@pytest.mark.parametrize("mode", ["ebpf", "python"])
@pytest.mark.parametrize("lab", [3], indirect=True)
def test_both_dataplanes_judge_by_the_ingress_port(lab: NetLab, bier_obj: Path, mode: str) -> None:
    """C's address arriving on the host port is no BFIR there, and the host's arriving on C's fabric port
    is no BFR neighbour: the port is where a packet came in, never what its source claims.  A port
    without policy (link 2 here) accepts anything, as in the pure module."""
    bifts, local_labels, _ = _tables(lab)
    policies = policy(lab)
    del policies[lab.dut_if[2]]
    dut = Dut(lab, None, BSL, bifts, NAMES, local_labels)
    senders = Senders(lab)
    try:
        dut.dp.set_edge_policy(policies)
        if mode == "ebpf":
            dut.start_ebpf(bier_obj)
        pkt = frame(0b1000, 2)  # to BFR-id 4, behind A
        spoofed = [(0, lab.nbr_addr[1], pkt), (1, BFIR, frame(0b1000, 9))]
        got = senders.run(dut, [*spoofed, (1, lab.nbr_addr[1], pkt), (2, "10.77.2.99", pkt)])
        c = dut.counters()
    finally:
        senders.close()
        dut.close()
    assert c[f"dropped-policy.{lab.dut_if[0]}.not-bfir"] == 1
    assert c[f"dropped-policy.{lab.dut_if[1]}.not-bfr-neighbor"] == 1 and c["dropped-policy"] == 2
    assert c.get("ebpf.punted", 0) == 0
    assert len(got[0]) == 2  # C's copy from its own port and the stranger's on the open port reach A


@pytest.mark.parametrize("lab", [3], indirect=True)
def test_policy_rewritten_and_turned_off(lab: NetLab, bier_obj: Path) -> None:
    """write_policy replaces the whole policy (old sources gone) and an empty one accepts everything."""
    bifts, local_labels, _ = _tables(lab)
    policies = policy(lab)
    dut = Dut(lab, None, BSL, bifts, NAMES, local_labels)
    senders = Senders(lab)
    try:
        dut.dp.set_edge_policy(policies)
        dut.start_ebpf(bier_obj)
        assert dut.ebpf is not None and dut.ebpf.maps is not None
        pkt = frame(0b100, 9)  # to BFR-id 3 (behind E), in BFIR's set
        first = senders.run(dut, [(0, BFIR, pkt)])  # accepted
        narrowed = dict(policies)
        narrowed[lab.dut_if[0]] = PortPolicy(HOST, hosts={WHOLE: HostBfir(10)})
        dut.dp.set_edge_policy(narrowed)
        dut.ebpf.write_policy()
        senders.run(dut, [(0, BFIR, pkt)])  # BFIR is no longer listed: not-bfir
        dut.dp.set_edge_policy({})
        dut.ebpf.write_policy()
        got = senders.run(dut, [(0, STRANGER, pkt)])  # policy off: forwarded
        c = dut.counters()
    finally:
        senders.close()
        dut.close()
    assert c[f"dropped-policy.{lab.dut_if[0]}.not-bfir"] == 1 and c["dropped-policy"] == 1
    assert len(first[2]) == 1 and len(got[2]) == 1 and c["ebpf.punted"] == 0


# -- every path a packet can take ----------------------------------------------------------------
def ipv4_frames(lab: NetLab, link: int, src: str, payload: bytes, shape: str, ident: int) -> list[bytes]:
    """The Ethernet frames carrying one BIER-in-UDP datagram from ``src`` into the DUT on ``link``, in a
    ``shape`` the program does not judge itself: ``options`` (IPv4 options, IHL 6) or ``fragments`` (two
    IPv4 fragments the DUT's stack reassembles); ``plain`` is the shape it does judge."""
    s, d = ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(lab.dut_addr[link]).packed
    ulen = 8 + len(payload)
    pseudo = s + d + struct.pack("!BBH", 0, 17, ulen)
    csum = checksum16(pseudo + struct.pack("!HHHH", 6635, 6635, ulen, 0) + payload) or 0xFFFF
    datagram = struct.pack("!HHHH", 6635, 6635, ulen, csum) + payload
    options = b"\x01\x01\x01\x00" if shape == "options" else b""  # NOP NOP NOP, end of options
    pieces = [(0, datagram, 0x4000)]  # DF
    if shape == "fragments":
        cut = 16  # a multiple of 8: the second fragment's offset is 2 units
        pieces = [(0, datagram[:cut], 0x2000), (cut // 8, datagram[cut:], 0)]  # MF, then the last
    frames = []
    for offset, chunk, flags in pieces:
        ihl = 5 + len(options) // 4
        total = ihl * 4 + len(chunk)
        ip = (
            struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, total, ident, flags | offset, 64, 17, 0, s, d)
            + options
        )
        ip = ip[:10] + struct.pack("!H", checksum16(ip)) + ip[12:]
        frames.append(lab.dut_mac[link] + lab.nbr_mac[link] + struct.pack("!H", ETH_P_IP) + ip + chunk)
    return frames


SHAPES = ("plain", "options", "fragments")


@pytest.mark.parametrize("mode", ["ebpf", "python"])
@pytest.mark.parametrize("lab", [3], indirect=True)
def test_no_copy_outside_the_policy_on_any_path(lab: NetLab, bier_obj: Path, mode: str) -> None:
    """RFC 8296 §6 fuzzed from the host port (link 0) and C's fabric port (link 1): random sources (the
    BFIR, a host that is no BFIR, a stranger, C's and E's own addresses), BFIR-ids and BitStrings, each in
    every shape a packet can arrive in, IPv4 options and fragments among them (the program hands those
    to the stack and the Python dataplane behind it judges them). Every datagram the pure policy refuses
    yields no copy on any link, whichever path it took; every one it accepts (and the BIFT forwards)
    yields one, so a shape the DUT never saw cannot pass for a refusal. GSO packets are not sent: a
    neighbour's raw socket puts single frames on the wire."""
    import random

    rng = random.Random(8296)
    bifts, local_labels, tables = _tables(lab)
    policies = policy(lab)
    order = sorted(FIG1_IDS.values())
    sources = {
        0: [BFIR, WHOLE, RECEIVER, STRANGER, lab.nbr_addr[1], lab.nbr_addr[2]],
        1: [lab.nbr_addr[1], BFIR],
    }
    cases = []  # (link, source, tag, refused by the policy?, frames)
    for n in range(150):
        link = rng.choice((0, 0, 1))
        src = rng.choice(sources[link])
        bits = sum(1 << (b - 1) for b in order if rng.random() < 0.5) or 1 << (order[0] - 1)
        bfir = rng.choice((9, 10, 2, 4))
        tag = b"fuzz%04d." % n
        payload = (
            BierHeader(bift_id=500, bitstring=bits, bsl=BSL, ttl=64, entropy=n, bfir_id=bfir).encode() + tag
        )
        refused = check(policies[lab.dut_if[link]], src, 0, bits, bfir) is not None
        forwarded = bool(forward_packet(payload, tables).copies)
        shape = SHAPES[n % len(SHAPES)]
        cases.append(
            (link, src, tag, refused, forwarded, ipv4_frames(lab, link, src, payload, shape, 1000 + n))
        )
    assert sum(c[3] for c in cases) > 40 and sum(not c[3] and c[4] for c in cases) > 20  # both kinds, often

    senders = Senders(lab)
    dut = Dut(lab, None, BSL, bifts, NAMES, local_labels)
    got: list[bytes] = []
    try:
        dut.dp.set_edge_policy(policies)
        if mode == "ebpf":
            dut.start_ebpf(bier_obj)
        for link, _src, _tag, _refused, _forwarded, frames in cases:
            for f in frames:
                senders.socks[link].send(f)
            for copies in lab.capture(settle=0.005, poll=dut.poll):
                got += copies
        c = dut.counters()
    finally:
        senders.close()
        dut.close()
    leaked = [
        (link, src, tag)
        for link, src, tag, refused, _f, _fr in cases
        if refused and any(tag in g for g in got)
    ]
    assert not leaked, f"{mode}: copies of datagrams the policy refuses: {leaked}"
    missing = [
        (link, src, tag)
        for link, src, tag, refused, fwd, _fr in cases
        if not refused and fwd
        if not any(tag in g for g in got)
    ]
    assert not missing, f"{mode}: accepted datagrams that were not forwarded: {missing}"
    assert c["dropped-policy"] == sum(c_[3] for c_ in cases)
    if mode == "ebpf":
        # what went the stack's way: every datagram with options (a fragment the program lets by uncounted,
        # as it does all UDP it cannot read to the BIER header)
        assert c["ebpf.punted"] == sum(1 for n in range(len(cases)) if SHAPES[n % len(SHAPES)] == "options")
