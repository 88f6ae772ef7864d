"""The eBPF BFR (aidcnet/ebpf/bier.c) against the pure RFC 8279 §6.5 code and the Python dataplane.

A DUT netns runs the tc program on its veths; neighbour 0 injects frames, every neighbour captures
what the DUT sends it.  For each packet the pure code (aidcnet.bier.forwarding) says which copies go
to which neighbour; the captured frames must be exactly those, byte for byte (UDP payload from
build_copies, outer headers as a Linux UDP socket sends them), in order per neighbour.  Where the
tables fit one BierDataplane, the same packets go through the Python dataplane too (program detached):
same copies and the same counters.

Needs root, clang, bpftool and tc (make setup); a missing tool fails the test with the install command.
"""

from __future__ import annotations

import ctypes
import random
import re
import socket
import struct
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from aidcnet.agent.bier.dataplane import BierDataplane
from aidcnet.agent.bier.ebpf import (
    DELIVER_PORT,
    BierMaps,
    Direct,
    EbpfBier,
    EbpfUnavailable,
    attach,
    detach,
    load,
    run_cmd,
    start_fast_path,
    unpin,
)
from aidcnet.bier.bift import NULL, SELF, Bift, bifts_by_label, build_bifts
from aidcnet.bier.forwarding import build_copies, forward_packet
from aidcnet.bier.header import BierDecodeError, BierHeader, parse_fields
from aidcnet.bier.routing import compute_birts, undirected
from aidcnet.ipv4 import build_udp, checksum16
from tests.dataplane.netlab import PREFIX, NetLab, in_netns, udp_frame
from tests.unit.aidcnet.bier.test_bier_forwarding import FIG1_EDGES, FIG1_IDS, FIG6_EDGES
from tests.unit.aidcnet.bier.test_bier_fuzz import N_PACKETS, mutate, node_tables, valid_packet

PIN = Path(f"/sys/fs/bpf/{PREFIX}test")
CHUNK = 500


@pytest.fixture(autouse=True)
def _unpin() -> Iterator[None]:
    yield
    unpin(PIN)


def expected(
    lab: NetLab, tables: Mapping[int, Bift], nbr_index: Mapping[str, int], packets: list[bytes]
) -> tuple[list[list[bytes]], list[tuple[bytes, int, int, bytes]]]:
    """The frames each neighbour must get and the local deliveries, from the pure §6.5 code."""
    per_nbr: list[list[bytes]] = [[] for _ in range(lab.n)]
    local = []
    for pkt in packets:
        try:
            res = forward_packet(pkt, tables)
        except BierDecodeError:
            continue
        if res.copies:
            for nbr, copy in build_copies(pkt, res):
                i = nbr_index[nbr]
                per_nbr[i].append(lab.copy_frame(i, bytes(copy)))
        if res.local:
            f = parse_fields(pkt, 0, res.bsl)
            local.append((pkt[res.end :], f[11], f[10], pkt[: res.end]))
    return per_nbr, local


def drain(sock: socket.socket) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(sock.recv(65535))
        except BlockingIOError:
            return out


def run_ebpf_raw(
    lab: NetLab,
    obj: Path,
    tables: Mapping[int, Bift],
    nbr_index: Mapping[str, int],
    packets: list[bytes],
    send: Callable[[list[bytes]], None] | None = None,
    direct: Direct | None = None,
    direct_got: list[tuple[bytes, str]] | None = None,
) -> tuple[list[list[bytes]], list[bytes], dict[str, int]]:
    """The program with maps written straight from ``tables`` (no BierDataplane: any mix of BSLs).
    ``send`` puts UDP payloads on the wire (default: frames from neighbour 0, full checksums).
    ``direct``: direct delivery on, what an application socket on its port receives goes to
    ``direct_got`` as (payload, source address)."""
    run = run_cmd(lab.run_prefix())
    load(obj, PIN, run)
    maps = BierMaps(PIN)
    app = None
    with in_netns(lab.dut):
        delivery = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        delivery.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
        delivery.bind(("0.0.0.0", DELIVER_PORT))
        delivery.setblocking(False)
        if direct is not None:
            app = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            app.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
            app.bind(("0.0.0.0", direct.port))
            app.setblocking(False)
    try:
        maps.set_local(lab.dut_addr)
        for i in nbr_index.values():
            maps.set_neighbor(
                i, _ifindex(lab, i), lab.dut_addr[i], lab.nbr_addr[i], lab.dut_mac[i], lab.nbr_mac[i]
            )
        maps.write_tables(tables, nbr_index, direct=direct)
        attach(lab.dut_if, PIN, run)
        got: list[list[bytes]] = [[] for _ in range(lab.n)]
        delivered: list[bytes] = []
        for start in range(0, len(packets), CHUNK):
            if send is None:
                lab.send([lab.frame_in(p) for p in packets[start : start + CHUNK]])
            else:
                send(packets[start : start + CHUNK])
            for i, frames in enumerate(lab.capture(settle=0.01)):
                got[i] += frames
            delivered += drain(delivery)
            while app is not None and direct_got is not None:
                try:
                    data, addr = app.recvfrom(65535)
                except BlockingIOError:
                    break
                direct_got.append((data, addr[0]))
        nbrs = {name: (i, lab.dut_if[i]) for name, i in nbr_index.items()}
        return got, delivered, maps.counters(nbrs)
    finally:
        for ifname in lab.dut_if:
            detach(ifname, run)
        maps.close()
        delivery.close()
        if app is not None:
            app.close()


def _ifindex(lab: NetLab, i: int) -> int:
    with in_netns(lab.dut):
        return socket.if_nametoindex(lab.dut_if[i])


def check_frames(got: list[list[bytes]], want: list[list[bytes]]) -> None:
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert len(g) == len(w), f"neighbour {i}: {len(g)} copies, pure code says {len(w)}"
        for j, (a, b) in enumerate(zip(g, w, strict=True)):
            assert a == b, f"neighbour {i} copy {j}:\n got  {a.hex()}\n want {b.hex()}"


# -- through a BierDataplane: eBPF and Python modes ------------------------------------------------
class Dut:
    """A BierDataplane in the DUT netns (delivery recorded), optionally fronted by EbpfBier."""

    def __init__(
        self, lab: NetLab, bfr_id: int | None, bsl: int, bifts, names: list[str], local_labels
    ) -> None:
        neighbors = {name: (lab.nbr_addr[i], lab.dut_if[i]) for i, name in enumerate(names)}
        with in_netns(lab.dut):
            self.dp = BierDataplane(bfr_id, bsl, 0, bifts, neighbors, local_labels)
        self.got: list[tuple[bytes, int, int, bytes]] = []
        self.dp.deliver = lambda p, b, pr, h: self.got.append((p, b, pr, h))
        self.ebpf: EbpfBier | None = None
        self.lab = lab

    def start_ebpf(self, obj: Path) -> None:
        self.ebpf = EbpfBier(self.dp, obj, self.lab.dut_addr, pin_dir=PIN, run=run_cmd(self.lab.run_prefix()))
        with in_netns(self.lab.dut):
            self.ebpf.start()

    def poll(self) -> int:
        n = self.dp.poll_once()
        if self.ebpf is not None:
            n += self.ebpf.poll_deliveries()
        return n

    def run(self, packets: list[bytes]) -> list[list[bytes]]:
        got: list[list[bytes]] = [[] for _ in range(self.lab.n)]
        for start in range(0, len(packets), CHUNK):
            self.lab.send([self.lab.frame_in(p) for p in packets[start : start + CHUNK]])
            for i, frames in enumerate(self.lab.capture(settle=0.03, poll=self.poll)):
                got[i] += frames
        return got

    def counters(self) -> dict[str, int]:
        return self.ebpf.counters() if self.ebpf is not None else self.dp.counters()

    def close(self) -> None:
        if self.ebpf is not None:
            self.ebpf.stop()
        self.dp.close()


def both_dataplanes(
    lab: NetLab,
    obj: Path,
    bfr_id: int | None,
    bsl: int,
    birt,
    names: list[str],
    packets: list[bytes],
    seed: int = 0,
) -> None:
    """Pure code, eBPF and Python dataplane on the same packets: same copies, deliveries, counters."""
    nbr_labels = {n: {(0, bsl, si): 1000 + 100 * i + si for si in range(4)} for i, n in enumerate(names)}
    bifts = build_bifts(birt, bsl, nbr_labels, ecmp_seed=seed)
    local_labels = {(0, bsl, si): 500 + si for si in bifts}
    tables = bifts_by_label(bifts, local_labels)
    nbr_index = {n: i for i, n in enumerate(names)}
    want, want_local = expected(lab, tables, nbr_index, packets)
    results = {}
    for mode in ("ebpf", "python"):
        dut = Dut(lab, bfr_id, bsl, bifts, names, local_labels)
        try:
            if mode == "ebpf":
                dut.start_ebpf(obj)
            got = dut.run(packets)
            c = dut.counters()
        finally:
            dut.close()
        check_frames(got, want) if mode == "ebpf" else check_payloads(got, want)
        assert dut.got == want_local, mode
        results[mode] = c
    ebpf, py = results["ebpf"], results["python"]
    assert ebpf.pop("ebpf.punted") == 0
    assert ebpf.pop("ebpf.delivered-direct") == 0  # direct delivery is off here
    keys = set(ebpf) | set(py)
    diff = {k: (ebpf.get(k, 0), py.get(k, 0)) for k in sorted(keys) if ebpf.get(k, 0) != py.get(k, 0)}
    assert not diff, f"counters differ (ebpf, python): {diff}"
    assert py["rx.packets"] == len(packets)


def check_payloads(got: list[list[bytes]], want: list[list[bytes]]) -> None:
    """The Python dataplane's copies: same UDP payloads and headers except the IPv4 ID the kernel picks
    (the program sends ID 0 with DF, RFC 6864 §4.1) and the checksums (the kernel's, maybe partial)."""
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert [f[42:] for f in g] == [f[42:] for f in w], f"neighbour {i}: Python dataplane copies differ"
        headers = [[f[:18] + f[20:24] + f[26:40] for f in frames] for frames in (g, w)]
        assert headers[0] == headers[1], f"neighbour {i}: headers"


# -- RFC 8279 §6.6 -------------------------------------------------------------------------------
@pytest.mark.parametrize("lab", [3], indirect=True)
def test_rfc8279_6_6_example_at_b(lab: NetLab, bier_obj: Path) -> None:
    """BFR-B of Figure 1 (neighbours A, C, E), packets from A with every BitString of 4 bits and a few
    TTLs: Example 1 (0101 -> C gets 0001, E gets 0100) and Example 2 (1111 -> A, C, E) among them."""
    birt = compute_birts(undirected(FIG1_EDGES), FIG1_IDS)["B"]
    packets = [
        BierHeader(bift_id=500, bitstring=bits, bsl=64, ttl=ttl, entropy=bits * 7, bfir_id=4).encode()
        + b"pl%d" % bits
        for bits in range(16)
        for ttl in (0, 1, 2, 64)
    ]
    both_dataplanes(lab, bier_obj, None, 64, birt, ["A", "C", "E"], packets)


@pytest.mark.parametrize("lab", [3], indirect=True)
def test_rfc8279_figure6_ecmp_at_b(lab: NetLab, bier_obj: Path) -> None:
    """Figure 6: B reaches F over C or E; the choice follows the entropy exactly as the Python code."""
    birt = compute_birts(undirected(FIG6_EDGES), FIG1_IDS)["B"]
    assert any(len(h) > 1 for h in birt.values())
    packets = [
        BierHeader(bift_id=500, bitstring=bits, bsl=64, ttl=9, entropy=e, bfir_id=4).encode()
        for bits in (0b0010, 0b0110, 0b0011, 0b1111)
        for e in range(0, 1 << 20, 9973)
    ]
    both_dataplanes(lab, bier_obj, None, 64, birt, ["A", "C", "E"], packets, seed=77)


# -- random topologies ---------------------------------------------------------------------------
@pytest.mark.parametrize("bsl", [64, 128, 256])
@pytest.mark.parametrize("lab", [6], indirect=True)
def test_random_birts(lab: NetLab, bier_obj: Path, bsl: int) -> None:
    """Random BIRTs over 6 neighbours with ECMP, null rows, holes, an own BFR-id, two SIs."""
    rng = random.Random(bsl)
    names = [f"N{i}" for i in range(6)]
    own = rng.randrange(1, 2 * bsl)
    birt: dict = {own: SELF}
    for bfr_id in range(1, 2 * bsl + 1):
        if bfr_id == own or rng.random() < 0.1:
            continue
        birt[bfr_id] = NULL if rng.random() < 0.05 else rng.sample(names, rng.choice((1, 1, 1, 2, 3)))
    packets = []
    for _ in range(600):
        si = rng.randrange(2)
        bits = rng.getrandbits(bsl) & rng.getrandbits(bsl) & rng.getrandbits(bsl)
        ttl, entropy, bfir = rng.choice((1, 2, 64)), rng.getrandbits(20), rng.getrandbits(16)
        hdr = BierHeader(500 + si, bits, bsl, ttl, entropy=entropy, proto=4, bfir_id=bfir)
        packets.append(hdr.encode() + rng.randbytes(rng.randrange(0, 200)))
    both_dataplanes(lab, bier_obj, own, bsl, birt, names, packets, seed=rng.getrandbits(32))


# -- the fuzzed packets of tests/unit/aidcnet/bier/test_bier_fuzz.py  ---------------------------
@pytest.mark.parametrize("lab", [3], indirect=True)
def test_fuzz_100k_against_pure_code(lab: NetLab, bier_obj: Path) -> None:
    """The same 100k random and mutated packets as the unit fuzz test (two BSLs, three BIFTs): the
    program's copies and deliveries are the pure code's, and its counters account for every packet."""
    rng = random.Random(0xB1E8)
    tables = node_tables()
    labels = sorted(tables)
    packets = []
    for i in range(N_PACKETS):
        pkt = valid_packet(rng, labels)
        packets.append(mutate(rng, pkt) if i % 4 else pkt)
    nbr_index = {"B": 0, "C": 1, "D": 2}
    want, want_local = expected(lab, tables, nbr_index, packets)
    got, delivered, c = run_ebpf_raw(lab, bier_obj, tables, nbr_index, packets)
    check_frames(got, want)
    assert delivered == [h + p for p, _b, _pr, h in want_local]
    assert c["ebpf.punted"] == 0 and c["rx.packets"] == N_PACKETS
    whole = ("dropped-malformed", "dropped-ttl", "dropped-zero-bitstring", "dropped-unknown-bift-id",
             "dropped-no-entry", "dropped-null-neighbor")  # fmt: skip
    assert c["accepted"] + sum(c[k] for k in whole) == N_PACKETS
    assert c["tx.packets"] == sum(map(len, want)) == c["forwarded"] + c["replicated"]
    assert c["delivered"] == len(want_local)
    # decode failures, one per reason, as the pure parser sees them
    reasons: dict[str, int] = {}
    for pkt in packets:
        try:
            forward_packet(pkt, tables)
        except BierDecodeError as exc:
            reasons[exc.reason] = reasons.get(exc.reason, 0) + 1
    for reason, count in reasons.items():
        assert c[f"dropped-malformed.{reason}"] == count, reason


# -- checksum states -------------------------------------------------------------------------------
def pseudo_sum(frame: bytes) -> int:
    """The folded IPv4/UDP pseudo-header sum of ``frame``: what the UDP checksum field of a
    CHECKSUM_PARTIAL skb holds until the transmit path finishes it."""
    words = frame[26:34] + bytes([0, 17]) + frame[38:40]
    s = sum(int.from_bytes(words[i : i + 2], "big") for i in range(0, len(words), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


@pytest.mark.parametrize("lab", [3], indirect=True)
def test_partial_checksums_of_locally_sent_packets(lab: NetLab, bier_obj: Path) -> None:
    """BIER packets from a UDP socket arrive CHECKSUM_PARTIAL (veth offloads the UDP checksum): the
    field holds only the pseudo-header sum.  Each copy must hold its own pseudo-header's sum (new
    addresses), and everything else byte for byte as the pure code says; finishing the checksum then
    gives the pure code's frame.  Copies for one, two and three neighbours (redirect and clones)."""
    birt = compute_birts(undirected(FIG1_EDGES), FIG1_IDS)["B"]
    bifts = build_bifts(birt, 64, {n: {(0, 64, 0): 900 + i} for i, n in enumerate("ACE")})
    tables = bifts_by_label(bifts, {(0, 64, 0): 500})
    nbr_index = {"A": 0, "C": 1, "E": 2}
    packets = [
        BierHeader(bift_id=500, bitstring=bits, bsl=64, ttl=9, entropy=bits, bfir_id=4).encode() + b"x" * n
        for bits in (0b0001, 0b0100, 0b1000, 0b0101, 0b1101, 0b1111)
        for n in (0, 1, 64, 1000)
    ]
    with in_netns(lab.nbrs[0]):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((lab.nbr_addr[0], 40000))

    def send(payloads: list[bytes]) -> None:
        for p in payloads:
            sock.sendto(p, (lab.dut_addr[0], 6635))

    try:
        want, _local = expected(lab, tables, nbr_index, packets)
        got, _delivered, c = run_ebpf_raw(lab, bier_obj, tables, nbr_index, packets, send=send)
    finally:
        sock.close()
    partial = 0
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert len(g) == len(w), f"neighbour {i}: {len(g)} copies, pure code says {len(w)}"
        for j, (a, b) in enumerate(zip(g, w, strict=True)):
            if a == b:
                continue
            assert a[:40] + a[42:] == b[:40] + b[42:], (
                f"neighbour {i} copy {j}:\n got  {a.hex()}\n want {b.hex()}"
            )
            field = int.from_bytes(a[40:42], "big")
            assert field % 0xFFFF == pseudo_sum(b) % 0xFFFF, (
                f"neighbour {i} copy {j}: UDP checksum {field:#x}"
            )
            partial += 1
    assert partial, "no copy arrived with a partial checksum: the test did not exercise CHECKSUM_PARTIAL"
    assert c["ebpf.punted"] == 0 and c["tx.packets"] == sum(map(len, want))


@pytest.mark.parametrize("lab", [3], indirect=True)
def test_addresses_the_interface_shortcut_does_not_name(lab: NetLab, bier_obj: Path) -> None:
    """bier_if names link 0's neighbour and our address there; packets on link 0 from a stranger, or to
    our address on another link, take the hash maps (bier_nbr_addr, bier_local) and are forwarded and
    counted as those say: the stranger under rx.src.other, the neighbour under its own name.  A packet to
    an address that is not ours is not the program's, whoever sends it."""
    birt = compute_birts(undirected(FIG1_EDGES), FIG1_IDS)["B"]
    bifts = build_bifts(birt, 64, {n: {(0, 64, 0): 900 + i} for i, n in enumerate("ACE")})
    tables = bifts_by_label(bifts, {(0, 64, 0): 500})
    nbr_index = {"A": 0, "C": 1, "E": 2}
    payloads = [
        BierHeader(bift_id=500, bitstring=bits, bsl=64, ttl=9, entropy=bits, bfir_id=4).encode() + b"y" * 20
        for bits in (0b0001, 0b0100, 0b1000, 0b1101)
    ]
    stranger = "10.77.0.99"
    # (source, destination) on link 0: the cached pair, a stranger, our address on link 1, both
    pairs = [(lab.nbr_addr[0], lab.dut_addr[0]), (stranger, lab.dut_addr[0]),
             (lab.nbr_addr[0], lab.dut_addr[1]), (stranger, lab.dut_addr[2])]  # fmt: skip
    packets = payloads * len(pairs)

    def send(chunk: list[bytes]) -> None:
        assert len(chunk) == len(packets)
        lab.send([
            udp_frame(lab.dut_mac[0], lab.nbr_mac[0], src, dst, 6635, 6635, p)
            for src, dst in [*pairs, (lab.nbr_addr[0], "10.77.0.77")]
            for p in payloads
        ])  # fmt: skip

    want, _local = expected(lab, tables, nbr_index, packets)
    got, _delivered, c = run_ebpf_raw(lab, bier_obj, tables, nbr_index, packets, send=send)
    check_frames(got, want)
    n = len(payloads)
    assert c["rx.packets"] == 4 * n and c["ebpf.punted"] == 0
    assert c["rx.src.other.packets"] == 2 * n, c
    assert c["rx.nbr.A.packets"] == 2 * n and c["rx.nbr.C.packets"] == c["rx.nbr.E.packets"] == 0, c


# -- the agent side ------------------------------------------------------------------------------
def test_ctypes_mirrors_match_the_objects_btf(bier_obj: Path) -> None:
    """aidcnet/agent/bier/ebpf.py's structures have the sizes clang gave bier.h's (from the object's BTF)."""
    from aidcnet.agent.bier import ebpf as m
    from aidcnet.ebpf import SRC

    raw = run_cmd()(["bpftool", "btf", "dump", "file", str(bier_obj), "format", "raw"])
    sizes = dict(re.findall(r"STRUCT '(bier_\w+)' size=(\d+)", raw))
    mirrors = {"bier_cfg": m.Cfg, "bier_table": m.TableInfo, "bier_entry": m.Entry, "bier_alt": m.Alt}
    mirrors |= {"bier_fbm": m.Fbm, "bier_nbr": m.Nbr, "bier_flow": m.Flow, "bier_flow_key": m.FlowKey}
    mirrors |= {"bier_pol_cfg": m.PolCfg, "bier_pol_port": m.PolPort, "bier_pol_key": m.PolKey}
    mirrors |= {"bier_pol_src": m.PolSrc}
    for name, mirror in mirrors.items():
        assert int(sizes[name]) == ctypes.sizeof(mirror), name
    header = (SRC / "bier.h").read_text()
    enum = header.split("enum bier_counter {", 1)[1].split("};", 1)[0]
    names = [ln.strip().split(",")[0] for ln in enum.splitlines() if ln.strip().startswith("C_")]
    assert names[-1] == "C_NUM" and len(names) - 1 == len(m.COUNTERS)
    # C_DROPPED_NULL_NEIGHBOR <-> "dropped-null-neighbor", C_MALFORMED_X <-> "dropped-malformed.x", ...
    for cname, pyname in zip(names, m.COUNTERS, strict=False):
        flat = pyname.replace("dropped-malformed.", "malformed.").replace("dropped-bits.", "bits.")
        flat = flat.replace("ebpf.", "").replace("rx.src.other", "rx.other")
        assert cname[2:].lower() == re.sub(r"[.-]", "_", flat), (cname, pyname)
    edge = header.split("enum bier_edge_counter {", 1)[1].split("};", 1)[0]
    enames = [ln.strip().split(",")[0] for ln in edge.splitlines() if ln.strip().startswith("E_")]
    assert enames[-1] == "E_NUM" and len(enames) - 1 == len(m.EDGE_COUNTERS)
    for cname, pyname in zip(enames, m.EDGE_COUNTERS, strict=False):
        assert cname[2:].lower() == re.sub(r"[.-]", "_", pyname.replace("ebpf.edge-", "")), (cname, pyname)
    assert f"#define BIER_MAX_PORTS {m.MAX_PORTS}" in header
    assert f"#define BIER_POL_MAX_SI {m.POL_MAX_SI}" in header
    assert f"#define BIER_POL_NREASONS {m.POL_NREASONS}" in header
    pol = header.split("enum bier_pol_reason {", 1)[1].split("};", 1)[0]
    pnames = [ln.strip().split(",")[0] for ln in pol.splitlines() if ln.strip().startswith("POL_")]
    from aidcnet.bier.edge_policy import REASON_CODE

    assert pnames[0] == "POL_OK" and len(pnames) == m.POL_NREASONS
    for reason, code in REASON_CODE.items():  # the program's codes are the pure module's
        assert pnames[code] == "POL_" + reason.upper().replace("-", "_"), reason


@pytest.mark.parametrize("lab", [2], indirect=True)
def test_kernel_refusal_falls_back_with_a_reason(lab: NetLab, bier_obj: Path, tmp_path: Path) -> None:
    """A program the kernel will not load leaves nothing attached and says why; the Python dataplane
    (already running) keeps forwarding."""
    bad = tmp_path / "bier.o"
    bad.write_bytes(bier_obj.read_bytes()[:2000])  # a truncated ELF: bpftool/libbpf refuse it
    bifts = build_bifts({1: SELF, 2: ["A"]}, 64, {"A": {(0, 64, 0): 900}, "B": {(0, 64, 0): 901}})
    dut = Dut(lab, 1, 64, bifts, ["A", "B"], {(0, 64, 0): 500})
    try:
        fast = EbpfBier(dut.dp, bad, lab.dut_addr, pin_dir=PIN, run=run_cmd(lab.run_prefix()))
        with pytest.raises(EbpfUnavailable, match="bpftool"):
            fast.start()
        for ifname in lab.dut_if:
            assert "bpf" not in run_cmd(lab.run_prefix())(["tc", "filter", "show", "dev", ifname, "ingress"])
        assert not PIN.exists()
        fast2, why = start_fast_path(dut.dp, tmp_path / "absent.o")
        assert fast2 is None and "absent.o is missing" in why and "Python dataplane forwards" in why
        # and forwarding goes on in Python
        got = dut.run([BierHeader(bift_id=500, bitstring=0b11, bsl=64, ttl=5).encode()])
        assert len(got[0]) == 1 and len(dut.got) == 1
    finally:
        dut.close()


@pytest.mark.parametrize("lab", [3], indirect=True)
def test_table_swap_is_atomic_between_generations(lab: NetLab, bier_obj: Path) -> None:
    """write_tables flips the generation; packets after the flip use the new BIFT only."""
    names = ["A", "B", "C"]
    labels = {n: {(0, 64, 0): 900 + i} for i, n in enumerate(names)}
    old = build_bifts({1: SELF, 2: ["B"], 3: ["B"]}, 64, labels)
    new = build_bifts({1: SELF, 2: ["C"], 3: ["B"]}, 64, labels)
    dut = Dut(lab, 1, 64, old, names, {(0, 64, 0): 500})
    try:
        dut.start_ebpf(bier_obj)
        assert dut.ebpf is not None and dut.ebpf.maps is not None
        pkt = BierHeader(bift_id=500, bitstring=0b110, bsl=64, ttl=5).encode()
        before = dut.run([pkt])
        gen = dut.ebpf.maps.cfg().gen
        dut.dp.set_bifts(new, {(0, 64, 0): 500})
        assert dut.ebpf.write_tables() == 1 - gen
        after = dut.run([pkt])
        assert [len(x) for x in before] == [0, 1, 0] and [len(x) for x in after] == [0, 1, 1]
        assert dut.ebpf.describe()["ebpf_generation"] == 1 - gen
    finally:
        dut.close()


# -- direct delivery: a host's replay data handed to the application's socket by the program ----------
def _with_udp_checksum(packet: bytes) -> bytes:
    """``packet`` (IPv4/UDP, checksum 0 as build_udp leaves it) with its UDP checksum filled in."""
    ulen = len(packet) - 20
    pseudo = packet[12:20] + struct.pack("!BBH", 0, 17, ulen)
    csum = checksum16(pseudo + packet[20:]) or 0xFFFF
    return packet[:26] + struct.pack("!H", csum) + packet[28:]


@pytest.mark.parametrize("lab", [3], indirect=True)
def test_direct_delivery_hands_replay_payloads_to_the_application_socket(lab: NetLab, bier_obj: Path) -> None:
    """With bier_cfg.direct_* set, an own-bit packet whose payload is IPv4/UDP to the direct group and port
    reaches a plain socket on that port as the payload's UDP data, from the payload's source address (the
    program strips the outer headers and BIER, and re-addresses it to the host, a UDP checksum too); every
    other own-bit packet still goes up to the delivery port whole, and the copies to neighbours stay the
    pure code's."""
    rng = random.Random(0xD1EC7)
    tables = node_tables()  # own BFR-id 5: bit 5 of SI 0 at BSL 64 (label 150) and at BSL 256 (label 250)
    direct = Direct(4791, "232.1.0.2", lab.dut_addr[0])
    packets, is_direct, want_direct = [], [], []
    for i in range(400):
        label, bsl = rng.choice(((150, 64), (250, 256)))
        others = rng.getrandbits(bsl) & rng.getrandbits(bsl) & rng.getrandbits(bsl) if i % 2 else 0
        src = f"10.255.{rng.randrange(256)}.{rng.randrange(1, 255)}"
        kind = i % 5
        group = "232.1.0.1" if kind == 1 else "232.1.0.2"  # kind 1: HOST_BIER_GROUP, for the agent
        dport = 4795 if kind == 2 else 4791  # kind 2: the reliable transport's port, for the agent
        data = rng.randbytes(rng.randrange(1, 1400))
        inner = build_udp(src, group, 40000 + i, dport, data, ident=i)
        if kind == 3:
            inner = _with_udp_checksum(inner)
        proto = 6 if kind == 4 else 4  # kind 4: BIER Proto IPv6, never the direct path
        hdr = BierHeader(bift_id=label, bitstring=others | (1 << 4), bsl=bsl, ttl=9, entropy=i, proto=proto)
        packets.append(hdr.encode() + inner)
        is_direct.append(kind in (0, 3))
        if kind in (0, 3):
            want_direct.append((data, src))
    nbr_index = {"B": 0, "C": 1, "D": 2}
    want, want_local = expected(lab, tables, nbr_index, packets)
    assert len(want_local) == len(packets)
    got_direct: list[tuple[bytes, str]] = []
    got, delivered, c = run_ebpf_raw(
        lab, bier_obj, tables, nbr_index, packets, direct=direct, direct_got=got_direct
    )
    check_frames(got, want)
    assert sorted(got_direct) == sorted(want_direct)
    assert delivered == [h + p for (p, _b, _pr, h), d in zip(want_local, is_direct, strict=True) if not d]
    assert c["delivered"] == len(packets) and c["ebpf.punted"] == 0
    assert c["ebpf.delivered-direct"] == len(want_direct)
