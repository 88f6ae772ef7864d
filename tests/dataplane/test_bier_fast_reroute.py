"""BIER fast reroute on both dataplanes (aidcnet/bier/fast_reroute.py): the point of local repair sends
a dead link's copies into their bypass tunnel, and a BFR on the tunnel pops its adjacency label and passes
the rest on. The eBPF program pushes and pops no labels: it hands both to the Python dataplane (a
punted neighbour, a label stack deeper than one entry), so the frames must be the same either way.

The DUT is BFR-B of RFC 8279 Figure 1 (neighbours A, C, E). Needs root, clang, bpftool and tc (make
setup), like test_bier_ebpf.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aidcnet.bier.bift import bifts_by_label, build_bifts
from aidcnet.bier.fast_reroute import NnhTunnel, push
from aidcnet.bier.forwarding import build_copies, forward_packet
from aidcnet.bier.header import BierHeader, make_copy
from aidcnet.bier.mpls import encode_lse
from aidcnet.bier.routing import compute_birts, undirected
from tests.dataplane.netlab import NetLab
from tests.dataplane.test_bier_ebpf import Dut, _unpin, check_payloads
from tests.unit.aidcnet.bier.test_bier_forwarding import FIG1_EDGES, FIG1_IDS

__all__ = ["_unpin"]  # the autouse fixture that unpins the maps after each test

NAMES = ["A", "C", "E"]
BYPASS_TO_C = ("E", [7000, 7001])  # as if C were reached from B over E and one more BFR


def _dut(lab: NetLab, obj: Path, mode: str, adjacency: dict[int, str] | None = None) -> tuple[Dut, dict]:
    birt = compute_birts(undirected(FIG1_EDGES), FIG1_IDS)["B"]
    nbr_labels = {n: {(0, 64, 0): 1000 + 100 * i} for i, n in enumerate(NAMES)}
    bifts = build_bifts(birt, 64, nbr_labels)
    local_labels = {(0, 64, si): 500 + si for si in bifts}
    dut = Dut(lab, None, 64, bifts, NAMES, local_labels)
    dut.dp.set_adjacency_labels(adjacency or {})
    if mode == "ebpf":
        dut.start_ebpf(obj)
    return dut, bifts_by_label(bifts, local_labels)


def _packets() -> list[bytes]:
    return [
        BierHeader(bift_id=500, bitstring=bits, bsl=64, ttl=64, entropy=bits, bfir_id=4).encode()
        + b"pl%d" % bits
        for bits in range(1, 16)
    ]


@pytest.mark.parametrize("mode", ["ebpf", "python"])
@pytest.mark.parametrize("lab", [3], indirect=True)
def test_a_dead_links_copies_take_the_bypass_and_come_back_when_it_is_off(
    lab: NetLab, bier_obj: Path, mode: str
) -> None:
    dut, tables = _dut(lab, bier_obj, mode)
    try:
        packets = _packets()
        via, labels = BYPASS_TO_C
        want: list[list[bytes]] = [[] for _ in NAMES]
        normal: list[list[bytes]] = [[] for _ in NAMES]
        to_c = 0
        for pkt in packets:
            res = forward_packet(pkt, tables)
            for nbr, copy in build_copies(pkt, res):
                normal[NAMES.index(nbr)].append(lab.copy_frame(NAMES.index(nbr), bytes(copy)))
                if nbr == "C":
                    to_c += 1
                    want[NAMES.index(via)].append(
                        lab.copy_frame(NAMES.index(via), push(labels) + bytes(copy))
                    )
                else:
                    want[NAMES.index(nbr)].append(lab.copy_frame(NAMES.index(nbr), bytes(copy)))
        dut.dp.set_bypass({"C": BYPASS_TO_C})
        if dut.ebpf is not None:
            dut.ebpf.punt(["C"])
        got = dut.run(packets)
        if mode == "ebpf":
            # the punted packets leave after the fast path's: the same frames, not in the same order
            got, want = ([sorted(f, key=lambda x: x[42:]) for f in fs] for fs in (got, want))
        check_payloads(got, want)
        assert got[NAMES.index("C")] == []
        c = dut.counters()
        assert c["bypass.sent"] == to_c > 0
        assert c["tx.nbr.E.packets"] == len(want[NAMES.index("E")])
        if mode == "ebpf":  # only the packets with a copy for C left the fast path
            assert c["ebpf.punted"] == to_c
        # off again: C's link, from the fast path
        dut.dp.set_bypass({})
        if dut.ebpf is not None:
            dut.ebpf.punt([])
        check_payloads(dut.run(packets), normal)
        assert dut.counters()["bypass.sent"] == to_c
        if mode == "ebpf":
            assert dut.counters()["ebpf.punted"] == to_c
    finally:
        dut.close()


# Node protection of C at B: C's next hop for D (BFR-id 1) is D, reached from B without C as if over E and
# one more BFR; F (BFR-id 2) has no such tunnel, so its bit keeps C's link bypass.
NNH_D = NnhTunnel("D", 1300, "E", (7002,), (1,))


@pytest.mark.parametrize("mode", ["ebpf", "python"])
@pytest.mark.parametrize("lab", [3], indirect=True)
def test_node_protection_gives_each_next_next_hop_its_bits_with_its_label(
    lab: NetLab, bier_obj: Path, mode: str
) -> None:
    dut, tables = _dut(lab, bier_obj, mode)
    try:
        packets = _packets()
        _via, labels = BYPASS_TO_C  # E, as NNH_D
        want: list[list[bytes]] = [[] for _ in NAMES]
        to_d = to_f = 0
        for pkt in packets:
            res = forward_packet(pkt, tables)
            for (nbr, bits, label), (_nbr, copy) in zip(res.copies, build_copies(pkt, res), strict=True):
                if nbr != "C":
                    want[NAMES.index(nbr)].append(lab.copy_frame(NAMES.index(nbr), bytes(copy)))
                    continue
                e = NAMES.index("E")
                if bits & 0b01:  # D's bit: straight to D, D's label, only D's bit
                    to_d += 1
                    to_d_copy = push(NNH_D.labels) + make_copy(pkt, 0, 1300, res.ttl, 0b01, 64)
                    want[e].append(lab.copy_frame(e, bytes(to_d_copy)))
                if bits & 0b10:  # F's bit: to C around its link, C's label, only F's bit
                    to_f += 1
                    to_c_copy = push(labels) + make_copy(pkt, 0, label, res.ttl, 0b10, 64)
                    want[e].append(lab.copy_frame(e, bytes(to_c_copy)))
        dut.dp.set_bypass({"C": BYPASS_TO_C}, {"C": [NNH_D]})
        if dut.ebpf is not None:
            dut.ebpf.punt(["C"])
        got = dut.run(packets)
        got, want = ([sorted(f, key=lambda x: x[42:]) for f in fs] for fs in (got, want))
        check_payloads(got, want)
        assert got[NAMES.index("C")] == []
        c = dut.counters()
        assert (c["bypass.nnh.sent"], c["bypass.sent"]) == (to_d, to_d + to_f) and to_d > 0 and to_f > 0
        assert c["tx.nbr.E.packets"] == len(want[NAMES.index("E")])
    finally:
        dut.close()


@pytest.mark.parametrize("mode", ["ebpf", "python"])
@pytest.mark.parametrize("lab", [3], indirect=True)
def test_a_bypass_passes_through_with_its_top_label_popped(lab: NetLab, bier_obj: Path, mode: str) -> None:
    dut, _tables = _dut(lab, bier_obj, mode, adjacency={7000: "E", 7001: "C"})
    try:
        inner = [
            BierHeader(bift_id=1200, bitstring=bits, bsl=64, ttl=9, bfir_id=4).encode() for bits in (1, 6)
        ]
        packets = [
            push([7000]) + inner[0],
            push([7001, 7005]) + inner[1],  # two labels left: C gets one still on top of its BIER label
            push([7999]) + inner[0],  # not one of ours: dropped
            encode_lse(7000, 0, 0, 1) + inner[0],  # its TTL runs out here
        ]
        want = [[], [lab.copy_frame(1, push([7005]) + inner[1])], [lab.copy_frame(2, inner[0])]]
        got = dut.run(packets)
        check_payloads(got, want)
        c = dut.counters()
        assert (c["bypass.passed"], c["dropped-unknown-bift-id"], c["dropped-ttl"]) == (2, 1, 1)
        assert c["rx.packets"] == len(packets)
        if mode == "ebpf":  # ours, popped by the Python dataplane; the stranger's label dropped in the kernel
            assert c["ebpf.punted"] == len(packets) - 1
    finally:
        dut.close()


@pytest.mark.parametrize("mode", ["ebpf", "python"])
@pytest.mark.parametrize("lab", [3], indirect=True)
def test_copies_into_a_port_that_is_down_are_counted_for_its_neighbour(
    lab: NetLab, bier_obj: Path, mode: str
) -> None:
    """B's port to C is down and no bypass is on: the copies B could not send are C's errors
    (tx.nbr.C.errors, if.<port>.tx_errors), which lets a run tell a dead port's loss (the fault's) from a
    loss of our software elsewhere (orchestrator/experiment/fidelity.py fault_port_losses)."""
    from orchestrator.lab.netns import parse_net_dev
    from tests.dataplane.netlab import sh

    dut, tables = _dut(lab, bier_obj, mode)
    try:
        packets = _packets()
        to_c = sum(
            nbr == "C" for pkt in packets for nbr, _copy in build_copies(pkt, forward_packet(pkt, tables))
        )
        sh("ip", "-n", lab.dut, "link", "set", lab.dut_if[NAMES.index("C")], "down")
        got = dut.run(packets)
        c = dut.counters()
        assert got[NAMES.index("C")] == []
        # the eBPF program hands a packet's last copy to the kernel with no answer (TC_ACT_REDIRECT): the
        # down port drops it there, in the interface's tx drops, which a run reads per port too
        unseen = c["tx.nbr.C.packets"] if mode == "ebpf" else 0
        assert c["tx.nbr.C.errors"] + unseen == to_c > 0 and c["tx.nbr.C.errors"] > 0
        assert c[f"if.{lab.dut_if[NAMES.index('C')]}.tx_errors"] == c["tx.nbr.C.errors"]
        assert c["tx.nbr.A.errors"] == c["tx.nbr.E.errors"] == 0
        # the port's own count: on eBPF every copy sent into it (the refused ones too), on Python none
        # (the socket refused them before they reached it)
        port = parse_net_dev(sh("ip", "netns", "exec", lab.dut, "cat", "/proc/net/dev"))[lab.dut_if[1]]
        assert port["tx_drop"] == (to_c if mode == "ebpf" else 0)
    finally:
        dut.close()
