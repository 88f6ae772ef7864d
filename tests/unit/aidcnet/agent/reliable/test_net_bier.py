"""The reliable transport over network-BIER (``reliable-net-bier``), ReliableNodes wired in memory.

Hosts S (BFR-id 1, the source) and R4 (4) hang off leaf L1 (5), R2 (2) and R3 (3) off leaf L2 (6); the
leaves meet at spine X (7). The hosts speak IP multicast: S sends DATA to group G, its leaf L1 imposes
BIER for the BFER leaves {L1, L2} (:meth:`ReliableNode.on_impose` may narrow a retransmission), the BFER
leaves emit it to their member hosts (:meth:`ReliableNode.on_emit`), which acknowledge to their leaf.
BIER forwarding is the project's; every packet crosses each link after ``DELAY`` and is dropped with
probability ``loss`` from one seeded RNG; unicast crosses as many links as the shortest path.
"""

from __future__ import annotations

from collections import Counter, deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aidcnet.agent.reliable.node import NET_SPORT, ReliableNode
from aidcnet.bier.forwarding import impose
from aidcnet.ipv4 import build_udp
from aidcnet.reliable.aggregator import AggregatorConfig
from aidcnet.reliable.header import RELIABLE_UDP_PORT, Ack, AggAck, AggNack, decode
from aidcnet.reliable.sender import id_mask, mask_ids
from tests.unit.aidcnet.agent.reliable.fabric import TTL, EventFabric
from tests.unit.aidcnet.agent.reliable.test_node import fast_settings, payloads

GROUP = "239.100.0.1"
EDGES = [("S", "L1"), ("R4", "L1"), ("R2", "L2"), ("R3", "L2"), ("L1", "X"), ("L2", "X")]
IDS = {"S": 1, "R2": 2, "R3": 3, "R4": 4, "L1": 5, "L2": 6, "X": 7}
HOSTS = ["S", "R2", "R3", "R4"]
RECEIVERS = ["R2", "R3", "R4"]
LEAF = {"S": "L1", "R4": "L1", "R2": "L2", "R3": "L2"}
BFERS = (IDS["L1"], IDS["L2"])
ADDR = {n: f"10.0.0.{i}" for n, i in IDS.items()}
NAME = {a: n for n, a in ADDR.items()}


class NetFabric(EventFabric):
    def __init__(self, loss: float = 0.0, seed: int = 1) -> None:
        super().__init__(EDGES, IDS, ADDR, loss, seed)
        self.delivered: dict[str, list[bytes]] = {h: [] for h in HOSTS}
        self.data_to: Counter[str] = Counter()  # DATA copies that reached each host
        self.at_source: Counter[str] = Counter()
        for name in IDS:
            node = ReliableNode(
                IDS[name],
                send=lambda msg, addr, name=name: self.udp(name, addr, msg),
                toward=lambda bfr_id, name=name: self.toward(name, bfr_id),
                deliver=(lambda p, _src, n=name: self.delivered[n].append(p)) if name in HOSTS else None,
                aggregator=AggregatorConfig(partial_after=0.004, lifetime=1.0),
                multicast=(lambda wire, group, n=name: self.mcast(n, wire, group)) if name == "S" else None,
            )
            if name in HOSTS:
                node.configure(fast_settings("net"), IDS[name])
            self.nodes[name] = node

    def hops(self, frm: str, to: str) -> int:
        seen, todo = {frm: 0}, deque([frm])
        while todo:
            n = todo.popleft()
            for m in self.adj[n]:
                if m not in seen:
                    seen[m] = seen[n] + 1
                    todo.append(m)
        return seen[to]

    def udp(self, frm: str, addr: str, msg: bytes) -> None:
        to = NAME[addr]
        self._link(frm, to, ("udp", msg), self.hops(frm, to))

    def mcast(self, host: str, wire: bytes, group: str) -> None:
        assert group == GROUP
        self._link(host, LEAF[host], ("mcast-in", wire))

    def _ingress(self, leaf: str, src: str, wire: bytes) -> None:
        inner = build_udp(ADDR[src], GROUP, NET_SPORT, RELIABLE_UDP_PORT, wire)
        bfers = self.nodes[leaf].on_impose(inner, BFERS, ADDR[src], self.now)
        res = impose(self.bift[leaf], id_mask(bfers), TTL)
        for nbr, bits, _ in res.copies:
            self._link(leaf, nbr, ("bier", inner, bits))
        if res.local:
            self._emit(leaf, inner, wire, ingress=src)

    def _emit(self, leaf: str, inner: bytes, wire: bytes, ingress: str | None = None) -> None:
        members = [h for h in RECEIVERS if LEAF[h] == leaf and h != ingress]
        self.nodes[leaf].on_emit(inner, id_mask(IDS[h] for h in members), self.now)
        for h in members:
            self._link(leaf, h, ("mcast-out", wire))

    def _on_bier(self, node: str, frm: str, inner: bytes, bits: int) -> None:
        down, local = self.replicate(node, inner, bits)
        self.nodes[node].on_forward(inner, ADDR[frm], down, self.now)
        if local:
            self._emit(node, inner, inner[28:])

    def arrive(self, node: str, frm: str, kind: str, rest: list) -> None:
        if kind == "bier":
            self._on_bier(node, frm, *rest)
        elif kind == "mcast-in":
            self._ingress(node, frm, rest[0])
        elif kind == "mcast-out":
            self.data_to[node] += 1
            self.nodes[node].on_datagram(rest[0], ADDR["S"], self.now, NET_SPORT)
        else:
            if node == "S":
                msg = decode(rest[0])
                if isinstance(msg, AggNack):
                    kind = "agg-nack"
                else:
                    kind = "agg-ack" if isinstance(msg, AggAck) else "nack" if msg.nack else "ack"
                self.at_source[kind] += 1
            self.nodes[node].on_datagram(rest[0], ADDR[frm], self.now)


def open_flow(fab: NetFabric, n: int) -> list[bytes]:
    sent = payloads(n)
    fab.nodes["S"].open_net_flow(7, list(BFERS), GROUP, sent, 0.0)
    return sent


def check_exactly_once(fab: NetFabric, sent: list[bytes]) -> None:
    for r in RECEIVERS:
        assert fab.delivered[r] == sent, f"{r} got {len(fab.delivered[r])} of {len(sent)}, or out of order"
    assert fab.delivered["S"] == []


def test_the_source_hears_its_leaf_once_per_two_windows_and_no_host() -> None:
    fab = NetFabric()
    sent = open_flow(fab, 40)
    fab.run()
    check_exactly_once(fab, sent)
    assert fab.nodes["S"].sending_done
    # Every ACK the source heard is an AGG-ACK of its leaf, one per two windows (report_every 2): three
    # receivers behind two BFER leaves, and not one host's ACK reached it.
    assert fab.at_source == {"agg-ack": 20}
    src = fab.counters("S")
    assert src["sender.retransmitted"] == 0
    # The BFER leaves spoke for their hosts, each as one BFER.
    for leaf, hosts in (("L1", 1), ("L2", 2)):
        c = fab.counters(leaf)
        assert c["edge.rx.ack"] >= hosts * 40 // 8, c  # the hosts' ACKs reached their leaf (ack_every 8)
        assert c["edge.edge-agg-ack-sent"] > 0
    assert fab.counters("L1")["agg.absorbed"] > 0  # the BFIR leaf took L2's word and R4's as L1's


def test_a_repair_goes_only_to_the_bfer_that_lost_it() -> None:
    fab = NetFabric()
    sent = open_flow(fab, 12)
    dropped = []
    link = fab._link

    def lose_one_copy_to_l2(frm: str, to: str, item: tuple, hops: int = 1) -> None:
        # The first copy of sequence 3 on X -> L2 is lost: L2's hosts miss it, R4 does not.
        if (frm, to) == ("X", "L2") and not dropped and decode(item[1][28:]).seq == 0xFFFF_FFF3:
            dropped.append(item)
            return
        link(frm, to, item, hops)

    fab._link = lose_one_copy_to_l2  # type: ignore[method-assign]
    fab.run()
    check_exactly_once(fab, sent)
    assert dropped
    src = fab.counters("S")
    assert src["sender.retransmitted"] == 1
    # The source's leaf narrowed the repair to L2: every host got each sequence once (R2 and R3 the lost
    # one by the repair), R4 no copy of the repair.
    assert fab.counters("L1")["agg.repair-narrowed"] == 1
    assert fab.data_to == {"R2": 12, "R3": 12, "R4": 12}


def test_a_host_nack_goes_up_merged_and_asked_by_its_leaf() -> None:
    """R2's NACKs go up as one AGG-NACK of L2 per repair round (the leaf asks as one BFER for its hosts),
    which X and L1 merge in turn: above L2 no NACK of a host is seen, only AGG-NACKs whose asker is L2."""
    fab = NetFabric()
    sent = open_flow(fab, 12)
    seen: list = []
    udp = fab.udp

    def watch(frm: str, addr: str, msg: bytes) -> None:
        if NAME[addr] in ("X", "L1", "S"):
            seen.append((NAME[addr], decode(msg)))
        udp(frm, addr, msg)

    link = fab._link
    lost: list = []

    def lose_r2s_copy(frm: str, to: str, item: tuple, hops: int = 1) -> None:
        if (frm, to) == ("L2", "R2") and not lost and decode(item[1]).seq == 0xFFFF_FFF2:
            lost.append(item)
            return
        link(frm, to, item, hops)

    fab.udp = watch  # type: ignore[method-assign]
    fab._link = lose_r2s_copy  # type: ignore[method-assign]
    fab.run()
    check_exactly_once(fab, sent)
    assert not [m for _to, m in seen if isinstance(m, Ack) and m.nack], "a NACK passed unmerged"
    nacks = [(to, m) for to, m in seen if isinstance(m, AggNack)]
    assert {to for to, _m in nacks} >= {"X", "L1"}, "R2's hole was never asked for above its leaf"
    assert {i for _to, m in nacks for i in mask_ids(m.askers_mask())} == {IDS["L2"]}
    assert all(m.first == m.last == 0xFFFF_FFF2 for _to, m in nacks)


@pytest.mark.parametrize("loss", [0.05, 0.2])
def test_a_lossy_fabric_delivers_everything_exactly_once(loss: float) -> None:
    fab = NetFabric(loss=loss, seed=3)
    sent = open_flow(fab, 60)
    fab.run(until=60.0)
    check_exactly_once(fab, sent)
    assert fab.counters("S")["sender.receivers-failed"] == 0


def test_leaves_and_spine_that_lose_their_state_mid_flow_lose_no_data() -> None:
    # As a restarted agent: L2 and X forget every flow while sequences are in flight. The hosts' ACKs of
    # them then have no entry to go to, the source's timer resends to the group, and the repair makes
    # new entries that the hosts' answers to a duplicate (an ACK at once) complete.
    fab = NetFabric()
    sent = open_flow(fab, 30)
    forgotten = []
    emit = fab._emit

    def restart_at_the_fin(leaf: str, inner: bytes, wire: bytes, ingress: str | None = None) -> None:
        emit(leaf, inner, wire, ingress)
        if leaf == "L2" and decode(wire).fin and not forgotten:  # nothing after it would repair the loss
            forgotten.append(fab.nodes["L2"].forget_flows() + fab.nodes["X"].forget_flows())

    fab._emit = restart_at_the_fin  # type: ignore[method-assign]
    fab.run(until=30.0)
    assert forgotten and forgotten[0] > 0
    check_exactly_once(fab, sent)
    src = fab.counters("S")
    assert fab.nodes["S"].sending_done and src["sender.receivers-failed"] == 0
    assert src["sender.timeouts"] > 0, "nothing was lost with the state: the test tested nothing"


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), loss=st.sampled_from([0.0, 0.02, 0.1]), n=st.integers(1, 40))
def test_any_seed_delivers_exactly_once(seed: int, loss: float, n: int) -> None:
    fab = NetFabric(loss=loss, seed=seed)
    sent = open_flow(fab, n)
    fab.run(until=60.0)
    check_exactly_once(fab, sent)
    assert fab.nodes["S"].sending_done
