"""ReliableNode, the agent's reliable transport, wired in memory over a small leaf-spine.

Hosts S (BFR-id 1, the BFIR) and R4 (4) hang off leaf L1, R2 (2) and R3 (3) off leaf L2; the leaves
meet at spine X.  BIER forwarding is the project's (:func:`aidcnet.bier.forwarding.forward` on BIFTs
from :mod:`aidcnet.bier.routing`); every packet, DATA and feedback, crosses each link as octets after
``DELAY`` and is dropped with probability ``loss`` from one seeded RNG.  Unicast datagrams go straight
to the node owning the address (the kernel's routing is not under test), crossing the same number of
links as the BIER path would (one drop chance per link).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aidcnet.agent.reliable.node import (
    OP_MASK,
    RUN_SHIFT,
    ReliableNode,
    ReliableSettings,
    replay_flow_id,
)
from aidcnet.bier.forwarding import impose
from aidcnet.ipv4 import UdpDatagram, build_udp, parse_udp
from aidcnet.reliable.aggregator import AggregatorConfig
from aidcnet.reliable.header import RELIABLE_UDP_PORT, Ack, AggAck, Data
from aidcnet.reliable.receiver import ReceiverConfig
from aidcnet.reliable.sender import id_mask
from tests.unit.aidcnet.agent.reliable.fabric import TTL, EventFabric

EDGES = [("S", "L1"), ("R4", "L1"), ("R2", "L2"), ("R3", "L2"), ("L1", "X"), ("L2", "X")]
IDS = {"S": 1, "R2": 2, "R3": 3, "R4": 4}
HOSTS = list(IDS)
BFRS = ["L1", "L2", "X"]
ADDR = {n: f"10.0.0.{i}" for i, n in enumerate([*HOSTS, *BFRS], 1)}
NAME = {a: n for n, a in ADDR.items()}
# Links a routed unicast datagram crosses between two hosts (host-leaf[-spine-leaf]-host).
LEAF = {"S": "L1", "R4": "L1", "R2": "L2", "R3": "L2"}


def fast_settings(feedback: str, **kw: object) -> ReliableSettings:
    return ReliableSettings(
        feedback=feedback,
        isn=0xFFFF_FFF0,  # every run crosses the 2**32 wrap
        window=16,
        fail_after=5.0,
        initial_rto=0.004,
        min_rto=0.002,
        max_rto=0.2,
        receiver=ReceiverConfig(ack_delay=0.0005, nack_interval=0.001, nack_max_interval=0.032),
        **kw,  # type: ignore[arg-type]
    )


REPORT_EVERY = 2  # AGG-ACKs a BFR sends: one per two windows, as the lab's BFRs do


class Fabric(EventFabric):
    def __init__(self, feedback: str, loss: float = 0.0, seed: int = 1, bfrs_see_data: bool = True) -> None:
        super().__init__(EDGES, IDS, ADDR, loss, seed)
        self.bfrs_see_data = bfrs_see_data
        self.delivered: dict[str, list[bytes]] = {h: [] for h in HOSTS}
        for name in [*HOSTS, *BFRS]:
            host = name in IDS
            node = ReliableNode(
                IDS.get(name),
                send=lambda msg, addr, name=name: self.udp(name, addr, msg),
                toward=lambda bfr_id, name=name: self.toward(name, bfr_id),
                impose=(lambda wire, ids, _e, sport, name=name: self.impose(name, wire, ids, sport))
                if host
                else None,
                deliver=(lambda p, _src, name=name: self.delivered[name].append(p)) if host else None,
                aggregator=AggregatorConfig(partial_after=0.004, lifetime=1.0, report_every=REPORT_EVERY),
            )
            if name in IDS:
                node.configure(fast_settings(feedback), IDS[name])
            self.nodes[name] = node

    @property
    def link_drops(self) -> int:
        return self.dropped["bier"]

    # -- the network --------------------------------------------------------------------------------
    def udp(self, frm: str, addr: str, msg: bytes) -> None:
        to = NAME[addr]
        hops = 1
        if frm in LEAF and to in LEAF:  # routed host to host
            hops = 2 if LEAF[frm] == LEAF[to] else 4
        elif frm in LEAF or to in LEAF:
            host, other = (frm, to) if frm in LEAF else (to, frm)
            hops = 1 if LEAF[host] == other else 2
        self._link(frm, to, ("udp", msg), hops)

    def impose(self, node: str, wire: bytes, ids: list[int], sport: int) -> None:
        inner = build_udp(ADDR[node], "232.1.0.1", sport, RELIABLE_UDP_PORT, wire)
        for nbr, bits, _ in impose(self.bift[node], id_mask(ids), TTL).copies:
            self._link(node, nbr, ("bier", inner, bits))

    def arrive(self, node: str, frm: str, kind: str, rest: list) -> None:
        if kind == "bier":
            self._on_bier(node, frm, *rest)
        else:
            self.nodes[node].on_datagram(rest[0], ADDR[frm], self.now)

    def _on_bier(self, node: str, frm: str, inner: bytes, bits: int) -> None:
        down, local = self.replicate(node, inner, bits)
        if node in BFRS and self.bfrs_see_data:
            self.nodes[node].on_forward(inner, ADDR[frm], down, self.now)
        if local:
            d = parse_udp(inner)
            assert self.nodes[node].on_bier_delivery(d, self.now)


def payloads(n: int) -> list[bytes]:
    return [b"msg-%d-" % i + bytes(200) for i in range(n)]


def check_exactly_once(fab: Fabric, receivers: list[str], sent: list[bytes]) -> None:
    for r in receivers:
        assert fab.delivered[r] == sent, f"{r} got {len(fab.delivered[r])} of {len(sent)}, or out of order"
    for other in set(HOSTS) - set(receivers):
        assert fab.delivered[other] == []


def test_aggregated_acks_reach_the_source_once_per_branch() -> None:
    fab = Fabric("hop")
    sent = payloads(40)
    fab.nodes["S"].open_bier_flow(7, [2, 3, 4], sent, 0.0)
    fab.run()
    check_exactly_once(fab, ["R2", "R3", "R4"], sent)
    s = fab.counters("S")
    # S has one first-hop branch (L1): one AGG-ACK per REPORT_EVERY sequences, no receiver's own ACK.
    assert s["source.rx.ack.packets"] == 0
    assert s["source.rx.agg-ack.packets"] == len(sent) // REPORT_EVERY
    assert s["sender.retransmitted"] == 0 and s["sender.flows-done"] == 1
    for bfr in BFRS:
        c = fab.counters(bfr)
        assert c["agg.absorbed"] > 0 and c["agg.passed-no-entry"] == 0, (bfr, c)
        assert c["agg.entries"] == 0, "every entry freed by its AGG-ACK"
    # L2 absorbs R2's and R3's ACKs and sends one AGG-ACK per REPORT_EVERY sequences to X.
    assert fab.counters("L2")["agg.agg-sent"] == len(sent) // REPORT_EVERY


def test_end_to_end_acks_are_the_implosion() -> None:
    fab = Fabric("e2e")
    sent = payloads(40)
    fab.nodes["S"].open_bier_flow(7, [2, 3, 4], sent, 0.0)
    fab.run()
    check_exactly_once(fab, ["R2", "R3", "R4"], sent)
    s = fab.counters("S")
    assert s["source.rx.ack.packets"] == 3 * len(sent)
    assert s["source.rx.agg-ack.packets"] == 0
    for bfr in BFRS:
        c = fab.counters(bfr)
        assert not any(k.startswith("agg.rx.") for k in c), "feedback went past the BFRs"
        assert c["agg.entries-made"] == 0, "a BFR kept state for DATA whose feedback will not pass it"


def test_bfr_without_data_relays_feedback_end_to_end() -> None:
    """The eBPF fast path forwards DATA in the kernel: the BFR agent only sees feedback."""
    fab = Fabric("hop", bfrs_see_data=False)
    sent = payloads(20)
    fab.nodes["S"].open_bier_flow(9, [2, 3, 4], sent, 0.0)
    fab.run()
    check_exactly_once(fab, ["R2", "R3", "R4"], sent)
    assert fab.counters("S")["source.rx.ack.packets"] == 3 * len(sent)
    assert fab.counters("L2")["agg.passed-no-entry"] == 2 * len(sent)
    assert fab.counters("X")["agg.tx.ack"] == 2 * len(sent)


def test_unicast_flows_per_receiver() -> None:
    fab = Fabric("e2e")
    sent = payloads(30)
    fab.nodes["S"].open_unicast_flows(3, {2: ADDR["R2"], 4: ADDR["R4"]}, sent, 0.0)
    fab.run()
    check_exactly_once(fab, ["R2", "R4"], sent)
    s = fab.counters("S")
    assert s["sender.flows"] == 2 and s["sender.flows-done"] == 2
    assert s["source.rx.ack.packets"] == 2 * len(sent)
    assert s["sender.sent"] == 2 * len(sent)


@pytest.mark.parametrize("feedback", ["hop", "e2e"])
def test_lossy_fabric_delivers_everything_exactly_once(feedback: str) -> None:
    fab = Fabric(feedback, loss=0.05, seed=3)
    sent = payloads(150)
    fab.nodes["S"].open_bier_flow(11, [2, 3, 4], sent, 0.0)
    fab.run()
    check_exactly_once(fab, ["R2", "R3", "R4"], sent)
    s = fab.counters("S")
    assert fab.link_drops > 0 and s["sender.retransmitted"] > 0
    assert s["sender.receivers-failed"] == 0
    feedback_at_source = sum(v for k, v in s.items() if k.startswith("source.rx.") and k.endswith(".packets"))
    print(
        f"{feedback} at 5%: feedback at source per packet {feedback_at_source / len(sent):.2f}, "
        f"retransmitted {s['sender.retransmitted-bytes']} B, dropped DATA copies {fab.link_drops}, "
        f"done {fab.now * 1e3:.1f} ms"
    )


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), loss=st.sampled_from([0.01, 0.05]), n=st.integers(1, 40))
def test_any_seed_delivers_exactly_once(seed: int, loss: float, n: int) -> None:
    fab = Fabric("hop", loss=loss, seed=seed)
    sent = payloads(n)
    fab.nodes["S"].open_bier_flow(5, [2, 3, 4], sent, 0.0)
    fab.nodes["R3"].open_unicast_flows(6, {1: ADDR["S"]}, sent, 0.0)
    fab.run()
    for host in HOSTS:
        assert fab.delivered[host] == sent, host


def test_malformed_and_foreign_datagrams_are_counted() -> None:
    fab = Fabric("hop")
    r2 = fab.nodes["R2"]
    r2.on_datagram(b"\x00" * 20, ADDR["L2"], 0.0)
    r2.on_datagram(b"\x15", ADDR["L2"], 0.0)
    other = UdpDatagram(ADDR["S"], "232.1.0.1", 1, 4791, 64, b"x")
    assert not r2.on_bier_delivery(other, 0.0)
    c = fab.counters("R2")
    assert c["rx.malformed.bad-version"] == 1 and c["rx.malformed.truncated"] == 1
    # A BFR ignores a forwarded payload that is not ours (another port, not IPv4/UDP).
    fab.nodes["L1"].on_forward(b"junk", ADDR["S"], 0b10, 0.0)
    fab.nodes["L1"].on_forward(build_udp(ADDR["S"], "232.1.0.1", 1, 4791, b"x"), ADDR["S"], 0b10, 0.0)
    assert fab.counters("L1")["agg.entries-made"] == 0


def test_feedback_for_an_unknown_flow_is_counted_not_applied() -> None:
    fab = Fabric("hop")
    s = fab.nodes["S"]
    ack = Ack(bfir_id=1, flow_id=99, cum=0, reporter=2, highest=0, ranges=())
    s.on_datagram(ack.encode(), ADDR["L1"], 0.0)
    agg = AggAck(bfir_id=1, flow_id=99, cum=0, reporter=0, bsl=64, si=0, acked=0b10)
    s.on_datagram(agg.encode(), ADDR["L1"], 0.0)
    assert fab.counters("S")["source.rx.unknown-flow"] == 2


def test_data_to_a_host_not_in_a_run_is_counted() -> None:
    fab = Fabric("hop")
    node = ReliableNode(None, send=lambda m, a: None, toward=lambda b: None)
    data = Data(bfir_id=1, flow_id=1, seq=0, payload=b"x")
    node.on_datagram(data.encode(), ADDR["S"], 0.0)
    assert node.totals()["rx.data-not-receiving"] == 1
    del fab


@pytest.mark.parametrize("feedback", ["hop", "e2e"])
def test_a_run_ignores_what_the_last_run_left_in_flight(feedback: str) -> None:
    """Two runs of one op (same op id, same ISN): the second starts while the first's DATA and ACKs are
    still on the links. Its receivers deliver only the second run's payloads, and its source hears only
    the second run's feedback."""
    fab = Fabric(feedback, loss=0.2, seed=3)
    for name in IDS:
        fab.nodes[name].configure(fast_settings(feedback, run=1), IDS[name])
    fab.nodes["S"].open_bier_flow(replay_flow_id(1, 7), [2, 3, 4], payloads(40), 0.0)
    fab.run(until=0.0001)
    assert fab.events, "the first run's first DATA must still be on the links"
    for name in IDS:
        fab.nodes[name].configure(fast_settings(feedback, run=2), IDS[name])
    fab.delivered = {h: [] for h in HOSTS}
    second = [b"second-%d-" % i + bytes(100) for i in range(40)]
    fab.nodes["S"].open_bier_flow(replay_flow_id(2, 7), [2, 3, 4], second, fab.now)
    fab.run()
    check_exactly_once(fab, ["R2", "R3", "R4"], second)
    stale = sum(fab.counters(n)["rx.other-run"] for n in IDS)
    assert stale > 0


def test_replay_flow_ids_hold_the_run_above_the_op() -> None:
    assert replay_flow_id(0, 7) == 7 and replay_flow_id(255, 0xFF_FFFF) == 0xFFFF_FFFF
    assert replay_flow_id(3, 7) >> RUN_SHIFT == 3 and replay_flow_id(3, 7) & OP_MASK == 7
    with pytest.raises(ValueError, match="24 bits"):
        replay_flow_id(0, 1 << 24)
    with pytest.raises(ValueError, match="run number"):
        ReliableSettings.from_request({"run": 256})


def test_settings_from_request() -> None:
    s = ReliableSettings.from_request({"feedback": "e2e", "isn": 5, "window": "8", "nack_interval": 0.01})
    assert (s.feedback, s.isn, s.window, s.receiver.nack_interval) == ("e2e", 5, 8, 0.01)
    with pytest.raises(ValueError, match="unknown field"):
        ReliableSettings.from_request({"windoe": 8})
    with pytest.raises(ValueError, match="feedback"):
        ReliableSettings.from_request({"feedback": "sometimes"})
    with pytest.raises(ValueError, match="isn"):
        ReliableSettings.from_request({"isn": 1 << 32})
    with pytest.raises(ValueError, match="RTO bounds"):
        ReliableSettings.from_request({"min_rto": 1.0, "max_rto": 0.5})
    cwnd = ReliableSettings.from_request({"window": 16, "initial_cwnd": "4"}).sender_config()
    assert (cwnd.window, cwnd.initial_cwnd) == (16, 4)
    assert ReliableSettings.from_request({"initial_cwnd": None}).sender_config().initial_cwnd is None
    with pytest.raises(ValueError, match="initial_cwnd"):
        ReliableSettings.from_request({"window": 8, "initial_cwnd": 9})
    budget = ReliableSettings.from_request({"inflight_bytes": "250000", "nack_gather": "0.1"})
    assert budget.inflight_bytes == 250_000 and budget.sender_config().nack_gather == 0.1
    with pytest.raises(ValueError, match="send budget"):
        ReliableSettings.from_request({"inflight_bytes": 0})
    with pytest.raises(ValueError, match="nack_gather"):
        ReliableSettings.from_request({"nack_gather": 1.5})


def test_the_flows_of_a_host_share_one_send_budget() -> None:
    """Two flows of one source with a budget of three messages: never more than three in flight at once,
    every message delivered exactly once, the budget all given back."""
    fab = Fabric("hop")
    size = len(payloads(1)[0])
    fab.nodes["S"].configure(fast_settings("hop", inflight_bytes=3 * size), IDS["S"])
    source = fab.nodes["S"]
    budget = source.budget
    assert budget is not None
    peak: list[int] = []
    take = budget.take
    budget.take = lambda n: (take(n), peak.append(budget.used))  # type: ignore[method-assign]
    source.open_bier_flow(7, [4], payloads(20), 0.0)
    source.open_bier_flow(8, [2, 3], payloads(20), 0.0)
    fab.run()
    for receiver in ("R2", "R3", "R4"):
        assert fab.delivered[receiver] == payloads(20), receiver
    assert len(peak) == 40 and max(peak) == 3 * size
    assert budget.used == 0 and source.sending_done
