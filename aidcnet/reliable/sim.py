"""A discrete-event simulation of one reliable flow over host-BIER on a leaf-spine fabric (no sockets).

Hosts are BFIR/BFERs (host-BIER, one BFR-id each); leaves and spines are transit BFRs.  BIFTs come from
:mod:`aidcnet.bier.routing` and :mod:`aidcnet.bier.bift` as in the agents, forwarding is
:func:`aidcnet.bier.forwarding.forward`, and every message crosses every link as encoded octets through
:func:`aidcnet.reliable.header.decode`.  Each link has a fixed delay, no rate limit, and drops every
packet (DATA and feedback alike) with probability ``loss`` from one seeded RNG.  Feedback goes back on
the reverse of the path DATA came on; with ``aggregate`` every leaf and spine runs an
:class:`~aidcnet.reliable.aggregator.AckAggregator`, without it they pass feedback on unchanged.

Components are polled on a grid of ``tick`` seconds (ticks in which none of them has work are skipped);
packets arrive ``delay`` after they were sent.
"""

from __future__ import annotations

import heapq
import math
import random
import zlib
from collections import Counter
from dataclasses import dataclass, field

from aidcnet.bier.bift import build_bifts
from aidcnet.bier.forwarding import forward, impose
from aidcnet.bier.routing import compute_birts, undirected
from aidcnet.reliable.aggregator import AckAggregator, AggregatorConfig
from aidcnet.reliable.header import Ack, AggAck, Data, decode
from aidcnet.reliable.receiver import Receiver, ReceiverConfig
from aidcnet.reliable.sender import FixedRto, SendBudget, Sender, SenderConfig, mask_ids
from aidcnet.rto import RtoEstimator

BSL = 64
TTL = 64


@dataclass(frozen=True)
class SimConfig:
    leaves: int = 4
    spines: int = 2
    hosts_per_leaf: int = 2
    messages: int = 300
    size: int = 1000  # payload octets per sequence
    loss: float = 0.0  # per link and packet
    delay: float = 50e-6  # per link
    # Shaped links (None: unlimited): each direction of a link sends at ``rate`` bit/s from a FIFO of at
    # most ``queue_bytes`` octets, and drops the tail beyond it, as the lab's shaped veths do.
    rate: float | None = None
    queue_bytes: int = 64_000
    host_rate: float | None = None  # links toward hosts, if slower (queues below the BFRs, as in the lab)
    tick: float = 100e-6
    aggregate: bool = True
    seed: int = 1
    isn: int = 0xFFFF_FF00  # close to the wrap, so every run crosses it
    flow_id: int = 7
    until: float = 30.0
    dead_hosts: tuple[str, ...] = ()  # hosts whose link drops everything (a receiver that died)
    sender: SenderConfig = field(default_factory=lambda: SenderConfig(window=32, fail_after=2.0))
    # The sender's SendBudget in payload octets (None: only the window limits what is in flight), as the
    # replay gives the agents' senders one.
    inflight_bytes: int | None = None
    rto: float = 0.006
    adaptive_rto: bool = False  # RFC 6298 estimator (aidcnet.rto) with ``rto`` as first guess and floor
    receiver: ReceiverConfig = field(default_factory=ReceiverConfig)
    aggregator: AggregatorConfig = field(default_factory=lambda: AggregatorConfig(partial_after=0.003))


@dataclass
class SimResult:
    delivered: dict[int, list[tuple[int, bytes]]]  # receiver BFR-id -> (seq, payload) in delivery order
    duplicates: int
    at_source: Counter[str]  # feedback messages arriving at the BFIR, by kind
    branches: int  # the BFIR's first-hop copies for the whole receiver set
    receivers: int
    sent: int  # first transmissions
    retransmitted: int
    retransmitted_bytes: int  # payload octets the BFIR sent again
    retransmitted_link_bytes: int  # payload octets of retransmissions, summed over every link they crossed
    dropped_bytes: int  # payload octets of DATA copies the links dropped
    data_link_bytes: int
    feedback_link_msgs: int
    completed_at: float | None
    failed: dict[int, float]
    aggregators: Counter[str]
    sender: Counter[str]

    @property
    def acks_per_packet(self) -> float:
        """Positive acknowledgments (ACK and AGG-ACK, partial or not) at the BFIR per first transmission."""
        acks = self.at_source["ack"] + self.at_source["agg-ack"] + self.at_source["agg-ack-partial"]
        return acks / self.sent if self.sent else 0.0


class _Net:
    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.now = 0.0
        self.events: list[tuple[float, int, str, str, object]] = []
        self.n = 0
        edges, self.hosts = [], []
        for li in range(1, cfg.leaves + 1):
            for si in range(1, cfg.spines + 1):
                edges.append((f"l{li}", f"s{si}"))
            for k in range(1, cfg.hosts_per_leaf + 1):
                host = f"h{li}-{k}"
                self.hosts.append(host)
                edges.append((host, f"l{li}"))
        self.bfr_id = {h: i for i, h in enumerate(self.hosts, 1)}
        if len(self.hosts) > BSL:
            raise ValueError(f"{len(self.hosts)} hosts do not fit one SI of BSL {BSL}")
        birts = compute_birts(undirected(edges), self.bfr_id)
        self.bift = {
            node: build_bifts(birt, BSL, ecmp_seed=zlib.crc32(node.encode()) & 0xFFFF)[0]
            for node, birt in birts.items()
        }
        self.rpf: dict[tuple[str, int, int], str] = {}
        self.aggs = {
            node: AckAggregator(0, cfg.aggregator)
            for node in birts
            if node not in self.bfr_id and cfg.aggregate
        }
        self.counters: Counter[str] = Counter()
        self.at_source: Counter[str] = Counter()
        self.busy_until: dict[tuple[str, str], float] = {}  # per link direction: when its FIFO drains

    def send(
        self, frm: str, to: str, kind: str, payload: object, size: int, retransmit: bool = False
    ) -> None:
        if kind == "data":
            self.counters["data-link-bytes"] += size
            if retransmit:
                self.counters["retx-link-bytes"] += size
        else:
            self.counters["feedback-link-msgs"] += 1
        wire = size if kind == "data" else len(payload) if isinstance(payload, bytes | bytearray) else 64
        departs = self.now
        rate = self.cfg.host_rate if self.cfg.host_rate and to in self.bfr_id else self.cfg.rate
        if rate is not None:
            start = max(self.now, self.busy_until.get((frm, to), self.now))
            backlog = (start - self.now) * rate / 8
            if backlog + wire > self.cfg.queue_bytes:
                self.counters["queue-drops"] += 1
                if kind == "data":
                    self.counters["dropped-bytes"] += size
                return
            departs = start + wire * 8 / rate
            self.busy_until[(frm, to)] = departs
        if self.rng.random() < self.cfg.loss or frm in self.cfg.dead_hosts or to in self.cfg.dead_hosts:
            if kind == "data":
                self.counters["dropped-bytes"] += size
            return
        self.n += 1
        heapq.heappush(self.events, (departs + self.cfg.delay, self.n, to, frm, (kind, payload)))


def simulate(cfg: SimConfig) -> SimResult:
    """Run one flow from the first host to every other host until all deliver or ``until`` passes."""
    net = _Net(cfg)
    source = net.hosts[0]
    src_id = net.bfr_id[source]
    receivers = {net.bfr_id[h]: Receiver(net.bfr_id[h], cfg.receiver, cfg.isn) for h in net.hosts[1:]}
    delivered: dict[int, list[tuple[int, bytes]]] = {r: [] for r in receivers}
    rto = RtoEstimator(cfg.rto, min_rto=cfg.rto, max_rto=1.0) if cfg.adaptive_rto else FixedRto(cfg.rto)
    budget = SendBudget(cfg.inflight_bytes) if cfg.inflight_bytes is not None else None
    sender = Sender(src_id, cfg.flow_id, receivers, rto, cfg.sender, cfg.isn, budget)
    for i in range(cfg.messages):
        sender.offer(i.to_bytes(4, "big") * (cfg.size // 4), fin=i == cfg.messages - 1)
    branches = len(impose(net.bift[source], sum(1 << (r - 1) for r in receivers), TTL).copies)
    key = (src_id, cfg.flow_id)

    def feedback_up(node: str, msgs: list[tuple[object, Ack | AggAck]]) -> None:
        for up, msg in msgs:
            to = up if isinstance(up, str) else net.rpf.get((node, *key))
            if to is not None:
                net.send(node, to, "feedback", msg.encode(), 0)

    def on_data(node: str, frm: str, wire: bytes, bits: int) -> None:
        data = decode(wire)
        assert isinstance(data, Data)
        net.rpf[(node, data.bfir_id, data.flow_id)] = frm
        res = forward(net.bift[node], bits, TTL)
        down = res.local
        for nbr, cbits, _ in res.copies:
            down |= cbits
            net.send(node, nbr, "data", (wire, cbits), len(data.payload), data.retransmit)
        if node in net.aggs:
            net.aggs[node].on_data(data, down, frm, net.now)
        if res.local:
            rx = receivers[net.bfr_id[node]]
            got, fb = rx.on_data(data, net.now)
            delivered[rx.bfr_id].extend((d.seq, d.payload) for d in got)
            feedback_up(node, [(None, m) for m in fb])

    def on_feedback(node: str, frm: str, wire: bytes) -> None:
        msg = decode(wire)
        assert isinstance(msg, Ack | AggAck)
        if node == source:
            kind = (
                "agg-ack-partial"
                if isinstance(msg, AggAck) and msg.partial
                else ("agg-ack" if isinstance(msg, AggAck) else ("nack" if msg.nack else "ack"))
            )
            net.at_source[kind] += 1
            sender.on_feedback(msg, net.now)
        elif node in net.aggs:
            feedback_up(node, net.aggs[node].on_feedback(msg, net.now))
        else:
            feedback_up(node, [(None, msg)])

    def finished() -> bool:
        return sender.done and all(rx.complete(*key) or r in sender.failed for r, rx in receivers.items())

    next_tick = 0.0
    while net.now <= cfg.until and not finished():
        if net.events and net.events[0][0] <= next_tick:
            net.now, _, node, frm, (kind, payload) = heapq.heappop(net.events)
            if kind == "data":
                wire, bits = payload
                on_data(node, frm, wire, bits)
            else:
                on_feedback(node, frm, payload)
            continue
        # Skip ticks in which nothing is due: the components say when they next have work.
        wake = [
            d
            for d in (
                sender.next_deadline(),
                *(x.next_deadline() for x in (*receivers.values(), *net.aggs.values())),
            )
            if d is not None
        ]
        if net.events:
            wake.append(net.events[0][0])
        if wake and min(wake) > next_tick:
            next_tick += math.ceil((min(wake) - next_tick) / cfg.tick) * cfg.tick
            continue  # events up to the new tick go first
        net.now = next_tick
        next_tick += cfg.tick
        for tx in sender.poll(net.now):
            wire = tx.data.encode()
            for nbr, cbits, _ in impose(net.bift[source], tx.bfers, TTL).copies:
                net.send(source, nbr, "data", (wire, cbits), len(tx.data.payload), tx.data.retransmit)
        for r, rx in receivers.items():
            feedback_up(net.hosts[r - 1], [(None, m) for m in rx.poll(net.now)])
        for node, agg in net.aggs.items():
            feedback_up(node, agg.poll(net.now))

    agg_counters: Counter[str] = Counter()
    for agg in net.aggs.values():
        agg_counters.update(agg.counters)
    return SimResult(
        delivered=delivered,
        duplicates=sum(rx.counters["duplicates"] for rx in receivers.values()),
        at_source=net.at_source,
        branches=branches,
        receivers=len(receivers),
        sent=sender.counters["sent"],
        retransmitted=sender.counters["retransmitted"],
        retransmitted_bytes=sender.counters["retransmitted-bytes"],
        retransmitted_link_bytes=net.counters["retx-link-bytes"],
        dropped_bytes=net.counters["dropped-bytes"],
        data_link_bytes=net.counters["data-link-bytes"],
        feedback_link_msgs=net.counters["feedback-link-msgs"],
        completed_at=sender.completed_at,
        failed=dict(sender.failed),
        aggregators=agg_counters,
        sender=sender.counters,
    )


def summary(label: str, res: SimResult) -> str:
    """One line of the numbers a run measured."""
    drop = res.dropped_bytes
    ratio = f"{res.retransmitted_link_bytes / drop:.2f}" if drop else "n/a"
    at_source = f"{res.retransmitted_bytes / drop:.2f}" if drop else "n/a"
    done = f"{res.completed_at * 1e3:.1f} ms" if res.completed_at is not None else "never"
    return (
        f"{label}: receivers {res.receivers}, branches {res.branches}, data packets {res.sent}, "
        f"ACKs at source {res.acks_per_packet:.3f}/packet "
        f"(ack {res.at_source['ack']}, agg {res.at_source['agg-ack']}, "
        f"partial {res.at_source['agg-ack-partial']}), NACKs at source {res.at_source['nack']}, "
        f"retransmitted {res.retransmitted} pkts / {res.retransmitted_bytes} B at source, "
        f"retx bytes at source / dropped bytes {at_source}, "
        f"retx link bytes / dropped bytes {res.retransmitted_link_bytes}/{drop} = {ratio}, "
        f"duplicates {res.duplicates}, failed {mask_ids(sum(1 << (r - 1) for r in res.failed))}, "
        f"done {done}"
    )
