"""The reliable transport over real sockets: BierDataplanes on 127.0.x.y:6635 forward the DATA, and a
ReliableEndpoint per node (the agent's sockets, on the same address, port 4795) carries feedback hop
by hop, with the dataplane's ``on_forward`` feeding each BFR's aggregator as in the agent.

Topology (test_bier_dataplane's): A(1) -- B -- C(3) -- E(5), B -- D(4) -- E.  A is the BFIR; C is a
BFER that also forwards to E, so it aggregates its own ACKs with E's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from aidcnet.agent.reliable.node import ReliableSettings
from aidcnet.agent.reliable.service import ReliableEndpoint
from aidcnet.bier.bitstring import bfr_id_to_si_bit
from aidcnet.bier.header import BierProto
from aidcnet.ipv4 import build_udp, parse_udp
from aidcnet.reliable.aggregator import AggregatorConfig
from aidcnet.reliable.header import RELIABLE_UDP_PORT
from aidcnet.reliable.receiver import ReceiverConfig
from tests.unit.aidcnet.agent.bier.test_dataplane import EDGES, IDS, Lab, make_lab

RECEIVERS = [3, 4, 5]
AGGREGATOR = AggregatorConfig(partial_after=0.5, lifetime=5.0)
# The transport's clock advances this much per turn of :meth:`Net.run`, whatever the wall clock did: one
# thread turns every node, and a busy CI machine held it for over 0.5 s (the RTO floor) once, so a timer
# fired with nothing lost. On the turns' clock a timer fires only when the transport takes too many turns.
TURN_S = 0.0005


class TurnClock:
    """The endpoints' wall clock: seconds of turns of the loop that drives them."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Net:
    def __init__(
        self, lab: Lab, feedback: str, eps: dict[str, ReliableEndpoint], see_data: bool, clock: TurnClock
    ) -> None:
        self.lab = lab
        self.eps = eps
        self.clock = clock
        self.got: dict[str, list[bytes]] = {n: [] for n in eps}
        settings = ReliableSettings(
            feedback=feedback,
            isn=0xFFFF_FFFA,
            window=8,
            # Generous timers: on loopback nothing is lost, so no timer should ever have to fire (1,000
            # turns of the loop); one that does shows as a retransmission the test refuses.
            initial_rto=0.5,
            min_rto=0.5,
            max_rto=2.0,
            receiver=ReceiverConfig(ack_delay=0.001, nack_interval=0.01, nack_max_interval=0.1),
        )
        for name, ep in eps.items():
            dp = lab.dps[name]
            node = ep.node
            if name in IDS:
                node.configure(settings, IDS[name])
                node.deliver = lambda p, _src, name=name: self.got[name].append(p)
            dp.deliver = lambda p, _b, _pr, _h, node=node, ep=ep: node.on_bier_delivery(
                parse_udp(p), ep.clock()
            )
            if see_data:
                dp.on_forward = lambda src, inner, down, node=node, ep=ep: node.on_forward(
                    inner, src, down, ep.clock()
                )
        a = lab.dps["A"]
        src = lab.addrs["A"]
        eps["A"].node.impose = lambda wire, ids, entropy, sport: a.impose(
            build_udp(src, "232.1.0.1", sport, RELIABLE_UDP_PORT, wire), ids, BierProto.IPV4, entropy
        )

    def run(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.eps["A"].node.sending_done:
            assert time.monotonic() < deadline, "the flow did not complete"
            busy = 0
            for dp in self.lab.dps.values():
                busy += dp.poll_once()
            for ep in self.eps.values():
                ep._drain()
                ep.node.poll(ep.clock())
            if not busy:
                time.sleep(TURN_S)
            self.clock.now += TURN_S


def toward(lab: Lab, node: str) -> Callable[[int], str | None]:
    dp = lab.dps[node]

    def hop(bfr_id: int) -> str | None:
        si, bit = bfr_id_to_si_bit(bfr_id, dp.bsl)
        alts = dp.bifts[si].entries[bit]
        return lab.addrs[alts[0][1]] if alts else None

    return hop


@pytest.fixture
def lab() -> Iterator[Lab]:
    lab = make_lab(EDGES, IDS)
    yield lab
    lab.close()


def endpoints(lab: Lab, wall: Callable[[], float]) -> dict[str, ReliableEndpoint]:
    eps: dict[str, ReliableEndpoint] = {}
    try:
        for name, addr in lab.addrs.items():
            if name in lab.dps:
                eps[name] = ReliableEndpoint(
                    IDS.get(name), toward(lab, name), source=addr, bind=addr, aggregator=AGGREGATOR, wall=wall
                )
    except BaseException:
        for ep in eps.values():
            ep.close()
        raise
    return eps


@pytest.mark.parametrize("feedback", ["hop", "e2e"])
@pytest.mark.parametrize("see_data", [True, False], ids=["python-dp", "no-data-at-bfrs"])
def test_reliable_flow_over_bier_dataplanes(lab: Lab, feedback: str, see_data: bool) -> None:
    clock = TurnClock()
    eps = endpoints(lab, clock)
    try:
        net = Net(lab, feedback, eps, see_data, clock)
        sent = [b"m%03d" % i + bytes(500) for i in range(60)]
        before = time.time_ns()
        eps["A"].node.open_bier_flow(21, RECEIVERS, sent, eps["A"].clock())
        net.run()
        # What A heard last came with the kernel's receive stamp (what a delivery it causes is timed by).
        assert before < eps["A"].node.rx_stamp_ns <= time.time_ns()
        for name in ("C", "D", "E"):
            assert net.got[name] == sent, name
        assert net.got["A"] == [] and net.got["B"] == []
        a = eps["A"].node.totals()
        n = len(sent)
        assert a["sender.sent"] == n and a.get("sender.retransmitted", 0) == 0
        for name in ("C", "D", "E"):
            assert eps[name].node.totals().get("receiver.duplicates", 0) == 0
        if feedback == "e2e" or not see_data:
            # Every receiver's ACK of every sequence reaches A (relayed by the BFRs when hop).
            assert a.get("source.rx.ack.packets", 0) == len(RECEIVERS) * n
            assert a.get("source.rx.agg-ack.packets", 0) == 0
        else:
            # A's one first-hop branch (B): at most one AGG-ACK per sequence (fewer when windows that
            # complete together are coalesced), and no raw ACK.
            assert a.get("source.rx.ack.packets", 0) == 0
            assert 0 < a["source.rx.agg-ack.packets"] <= n
            assert a.get("source.rx.agg-ack-partial.packets", 0) == 0
            c = eps["C"].node.totals()
            assert c["tx.own-ack"] > 0 and c["agg.agg-sent"] > 0, "C aggregates its own ACK with E's"
            assert c.get("tx.ack", 0) == 0 and c.get("agg.passed-no-entry", 0) == 0
        b = eps["B"].node.totals()
        if feedback == "e2e":
            assert not any(k.startswith("agg.rx.") for k in b)
        elif not see_data:
            assert b["agg.passed-no-entry"] == b["agg.rx.ack"] > 0
    finally:
        for ep in eps.values():
            ep.close()
