"""A discrete-event simulation of reliable flows over host-BIER (no sockets).

Two fabrics: leaf-spine (``leaves`` × ``spines``, ``hosts_per_leaf`` hosts under each leaf) and the
superpod (``gpus`` GPUs, each with one port on every one of ``planes`` plane leaves, no spine: the FARE
draft's Figure 1, labs/superpod.clab.yml).  Hosts are BFIR/BFERs (host-BIER, one BFR-id each); leaves
and spines are transit BFRs.  BIFTs come from :mod:`aidcnet.bier.routing` and :mod:`aidcnet.bier.bift`
as in the agents, forwarding is :func:`aidcnet.bier.forwarding.forward` with the flow's entropy (so
flows take their ECMP paths, a plane each on the superpod), and every message crosses every link as
encoded octets through :func:`aidcnet.reliable.header.decode`.  Each link has a fixed delay, optionally a
rate and a tail-drop FIFO, and drops every packet (DATA and feedback alike) with probability ``loss``
from one seeded RNG.  The first host opens ``flows`` flows to every other host at once, sharing its send
budget as an agent's flows do.  Feedback goes back on the reverse of the path DATA came on; with
``aggregate`` every leaf and spine runs an :class:`~aidcnet.reliable.aggregator.AckAggregator`, without
it they pass feedback on unchanged (the end-to-end mode, whose feedback the source tells apart by
receiver: its branches are the receivers).

Components are polled on a grid of ``tick`` seconds (ticks in which none of them has work are skipped);
packets arrive ``delay`` after they left.
"""

from __future__ import annotations

import heapq
import math
import random
import zlib
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field

from aidcnet.bier.bift import build_bifts
from aidcnet.bier.forwarding import forward, impose
from aidcnet.bier.routing import compute_birts, undirected
from aidcnet.reliable.aggregator import AckAggregator, AggregatorConfig, Out
from aidcnet.reliable.header import Ack, AggAck, AggNack, Data, decode, feedback_kind
from aidcnet.reliable.receiver import Receiver, ReceiverConfig
from aidcnet.reliable.sender import BranchRto, FixedRto, RtoPolicy, SendBudget, Sender, SenderConfig, mask_ids
from aidcnet.rto import RtoEstimator

BSL = 64
TTL = 64
TOPOLOGIES = ("leaf-spine", "superpod")


@dataclass(frozen=True)
class SimConfig:
    topology: str = "leaf-spine"
    leaves: int = 4
    spines: int = 2
    hosts_per_leaf: int = 2
    planes: int = 4  # superpod
    gpus: int = 8  # superpod (the lab's is 64)
    flows: int = 1  # the source's flows, Flow IDs flow_id, flow_id + 1, ... (each its own entropy)
    messages: int = 300  # per flow
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
    adaptive_rto: bool = False  # RFC 6298 estimators (aidcnet.rto) with ``rto`` as first guess
    min_rto: float | None = None  # adaptive: the estimators' floor (None: ``rto``)
    max_rto: float = 1.0
    receiver: ReceiverConfig = field(default_factory=ReceiverConfig)
    aggregator: AggregatorConfig = field(default_factory=lambda: AggregatorConfig(partial_after=0.003))

    def __post_init__(self) -> None:
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"topology {self.topology!r} must be one of {', '.join(TOPOLOGIES)}")
        if self.flows < 1 or self.messages < 1:
            raise ValueError("need at least one flow of at least one message")


@dataclass
class SimResult:
    delivered: dict[int, list[tuple[int, bytes]]]  # receiver BFR-id -> (seq, payload) of the first flow
    delivered_flows: dict[tuple[int, int], list[tuple[int, bytes]]]  # (receiver, Flow ID) -> the same
    duplicates: int
    at_source: Counter[str]  # feedback messages arriving at the BFIR, by kind
    branches: int  # the BFIR's first-hop copies for the whole receiver set (of its first flow)
    receivers: int
    sent: int  # first transmissions
    retransmitted: int
    retransmitted_bytes: int  # payload octets the BFIR sent again
    retransmitted_link_bytes: int  # payload octets of retransmissions, summed over every link they crossed
    dropped_bytes: int  # payload octets of DATA copies the links dropped
    dropped_data: int  # DATA copies the links dropped
    lost_sequences: int  # distinct (flow, sequence) of which some copy was dropped
    repair_hops: int  # links crossed by the retransmissions delivered, summed over their receivers
    repairs_delivered: int  # retransmissions' copies delivered (whether or not a duplicate)
    data_link_bytes: int
    feedback_link_msgs: int
    completed_at: float | None
    failed: dict[int, float]
    aggregators: Counter[str]
    sender: Counter[str]
    stale_deadlines: Counter[str]  # per kind of component: a deadline already past right after its poll

    @property
    def acks_per_packet(self) -> float:
        """Positive acknowledgments (ACK and AGG-ACK, partial or not) at the BFIR per first transmission."""
        acks = self.at_source["ack"] + self.at_source["agg-ack"] + self.at_source["agg-ack-partial"]
        return acks / self.sent if self.sent else 0.0

    @property
    def nacks(self) -> int:
        """NACKs at the BFIR: receivers' own and BFRs' merged ones."""
        return self.at_source["nack"] + self.at_source["agg-nack"]

    @property
    def nacks_per_lost(self) -> float:
        """NACKs at the BFIR per sequence of which some copy was dropped (repairs' copies too)."""
        return self.nacks / self.lost_sequences if self.lost_sequences else 0.0

    @property
    def nacks_per_dropped(self) -> float:
        """NACKs at the BFIR per DATA copy the links dropped (a lost packet, as PGM counts NAKs)."""
        return self.nacks / self.dropped_data if self.dropped_data else 0.0

    @property
    def repair_path(self) -> float:
        """Mean links a delivered retransmission crossed from where it was sent."""
        return self.repair_hops / self.repairs_delivered if self.repairs_delivered else 0.0


def fabric_edges(cfg: SimConfig) -> tuple[list[tuple[str, str]], list[str]]:
    """The fabric's links and its hosts (in BFR-id order)."""
    edges, hosts = [], []
    if cfg.topology == "superpod":
        hosts = [f"G{g}" for g in range(1, cfg.gpus + 1)]
        edges = [(host, f"L{p}") for host in hosts for p in range(1, cfg.planes + 1)]
        return edges, hosts
    for li in range(1, cfg.leaves + 1):
        for si in range(1, cfg.spines + 1):
            edges.append((f"l{li}", f"s{si}"))
        for k in range(1, cfg.hosts_per_leaf + 1):
            host = f"h{li}-{k}"
            hosts.append(host)
            edges.append((host, f"l{li}"))
    return edges, hosts


@dataclass(frozen=True)
class _Copy:
    """A DATA copy on a link: its octets, BitString, entropy and the links it crossed so far."""

    wire: bytes
    bits: int
    entropy: int
    hops: int


class _Net:
    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.now = 0.0
        self.events: list[tuple[float, int, str, str, object]] = []
        self.n = 0
        edges, self.hosts = fabric_edges(cfg)
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
        self.lost: set[tuple[int, int]] = set()  # (flow, seq) of which a copy was dropped
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
        departs = self._departs(frm, to, size if kind == "data" else len(payload))  # type: ignore[arg-type]
        lost = self.rng.random() < self.cfg.loss or frm in self.cfg.dead_hosts or to in self.cfg.dead_hosts
        if departs is None or lost:
            if kind == "data":
                self.counters["dropped-bytes"] += size
                self.counters["dropped-data"] += 1
                assert isinstance(payload, _Copy)
                seq_of = decode(payload.wire)
                assert isinstance(seq_of, Data)
                self.lost.add((seq_of.flow_id, seq_of.seq))
            return
        self.n += 1
        heapq.heappush(self.events, (departs + self.cfg.delay, self.n, to, frm, (kind, payload)))

    def _departs(self, frm: str, to: str, wire: int) -> float | None:
        """When a packet of ``wire`` octets leaves ``frm`` toward ``to`` (None: the FIFO is full)."""
        rate = self.cfg.host_rate if self.cfg.host_rate and to in self.bfr_id else self.cfg.rate
        if rate is None:
            return self.now
        start = max(self.now, self.busy_until.get((frm, to), self.now))
        backlog = (start - self.now) * rate / 8
        if backlog + wire > self.cfg.queue_bytes:
            self.counters["queue-drops"] += 1
            return None
        departs = start + wire * 8 / rate
        self.busy_until[(frm, to)] = departs
        return departs

    def next_wake(self, components: list[float | None]) -> float | None:
        wake = [d for d in components if d is not None]
        if self.events:
            wake.append(self.events[0][0])
        return min(wake) if wake else None


class _Sim:
    """One run: the network, the source's senders, the receivers, and how they meet."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.net = net = _Net(cfg)
        self.source = net.hosts[0]
        self.src_id = net.bfr_id[self.source]
        ids = [net.bfr_id[h] for h in net.hosts[1:]]
        self.receivers = {r: Receiver(r, cfg.receiver, cfg.isn) for r in ids}
        self.delivered: dict[tuple[int, int], list[tuple[int, bytes]]] = {}
        # Deadlines a component gave right after a poll that were already past: work it says is due but
        # did not do, which in an agent wakes the timer at once, again and again (a core spent spinning).
        self.stale_deadlines: Counter[str] = Counter()
        budget = SendBudget(cfg.inflight_bytes) if cfg.inflight_bytes is not None else None
        rtos = BranchRto(self._rto_policy)
        self.senders: dict[int, Sender] = {}
        for f in range(cfg.flows):
            sender = Sender(self.src_id, cfg.flow_id + f, self.receivers, rtos, cfg.sender, cfg.isn, budget)
            for i in range(cfg.messages):
                sender.offer(i.to_bytes(4, "big") * (cfg.size // 4), fin=i == cfg.messages - 1)
            self.senders[cfg.flow_id + f] = sender
        everyone = sum(1 << (r - 1) for r in self.receivers)
        self.branches = len(impose(net.bift[self.source], everyone, TTL, cfg.flow_id).copies)

    def _rto_policy(self) -> RtoPolicy:
        cfg = self.cfg
        if not cfg.adaptive_rto:
            return FixedRto(cfg.rto)
        floor = cfg.rto if cfg.min_rto is None else cfg.min_rto
        return RtoEstimator(cfg.rto, min_rto=floor, max_rto=cfg.max_rto)

    def feedback_up(self, node: str, msgs: list[Out]) -> None:
        for up, msg in msgs:
            to = up if isinstance(up, str) else self.net.rpf.get((node, msg.bfir_id, msg.flow_id))
            if to is not None:
                self.net.send(node, to, "feedback", msg.encode(), 0)

    def on_data(self, node: str, frm: str, copy: _Copy) -> None:
        net = self.net
        data = decode(copy.wire)
        assert isinstance(data, Data)
        net.rpf[(node, data.bfir_id, data.flow_id)] = frm
        res = forward(net.bift[node], copy.bits, TTL, copy.entropy)
        down = res.local
        for nbr, cbits, _ in res.copies:
            down |= cbits
            out = _Copy(copy.wire, cbits, copy.entropy, copy.hops + 1)
            net.send(node, nbr, "data", out, len(data.payload), data.retransmit)
        if node in net.aggs:
            net.aggs[node].on_data(data, down, frm, net.now)
        if res.local:
            if data.retransmit:
                net.counters["repair-hops"] += copy.hops
                net.counters["repairs-delivered"] += 1
            rx = self.receivers[net.bfr_id[node]]
            got, fb = rx.on_data(data, net.now)
            self.delivered.setdefault((rx.bfr_id, data.flow_id), []).extend((d.seq, d.payload) for d in got)
            self.feedback_up(node, [(None, m) for m in fb])

    def on_feedback(self, node: str, frm: str, wire: bytes) -> None:
        net = self.net
        msg = decode(wire)
        assert isinstance(msg, Ack | AggAck | AggNack)
        if node == self.source:
            net.at_source[feedback_kind(msg)] += 1
            sender = self.senders.get(msg.flow_id)
            if sender is not None:
                # End to end the source tells its feedback apart by receiver (its address), as the agent.
                e2e = not self.cfg.aggregate and isinstance(msg, Ack)
                branch: Hashable = ("rx", msg.reporter) if e2e and isinstance(msg, Ack) else frm
                sender.on_feedback(msg, net.now, branch)
        elif node in net.aggs:
            self.feedback_up(node, net.aggs[node].on_feedback(msg, net.now))
        else:
            self.feedback_up(node, [(None, msg)])

    def poll(self) -> None:
        net = self.net
        for flow_id, sender in self.senders.items():
            for tx in sender.poll(net.now):
                wire = tx.data.encode()
                entropy = flow_id & 0xFFFFF
                for nbr, cbits, _ in impose(net.bift[self.source], tx.bfers, TTL, entropy).copies:
                    out = _Copy(wire, cbits, entropy, 1)
                    net.send(self.source, nbr, "data", out, len(tx.data.payload), tx.data.retransmit)
        for r, rx in self.receivers.items():
            self.feedback_up(net.hosts[r - 1], [(None, m) for m in rx.poll(net.now)])
        for node, agg in net.aggs.items():
            self.feedback_up(node, agg.poll(net.now))
        parts = [("sender", s) for s in self.senders.values()]
        parts += [("receiver", x) for x in self.receivers.values()]
        parts += [("aggregator", x) for x in net.aggs.values()]
        for kind, part in parts:
            deadline = part.next_deadline()
            if deadline is not None and deadline < net.now:
                self.stale_deadlines[kind] += 1

    def deadlines(self) -> list[float | None]:
        return [
            *(s.next_deadline() for s in self.senders.values()),
            *(x.next_deadline() for x in (*self.receivers.values(), *self.net.aggs.values())),
        ]

    def finished(self) -> bool:
        done = all(s.done for s in self.senders.values())
        return done and all(
            all(rx.complete(self.src_id, f) for f in self.senders) or r in self._failed()
            for r, rx in self.receivers.items()
        )

    def _failed(self) -> dict[int, float]:
        failed: dict[int, float] = {}
        for sender in self.senders.values():
            failed.update(sender.failed)
        return failed

    def run(self) -> None:
        net, cfg = self.net, self.cfg
        next_tick = 0.0
        while net.now <= cfg.until and not self.finished():
            if net.events and net.events[0][0] <= next_tick:
                net.now, _, node, frm, (kind, payload) = heapq.heappop(net.events)
                if kind == "data":
                    self.on_data(node, frm, payload)
                else:
                    self.on_feedback(node, frm, payload)
                continue
            # Skip ticks in which nothing is due: the components say when they next have work.
            wake = net.next_wake(self.deadlines())
            if wake is not None and wake > next_tick:
                next_tick += math.ceil((wake - next_tick) / cfg.tick) * cfg.tick
                continue  # events up to the new tick go first
            net.now = next_tick
            next_tick += cfg.tick
            self.poll()

    def result(self) -> SimResult:
        net = self.net
        agg_counters: Counter[str] = Counter()
        for agg in net.aggs.values():
            agg_counters.update(agg.counters)
        sender_counters: Counter[str] = Counter()
        for sender in self.senders.values():
            sender_counters.update(sender.counters)
        done = [s.completed_at for s in self.senders.values()]
        first = self.cfg.flow_id
        return SimResult(
            delivered={r: self.delivered.get((r, first), []) for r in self.receivers},
            delivered_flows=dict(self.delivered),
            duplicates=sum(rx.counters["duplicates"] for rx in self.receivers.values()),
            at_source=net.at_source,
            branches=self.branches,
            receivers=len(self.receivers),
            sent=sender_counters["sent"],
            retransmitted=sender_counters["retransmitted"],
            retransmitted_bytes=sender_counters["retransmitted-bytes"],
            retransmitted_link_bytes=net.counters["retx-link-bytes"],
            dropped_bytes=net.counters["dropped-bytes"],
            dropped_data=net.counters["dropped-data"],
            lost_sequences=len(net.lost),
            repair_hops=net.counters["repair-hops"],
            repairs_delivered=net.counters["repairs-delivered"],
            data_link_bytes=net.counters["data-link-bytes"],
            feedback_link_msgs=net.counters["feedback-link-msgs"],
            completed_at=None if None in done else max(t for t in done if t is not None),
            failed=self._failed(),
            aggregators=agg_counters,
            sender=sender_counters,
            stale_deadlines=self.stale_deadlines,
        )


def simulate(cfg: SimConfig) -> SimResult:
    """Run the source's flows to every other host until all deliver or ``until`` passes."""
    sim = _Sim(cfg)
    sim.run()
    return sim.result()


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
        f"partial {res.at_source['agg-ack-partial']}), NACKs at source {res.nacks} "
        f"(nack {res.at_source['nack']}, agg-nack {res.at_source['agg-nack']}; "
        f"{res.nacks_per_dropped:.2f} per DATA copy dropped of {res.dropped_data}, "
        f"{res.nacks_per_lost:.2f} per lost sequence of {res.lost_sequences}), "
        f"retransmitted {res.retransmitted} pkts ({res.sender['timeouts']} on a timer) / "
        f"{res.retransmitted_bytes} B at source, "
        f"retx bytes at source / dropped bytes {at_source}, "
        f"retx link bytes / dropped bytes {res.retransmitted_link_bytes}/{drop} = {ratio}, "
        f"repair path {res.repair_path:.2f} links, "
        f"duplicates {res.duplicates}, failed {mask_ids(sum(1 << (r - 1) for r in res.failed))}, "
        f"done {done}"
    )
