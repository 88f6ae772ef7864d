"""The reliable transport's feedback behind the eBPF BFR (docs/reliability.md, "In the lab").

BFR-B of RFC 8279 Figure 1 runs the tc program on its veths, as in test_bier_ebpf.py, and the agent's
ReliableEndpoint listens on UDP 4795 in its netns.  Feedback is unicast UDP to port 4795 addressed to
the BFR: the program must pass it up the stack untouched (it only takes port 6635), so the endpoint
receives every ACK and, holding no aggregation entry, relays it toward the BFIR.  And the limit: a
reliable DATA the program forwards in the kernel never reaches the agent, so no entry is made.

Needs root, clang, bpftool and tc (make setup); run with AIDCLAB_NETNS_PREFIX=<yours>- on a shared machine.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aidcnet.agent.bier.ebpf import unpin
from aidcnet.agent.reliable.node import E2E_SPORT
from aidcnet.agent.reliable.service import ReliableEndpoint
from aidcnet.bier.bift import build_bifts
from aidcnet.bier.header import BierHeader
from aidcnet.bier.routing import compute_birts, undirected
from aidcnet.ipv4 import build_udp
from aidcnet.reliable.header import RELIABLE_UDP_PORT, Ack, Data
from tests.dataplane.netlab import NetLab, in_netns
from tests.dataplane.test_bier_ebpf import PIN, Dut
from tests.unit.aidcnet.bier.test_bier_forwarding import FIG1_EDGES, FIG1_IDS

NAMES = ["A", "C", "E"]
N = 50


@pytest.fixture(autouse=True)
def _unpin() -> Iterator[None]:
    yield
    unpin(PIN)


def wait_for(ep: ReliableEndpoint, key: str, n: int, timeout: float = 3.0) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while True:
        ep._drain()
        got = ep.node.totals()
        if got.get(key, 0) >= n or time.monotonic() > deadline:
            return got
        time.sleep(0.01)


@contextlib.contextmanager
def bfr_b(lab: NetLab, bier_obj: Path) -> Iterator[tuple[Dut, ReliableEndpoint]]:
    """BFR-B of RFC 8279 Figure 1 on the eBPF dataplane, and its agent's reliable endpoint; feedback it
    cannot aggregate goes toward the BFIR: neighbour A (index 0) here."""
    birt = compute_birts(undirected(FIG1_EDGES), FIG1_IDS)["B"]
    bifts = build_bifts(birt, 64, {n: {(0, 64, 0): 1000 + 100 * i} for i, n in enumerate(NAMES)})
    dut = Dut(lab, None, 64, bifts, NAMES, {(0, 64, 0): 500})
    ep = None
    try:
        dut.start_ebpf(bier_obj)
        with in_netns(lab.dut):
            ep = ReliableEndpoint(None, lambda _bfir: lab.nbr_addr[0])
        yield dut, ep
    finally:
        if ep is not None:
            ep.close()
        dut.close()


@pytest.mark.parametrize("lab", [3], indirect=True)
def test_feedback_to_port_4795_passes_the_program_and_reaches_the_agent(lab: NetLab, bier_obj: Path) -> None:
    with bfr_b(lab, bier_obj) as (dut, ep):
        before = dut.counters()
        acks = [
            Ack(bfir_id=4, flow_id=7, cum=s + 1, reporter=FIG1_IDS["D"], highest=s + 1, ranges=()).encode()
            for s in range(N)
        ]
        lab.send([lab.frame_in(a, dport=RELIABLE_UDP_PORT, sport=RELIABLE_UDP_PORT) for a in acks])
        got = wait_for(ep, "agg.rx.ack", N)
        assert got.get("agg.rx.ack") == N, got
        assert got.get("agg.passed-no-entry") == N and got.get("agg.tx.ack") == N
        after = dut.counters()
        assert after.get("rx.packets", 0) == before.get("rx.packets", 0), "the program took UDP 4795"

        # A reliable DATA inside BIER, from a BFIR asking for hop-by-hop feedback: the program forwards
        # it in the kernel (copies go out), the agent never hears of it.
        inner = build_udp("10.255.0.4", "232.1.0.1", RELIABLE_UDP_PORT, RELIABLE_UDP_PORT,
                          Data(bfir_id=4, flow_id=8, seq=0, payload=b"x" * 64).encode())  # fmt: skip
        pkt = BierHeader(bift_id=500, bitstring=0b0101, bsl=64, ttl=9, entropy=1, bfir_id=4).encode() + inner
        copies = dut.run([pkt])
        assert sum(len(c) for c in copies) == 2  # to C (for D) and to E (RFC 8279 §6.6, example 1)
        ep._drain()
        assert ep.node.totals().get("agg.entries-made", 0) == 0


def reliable_data(
    seq: int, sport: int, fin: bool = False, bits: int = 0b0101, dport: int = RELIABLE_UDP_PORT
) -> bytes:
    """A reliable DATA of flow (BFIR 4, Flow ID 9) in BIER to the DUT's BIFT 500, from BFIR 4's loopback."""
    data = Data(bfir_id=4, flow_id=9, seq=seq, payload=b"p" * 500, fin=fin).encode()
    inner = build_udp("10.255.0.4", "232.1.0.1", sport, dport, data)
    head = BierHeader(bift_id=500, bitstring=bits, bsl=64, ttl=9, entropy=1, bfir_id=4)
    return head.encode() + inner


@pytest.mark.parametrize("lab", [3], indirect=True)
def test_the_program_reports_the_reliable_data_it_forwards_and_the_agent_aggregates_their_acks(
    lab: NetLab, bier_obj: Path
) -> None:
    """DATA stays in the kernel: the program forwards it and writes a report to its ring buffer (where it
    came from, the BFERs it went to, its first octets); the agent's aggregator makes its windows from the
    reports, and the BFERs' ACKs then leave as one AGG-ACK toward the BFIR, as behind the Python
    dataplane. DATA whose feedback goes end to end is reported and left alone; other UDP is not reported."""
    with bfr_b(lab, bier_obj) as (dut, ep):
        assert dut.ebpf is not None
        reports = []
        dut.ebpf.report(RELIABLE_UDP_PORT, reports.append)
        hop = [reliable_data(s, RELIABLE_UDP_PORT, fin=s == 3) for s in range(4)]
        e2e = reliable_data(7, E2E_SPORT)
        other = reliable_data(8, RELIABLE_UDP_PORT, dport=RELIABLE_UDP_PORT + 10)
        copies = dut.run([*hop, e2e, other])
        assert sum(len(c) for c in copies) == 2 * 6  # every packet forwarded in the kernel, to C and E
        dut.ebpf.poll_reports()
        assert len(reports) == 5 and dut.counters()["ebpf.reported"] == 5
        assert {(r.src, r.downstream, r.imposed) for r in reports} == {(lab.nbr_addr[0], 0b0101, False)}
        for r in reports:
            ep.node.on_report(r.head, r.src, r.downstream, r.imposed, ep.clock())
        totals = ep.node.totals()
        assert totals["report.forwarded"] == totals["agg.entries-made"] == 4  # not the e2e DATA
        acks = [
            Ack(bfir_id=4, flow_id=9, cum=4, reporter=bfer, highest=4).encode()
            for bfer in (1, 3)  # the BitString's two BFERs
        ]
        lab.send([lab.frame_in(a, dport=RELIABLE_UDP_PORT, sport=RELIABLE_UDP_PORT) for a in acks])
        got = wait_for(ep, "agg.tx.agg-ack", 1)
        assert got.get("agg.absorbed") == 2 and got.get("agg.tx.agg-ack") == 1, got
        assert got.get("agg.tx.ack", 0) == 0 and got.get("agg.passed-no-entry", 0) == 0
