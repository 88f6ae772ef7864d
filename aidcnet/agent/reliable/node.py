"""One node's part of the reliable transport (docs/reliability.md): senders and receiver on a GPU host,
the ACK aggregator on a BFR.  No sockets and no clock: the service (``reliable_service.py``) hands every
event its time and gives the node the callables that move octets, so tests wire nodes together in
memory.

Where feedback goes, per run (``ReliableSettings.feedback``):

* ``hop`` (DATA's inner UDP source port 4795): a receiver sends its ACKs and NACKs as unicast UDP to
  port 4795 of its BIER neighbor toward the BFIR; every BFR on the way hands them to its
  :class:`AckAggregator`, which absorbs them and sends AGG-ACKs (or passes what it cannot account
  for) to the neighbor the flow's DATA came from, and so on up to the BFIR.  A BFR that saw no DATA
  of the flow (the eBPF fast path forwarded it, or the BFR restarted) passes feedback toward the
  BFIR by its BIFT: end-to-end acknowledgment, relayed.
* ``e2e`` (source port 4796): a receiver sends its feedback straight to the BFIR's
  loopback (the inner IPv4 source of the DATA); BFR agents never see it (the kernel routes it) and
  keep no state for its DATA: the implosion baseline, and unicast's way.
* ``net`` (source port 4797): network-BIER. The source host sends DATA as plain IP multicast to the
  op's group; its leaf, the BFIR, imposes BIER (:meth:`ReliableNode.on_impose`: it keeps an aggregation
  entry over the BFER leaves and narrows a retransmission to the BFERs that have not confirmed it,
  :func:`aidcnet.reliable.edge.repair_bfers`); a BFER leaf delivers to its member hosts
  (:meth:`ReliableNode.on_emit`), which acknowledge to it, and it speaks for them upstream as one BFER
  (:class:`aidcnet.reliable.edge.EdgeAggregator`). Between the leaves feedback goes hop by hop as in
  ``hop``. The source's receivers are the BFER leaves, as a BitString names them.

The DATA itself says which (its inner UDP source port), so BFRs and receivers need no per-run
configuration, and a BFR never waits for feedback that will not pass it.  A node that is a BFER and
forwards the flow to BFERs below it (a BFR with its own bit) aggregates its own ACKs with theirs.

Host-BIER DATA travels as the BIER payload IPv4/UDP loopback -> 232.1.0.1, port 4795; unicast DATA as
UDP from the sender's loopback to each receiver's loopback, port 4795, one flow per receiver;
network-BIER DATA as UDP from the sender's loopback to the op's group, port 4795.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aidcnet.ipv4 import Ipv4DecodeError, UdpDatagram, parse_udp
from aidcnet.reliable import serial
from aidcnet.reliable.aggregator import AckAggregator, AggregatorConfig
from aidcnet.reliable.edge import EdgeAggregator, repair_bfers
from aidcnet.reliable.header import (
    RELIABLE_UDP_PORT,
    Ack,
    Data,
    Feedback,
    ReliableDecodeError,
    decode,
    decode_data_head,
    feedback_kind,
)
from aidcnet.reliable.receiver import Receiver, ReceiverConfig
from aidcnet.reliable.sender import BranchRto, SendBudget, Sender, SenderConfig, mask_ids
from aidcnet.reliable.waits import ProtocolWaits
from aidcnet.rto import RtoEstimator

FEEDBACK_MODES = ("hop", "e2e", "net")
# A BFR remembers where each flow's DATA came from; past this many flows it forgets them all (the
# BIFT then routes feedback toward the BFIR, which is right, only not always the reverse path).
RPF_KEEP = 65536
HOP_SPORT = RELIABLE_UDP_PORT
E2E_SPORT = RELIABLE_UDP_PORT + 1
NET_SPORT = RELIABLE_UDP_PORT + 2
# The source ports of DATA whose feedback passes the BFRs (they keep state for it).
HOP_BY_HOP_SPORTS = (HOP_SPORT, NET_SPORT)
RECEIVER_FIELDS = ("ack_delay", "nack_interval", "nack_max_interval")
# A BFR's aggregation timers, in wall seconds. A partial AGG-ACK must wait out a round trip: on a shaped
# lab the DATA of a window queues at 20 Mbit/s for up to a second (the replay's first RTO, RFC 6298's
# 1 s), and 50 ms sent partials for windows still in flight, which made the sources resend them
# (measured at 0% loss: 639 partials and 314 needless retransmissions for 264 packets).
# An AGG-ACK waits for the next window's twice the flow's DATA inter-arrival time (adaptive): at 20 Mbit/s
# an 8 kB DATA arrives every 3.3 ms of wall time, and a fixed 2 ms sent one AGG-ACK per packet (the
# simulation of the lab: 0.996 per packet at 0% loss; 0.500 adaptive).
BFR_AGGREGATOR = AggregatorConfig(partial_after=1.0, lifetime=10.0)
# A replay flow's Flow ID: the run's number (8 bits) above the op id (24 bits). Runs of one trace reuse
# the op ids and the ISN, so without the run's number a DATA or an ACK still in flight from the last run
# would be taken for this run's (measured: deliveries stamped about 12 s before the run began). The run's bits
# stay out of the entropy (the op id's low 20 bits), so every run of a trace takes the same ECMP paths.
RUN_SHIFT = 24
OP_MASK = (1 << RUN_SHIFT) - 1


def replay_flow_id(run: int, op_id: int) -> int:
    if not 0 <= run <= 0xFF:
        raise ValueError(f"reliable: run number {run!r} must be 0..255")
    if not 0 <= op_id <= OP_MASK:
        raise ValueError(f"op {op_id}: a reliable flow's id holds the op id in 24 bits (at most {OP_MASK})")
    return run << RUN_SHIFT | op_id


# Values of now among the totals: a run's counter deltas must never see them fall.
GAUGES = frozenset(
    {"agg.entries", "edge.entries", "sender.flows", "sender.flows-done", "sender.receivers-failed"}
)


@dataclass(frozen=True)
class ReliableSettings:
    """The knobs of one run, in wall seconds (the emulation's clock), from the replay load's
    ``reliable`` field (:meth:`from_request`)."""

    feedback: str = "hop"
    isn: int = 0
    run: int | None = None  # this run's number (replay_flow_id); None: flows of any run are taken
    window: int = 64
    initial_cwnd: int | None = None  # the sender's congestion window (SenderConfig); None: fixed window
    # Payload bytes all of this host's flows may have in flight together (SendBudget); None: no bound.
    inflight_bytes: int | None = None
    nack_gather: float = 0.0  # SenderConfig.nack_gather: fraction of the RTO a NACK waits for others
    fail_after: float = 30.0
    initial_rto: float = 0.05
    min_rto: float = 0.02
    max_rto: float = 2.0
    receiver: ReceiverConfig = field(
        default_factory=lambda: ReceiverConfig(ack_delay=0.002, nack_interval=0.01, nack_max_interval=0.2)
    )

    def __post_init__(self) -> None:
        if self.feedback not in FEEDBACK_MODES:
            modes = ", ".join(FEEDBACK_MODES)
            raise ValueError(f"reliable.feedback {self.feedback!r} must be one of {modes}")
        if not 0 <= self.isn <= 0xFFFF_FFFF:
            raise ValueError(f"reliable.isn {self.isn!r} must be a 32-bit sequence number")
        if self.run is not None:
            replay_flow_id(self.run, 0)  # validates the run number
        self.sender_config()  # validates window, initial_cwnd, nack_gather and fail_after
        if self.inflight_bytes is not None:
            SendBudget(self.inflight_bytes)
        RtoEstimator(self.initial_rto, self.min_rto, self.max_rto)

    def sender_config(self) -> SenderConfig:
        return SenderConfig(
            window=self.window,
            fail_after=self.fail_after,
            initial_cwnd=self.initial_cwnd,
            max_rto=self.max_rto,
            nack_gather=self.nack_gather,
        )

    @classmethod
    def from_request(cls, raw: dict[str, Any] | None) -> ReliableSettings:
        raw = dict(raw or {})
        known = {
            "feedback", "isn", "run", "window", "initial_cwnd", "fail_after", "initial_rto", "min_rto",
            "max_rto", "inflight_bytes", "nack_gather",
        }  # fmt: skip
        unknown = sorted(set(raw) - known - set(RECEIVER_FIELDS))
        if unknown:
            names = ", ".join(sorted(known | set(RECEIVER_FIELDS)))
            raise ValueError(f"reliable: unknown field(s) {', '.join(unknown)}; known: {names}")
        rx = {k: float(raw.pop(k)) for k in RECEIVER_FIELDS if k in raw}
        base = cls()
        receiver = ReceiverConfig(**{**base.receiver.__dict__, **rx}) if rx else base.receiver
        kw: dict[str, Any] = {k: raw[k] for k in known if k in raw}
        for k in ("isn", "run", "window", "initial_cwnd", "inflight_bytes"):
            if kw.get(k) is not None:
                kw[k] = int(kw[k])
        for k in ("fail_after", "initial_rto", "min_rto", "max_rto", "nack_gather"):
            if k in kw:
                kw[k] = float(kw[k])
        return cls(receiver=receiver, **kw)


Impose = Callable[[bytes, list[int], int, int], None]
"""``impose(data, receiver BFR-ids, entropy, sport)``: send ``data`` (a DATA message) over host-BIER as
IPv4/UDP from UDP source port ``sport`` (:data:`HOP_SPORT` or :data:`E2E_SPORT`) to port 4795."""
SendTo = Callable[[bytes, str], None]
"""``send(message, address)``: one UDP datagram to ``address``:4795."""
Toward = Callable[[int], "str | None"]
"""``toward(bfr_id)``: the address of the BIER neighbor toward that BFR-id (the BIFT's row), or None."""
Deliver = Callable[[bytes, str], None]
"""``deliver(payload, source address)``: one DATA payload, in order, exactly once."""
Multicast = Callable[[bytes, str], None]
"""``multicast(data, group)``: send ``data`` (a DATA message) as UDP from :data:`NET_SPORT` to the group's
port 4795 (network-BIER: the source's leaf imposes BIER)."""


class ReliableNode:
    """The reliable transport at one node.  ``bfr_id``: a host's id in the run (its BFR-id, or the id
    the replay load gives it for unicast); a BFR's own BFR-id or None (its AGG-ACKs then say 0)."""

    def __init__(
        self,
        bfr_id: int | None,
        send: SendTo,
        toward: Toward,
        impose: Impose | None = None,
        deliver: Deliver | None = None,
        aggregator: AggregatorConfig | None = None,
        multicast: Multicast | None = None,
    ) -> None:
        self.bfr_id = bfr_id
        self.send = send
        self.toward = toward
        self.impose = impose
        self.deliver = deliver
        self.multicast = multicast
        self.settings = ReliableSettings()
        self.aggregator = AckAggregator(bfr_id or 0, aggregator or BFR_AGGREGATOR)
        # Network-BIER at a BFER leaf: its member hosts, aggregated into its own bit (made on first use).
        self.edge: EdgeAggregator | None = None
        # Network-BIER flows this leaf delivered to member hosts: the id-mask of those hosts.
        self.net_flows: dict[tuple[int, int], int] = {}
        self.receiver: Receiver | None = None
        # (flow id, receiver id for a unicast flow / 0 for a BIER flow) -> sender
        self.senders: dict[tuple[int, int], Sender] = {}
        self.budget: SendBudget | None = None  # shared by this run's senders
        # This run's round-trip estimators, one per branch (where feedback comes from), shared by its senders.
        self.rtos = BranchRto(self._rto)
        self._active: dict[tuple[int, int], Sender] = {}  # the senders not done yet
        self._unicast_addr: dict[tuple[int, int], str] = {}
        self._group: dict[tuple[int, int], str] = {}  # network-BIER flows: the op's group
        self.rpf: dict[tuple[int, int], str] = {}
        # Where a flow's feedback goes from this receiver: the first hop back, or the BFIR itself.
        self.feedback_to: dict[tuple[int, int], str | None] = {}
        self.counters: Counter[str] = Counter()
        # The kernel's receive stamp (wall ns) of the datagram being handed in, set by the service before
        # it does (0: none): what a delivery it causes is timed by.
        self.rx_stamp_ns = 0
        # ``on_data_sent(flow id, octets)``: each DATA transmission of this node's flows, as it is handed on.
        self.on_data_sent: Callable[[int, int], None] | None = None
        # When this node, as a source, could send nothing until an answer or a timer (its endpoint opens
        # the spans after each pass; feedback that lets it send closes them): the fidelity verdict's
        # held check leaves them out (aidcnet/reliable/waits.py).
        self.waits = ProtocolWaits()
        self._sent = 0  # DATA transmissions so far (whether a poll sent any)
        # The wall clock's ns (the realtime clock, as the kernel's receive stamps): what a wait ends at when
        # the datagram that ended it has no stamp. The endpoint sets it; the default ends such a wait empty.
        self.wall_ns: Callable[[], int] = lambda: 0

    # -- a run -------------------------------------------------------------------------------------
    def configure(self, settings: ReliableSettings, self_id: int | None) -> None:
        """A new run: forget the last run's flows and receive with ``settings``."""
        if self_id is not None and not 1 <= self_id <= 0xFFFF:
            raise ValueError(f"reliable: this host's id {self_id!r} must be 1..65535")
        self.settings = settings
        if self_id is not None:
            self.bfr_id = self_id
        self.senders = {}
        self.budget = SendBudget(settings.inflight_bytes) if settings.inflight_bytes is not None else None
        self.rtos = BranchRto(self._rto)
        self._active = {}
        self._unicast_addr = {}
        self._group = {}
        self.feedback_to = {}
        self.receiver = Receiver(self_id, settings.receiver, settings.isn) if self_id is not None else None
        self.counters = Counter()
        self.waits.reset()

    def forget_flows(self) -> int:
        """Before a run, on every node: forget what earlier runs left here (open aggregation windows,
        learned partial timers, reverse paths). A window left open would go on sending partial AGG-ACKs
        during the new run. Returns the aggregation entries dropped."""
        self.rpf.clear()
        self.net_flows.clear()
        return self.aggregator.forget() + (self.edge.forget() if self.edge is not None else 0)

    def _rto(self) -> RtoEstimator:
        s = self.settings
        return RtoEstimator(s.initial_rto, s.min_rto, s.max_rto)

    def _sender(self, flow_id: int, receivers: Iterable[int], payloads: list[bytes]) -> Sender:
        if self.bfr_id is None:
            raise ValueError("reliable: a sender needs this host's id (replay load: reliable.self_id)")
        s = self.settings
        sender = Sender(
            self.bfr_id,
            flow_id,
            receivers,
            self.rtos,
            s.sender_config(),
            s.isn,
            self.budget,
        )
        for i, payload in enumerate(payloads):
            sender.offer(payload, fin=i == len(payloads) - 1)
        return sender

    def open_bier_flow(self, flow_id: int, receivers: list[int], payloads: list[bytes], now: float) -> None:
        """One flow over host-BIER to the BFR-ids ``receivers``: one sequence per payload."""
        if self.impose is None:
            raise ValueError("reliable: host-BIER flows need this host's BIER service")
        self._open((flow_id, 0), receivers, payloads, now)

    def open_net_flow(
        self, flow_id: int, bfers: list[int], group: str, payloads: list[bytes], now: float
    ) -> None:
        """One flow over network-BIER: DATA to ``group``, acknowledged per BFER leaf (``bfers``, the
        BFR-ids the group's BitString names), one sequence per payload."""
        if self.multicast is None:
            raise ValueError("reliable: network-BIER flows need a multicast socket (replay load: interface)")
        self._open((flow_id, 0), bfers, payloads, now, group=group)

    def _open(
        self,
        key: tuple[int, int],
        receivers: Iterable[int],
        payloads: list[bytes],
        now: float,
        group: str | None = None,
        unicast_to: str | None = None,
    ) -> None:
        """A new sender for ``key`` (flow id, receiver id of a unicast flow or 0), sending at once."""
        if key in self.senders:
            to = f" to {key[1]}" if key[1] else ""
            raise ValueError(f"reliable: flow {key[0]}{to} is already open")
        self.senders[key] = self._active[key] = self._sender(key[0], receivers, payloads)
        if group is not None:
            self._group[key] = group
        if unicast_to is not None:
            self._unicast_addr[key] = unicast_to
        self._poll_sender(key, self.senders[key], now)

    def open_unicast_flows(
        self, flow_id: int, receivers: dict[int, str], payloads: list[bytes], now: float
    ) -> None:
        """One flow per receiver (id -> loopback address), each acknowledged end to end."""
        for rid, addr in receivers.items():
            self._open((flow_id, rid), [rid], payloads, now, unicast_to=addr)

    @property
    def sending_done(self) -> bool:
        return not self._active

    # -- events ------------------------------------------------------------------------------------
    def on_datagram(self, payload: bytes, src: str, now: float, sport: int = 0) -> None:
        """A UDP datagram to our port 4795 from ``src``:``sport``: unicast or network-BIER DATA, or
        feedback (for our flows, or to aggregate)."""
        msg = self._decode(payload)
        if msg is None:
            return
        if isinstance(msg, Data):
            # network-BIER: feedback goes to the leaf that delivered it (our BIER neighbor toward the
            # source), which speaks for its hosts; unicast: straight back to the source.
            upstream = self.toward(msg.bfir_id) if sport == NET_SPORT else src
            self._on_data(msg, src, upstream, now)
        elif self.receiver is not None and msg.bfir_id == self.bfr_id:
            self._on_source_feedback(msg, len(payload), now, src)
        elif isinstance(msg, Ack) and self._from_member(msg):
            self._edge_feedback(msg, now)
        else:
            self._aggregate(msg, now)

    def on_bier_delivery(self, datagram: UdpDatagram, now: float) -> bool:
        """A host-BIER delivery (the BIER service's listener); True when it was ours (port 4795)."""
        if datagram.dport != RELIABLE_UDP_PORT:
            return False
        msg = self._decode(datagram.payload)
        if msg is None:
            return True
        if not isinstance(msg, Data):
            self.counters["rx.feedback-over-bier"] += 1
            return True
        # hop: back to the BIER neighbor toward the BFIR; e2e: to the BFIR's loopback, routed.
        if datagram.sport == HOP_SPORT:
            upstream = self.rpf.get((msg.bfir_id, msg.flow_id)) or self.toward(msg.bfir_id)
        else:
            upstream = datagram.src
        self._on_data(msg, datagram.src, upstream, now)
        return True

    def on_forward(self, inner: bytes, upstream: str, downstream: int, now: float) -> None:
        """This BFR forwarded (or delivered) a BIER packet whose payload is ``inner`` (IPv4) to the
        BFERs of id-mask ``downstream``; ``upstream`` is the neighbor it came from."""
        msg = self._hop_data(inner)
        if msg is not None:
            self._forwarded(msg, upstream, downstream, now)

    def on_report(self, head: bytes, src: str, downstream: int, imposed: bool, now: float) -> None:
        """The eBPF BFR forwarded (``imposed``: imposed, as network-BIER's BFIR leaf, for a host at
        ``src``) a packet whose payload starts with ``head`` (IPv4, UDP, the reliable common header) to
        the BFERs ``downstream``: as :meth:`on_forward` (or :meth:`on_impose`), the DATA itself staying
        in the kernel."""
        if len(head) < 44 or head[0] != 0x45 or head[9] != 17:
            self.counters["report.not-ours"] += 1
            return
        sport, dport = int.from_bytes(head[20:22], "big"), int.from_bytes(head[22:24], "big")
        wanted = (NET_SPORT,) if imposed else HOP_BY_HOP_SPORTS
        if dport != RELIABLE_UDP_PORT or sport not in wanted:
            return  # its feedback goes end to end and never passes here
        try:
            msg = decode_data_head(head[28:44])
        except ReliableDecodeError as exc:
            self.counters["rx.malformed." + exc.reason] += 1
            return
        self.counters["report." + ("imposed" if imposed else "forwarded")] += 1
        if imposed:
            self.aggregator.on_data(msg, downstream, src, now)
        else:
            self._forwarded(msg, src, downstream, now)

    def _forwarded(self, msg: Data, upstream: str, downstream: int, now: float) -> None:
        # The way back, for this node's own feedback too: with ECMP the BIFT's first choice toward
        # the BFIR need not be the neighbor this copy came from, whose aggregator waits for us.
        if len(self.rpf) >= RPF_KEEP:
            self.rpf.clear()
        self.rpf[(msg.bfir_id, msg.flow_id)] = upstream
        own = 1 << (self.bfr_id - 1) if self.bfr_id else 0
        if downstream & ~own:
            self.aggregator.on_data(msg, downstream, upstream, now)

    def on_impose(self, inner: bytes, bfers: tuple[int, ...], upstream: str, now: float) -> tuple[int, ...]:
        """This leaf, a network-BIER BFIR, is about to impose BIER on ``inner`` (IPv4 from a host, whose
        address ``upstream`` is) for the BFR-ids ``bfers``: the BFR-ids to impose for instead (a
        retransmission goes to the BFERs that have not confirmed it), and the window's aggregation
        entry made, so the source hears one AGG-ACK from here instead of one per branch."""
        msg = self._hop_data(inner, NET_SPORT)
        if msg is None:
            return bfers
        bfers = repair_bfers(self.aggregator, msg, bfers)
        mask = 0
        for b in bfers:
            mask |= 1 << (b - 1)
        self.aggregator.on_data(msg, mask, upstream, now)
        return bfers

    def on_emit(self, inner: bytes, hosts: int, now: float) -> None:
        """This leaf, a network-BIER BFER, delivers ``inner`` to its member hosts of id-mask ``hosts``."""
        msg = self._hop_data(inner, NET_SPORT)
        if msg is None or not hosts or not self.bfr_id:
            return
        if self.edge is None:
            self.edge = EdgeAggregator(self.bfr_id, self.aggregator.config)
        key = (msg.bfir_id, msg.flow_id)
        if len(self.net_flows) >= RPF_KEEP:
            self.net_flows.clear()
        self.net_flows[key] = self.net_flows.get(key, 0) | hosts
        # The way up: the BFR the BIER packet came from (on_forward saw it first), or none when this
        # leaf imposed it itself (its own aggregation entry then takes the hosts' word).
        self.edge.on_data(msg, hosts, self.rpf.get(key), now)

    def poll(self, now: float) -> float | None:
        """Everything due at ``now``; returns when there is work next (None: only events can make some)."""
        for key, sender in list(self._active.items()):
            self._poll_sender(key, sender, now)
        if self.receiver is not None:
            for fb in self.receiver.poll(now):
                self._send_feedback(fb, now)
        for up, msg in self.aggregator.poll(now):
            self._upstream(msg, up)
        if self.edge is not None:
            self._edge_out(self.edge.poll(now), now)
        times = [self.aggregator.next_deadline()]
        if self.edge is not None:
            times.append(self.edge.next_deadline())
        if self.receiver is not None:
            times.append(self.receiver.next_deadline())
        times.extend(s.next_deadline() for s in self._active.values())
        due = [t for t in times if t is not None]
        return min(due) if due else None

    # -- internals ---------------------------------------------------------------------------------
    def _decode(self, payload: bytes) -> Data | Feedback | None:
        try:
            return decode(payload)
        except ReliableDecodeError as exc:
            self.counters["rx.malformed." + exc.reason] += 1
            return None

    def _hop_data(self, inner: bytes, sport: int | None = None) -> Data | None:
        """The DATA in an IPv4 packet whose feedback passes the BFRs (source port ``sport``, or any of
        :data:`HOP_BY_HOP_SPORTS`); None for anything else."""
        try:
            datagram = parse_udp(inner)
        except Ipv4DecodeError:
            return None
        if datagram.dport != RELIABLE_UDP_PORT:
            return None
        if datagram.sport != sport if sport is not None else datagram.sport not in HOP_BY_HOP_SPORTS:
            return None  # not ours, or its feedback goes end to end and will not pass here
        msg = self._decode(datagram.payload)
        return msg if isinstance(msg, Data) else None

    def _from_member(self, msg: Ack) -> bool:
        """An ACK or NACK of a host this leaf delivered the network-BIER flow to."""
        return bool(self.net_flows.get((msg.bfir_id, msg.flow_id), 0) >> (msg.reporter - 1) & 1)

    def _edge_feedback(self, msg: Feedback, now: float) -> None:
        """Feedback from a member host of a network-BIER flow this leaf delivers."""
        assert self.edge is not None
        self.counters["edge.rx." + feedback_kind(msg)] += 1
        self._edge_out(self.edge.on_feedback(msg, now), now)

    def _edge_out(self, out: list[tuple[object, Feedback]], now: float) -> None:
        """What the leaf says for its hosts: into its own aggregation when it forwards the flow on too (or
        imposed it: the BFIR leaf with member hosts), upstream otherwise."""
        for up, msg in out:
            if (msg.bfir_id, msg.flow_id) in self.aggregator.flows:
                self._aggregate(msg, now)
            else:
                self._upstream(msg, up)

    def _other_run(self, flow_id: int) -> bool:
        """A flow of an earlier run (counted ``rx.other-run``): not this run's to deliver or to hear."""
        run = self.settings.run
        if run is None or flow_id >> RUN_SHIFT == run:
            return False
        self.counters["rx.other-run"] += 1
        return True

    def _on_data(self, data: Data, src: str, upstream: str | None, now: float) -> None:
        if self.receiver is None:
            self.counters["rx.data-not-receiving"] += 1
            return
        if self._other_run(data.flow_id):
            return
        self.feedback_to[(data.bfir_id, data.flow_id)] = upstream
        deliveries, feedback = self.receiver.on_data(data, now)
        if self.deliver is not None:
            for d in deliveries:
                self.deliver(d.payload, src)
        for fb in feedback:
            self._send_feedback(fb, now)

    def _send_feedback(self, fb: Ack, now: float) -> None:
        if self._aggregates(fb):
            # We forward this flow to BFERs below us too: our own ACK joins theirs here.
            self.counters["tx.own-" + feedback_kind(fb)] += 1
            self._aggregate(fb, now)
            return
        to = self.feedback_to.get((fb.bfir_id, fb.flow_id))
        if to is None:
            to = self.toward(fb.bfir_id)
        if to is None:
            self.counters["tx.feedback-no-route"] += 1
            return
        self.counters["tx." + feedback_kind(fb)] += 1
        self.send(fb.encode(), to)

    def _aggregates(self, fb: Ack) -> bool:
        """An entry of ours holds the window ``fb`` acknowledges into (we forwarded it below too)."""
        entries = self.aggregator.flows.get((fb.bfir_id, fb.flow_id), {})
        return any(serial.le(e.start, fb.cum) and serial.le(fb.cum, e.end) for e in entries.values())

    def _on_source_feedback(self, msg: Feedback, size: int, now: float, src: str) -> None:
        """Feedback for one of our flows from ``src``: the branch its round trips are measured on (the
        neighbor that aggregates for the BFERs behind it, or the receiver itself end to end)."""
        if self._other_run(msg.flow_id):
            return
        kind = feedback_kind(msg)
        self.counters[f"source.rx.{kind}.packets"] += 1
        self.counters[f"source.rx.{kind}.bytes"] += size
        key = (msg.flow_id, msg.reporter if isinstance(msg, Ack) else 0)
        sender = self.senders.get(key) or self.senders.get((msg.flow_id, 0))
        if sender is None:
            self.counters["source.rx.unknown-flow"] += 1
            return
        sender.on_feedback(msg, now, src)
        key = (msg.flow_id, 0) if key not in self.senders else key
        sent = self._sent
        self._poll_sender(key, sender, now)
        if self.waits.waiting and (self._sent > sent or self.can_send_new):
            # The wait ended when this answer reached the host, not when our loop got to it.
            self.waits.end(self.rx_stamp_ns or self.wall_ns())

    @property
    def can_send_new(self) -> bool:
        """Some open flow has a message its window and the send budget have room for."""
        return any(s.can_send_new for s in self._active.values())

    @property
    def sending(self) -> bool:
        """Flows of this node are open: with nothing it may send, it waits on its protocol."""
        return bool(self._active)

    def _poll_sender(self, key: tuple[int, int], sender: Sender, now: float) -> None:
        for tx in sender.poll(now):
            wire = tx.data.encode()
            if key[1]:
                self.send(wire, self._unicast_addr[key])
            elif key in self._group:
                assert self.multicast is not None
                self.multicast(wire, self._group[key])
            else:
                assert self.impose is not None
                sport = HOP_SPORT if self.settings.feedback == "hop" else E2E_SPORT
                self.impose(wire, mask_ids(tx.bfers), tx.data.flow_id & OP_MASK, sport)
            self._sent += 1
            if self.on_data_sent is not None:
                self.on_data_sent(tx.data.flow_id, len(wire))
        if sender.done:
            self._active.pop(key, None)

    def _aggregate(self, msg: Feedback, now: float) -> None:
        self.counters["agg.rx." + feedback_kind(msg)] += 1
        for up, out in self.aggregator.on_feedback(msg, now):
            self._upstream(out, up)

    def _upstream(self, msg: Feedback, up: object) -> None:
        to = up if isinstance(up, str) else self.rpf.get((msg.bfir_id, msg.flow_id))
        if to is None:
            to = self.toward(msg.bfir_id)
        if to is None:
            self.counters["agg.tx.no-route"] += 1
            return
        self.counters["agg.tx." + feedback_kind(msg)] += 1
        self.send(msg.encode(), to)

    def totals(self) -> dict[str, int]:
        """Counters of this node, flat, under names the agent exports as ``reliable.<name>``, and the
        :data:`GAUGES` (values now, which may fall: the agent's counters leave them out)."""
        out: Counter[str] = Counter(self.counters)
        for sender in self.senders.values():
            out.update({f"sender.{k}": v for k, v in sender.counters.items()})
        out["sender.flows"] = len(self.senders)
        out["sender.flows-done"] = sum(1 for s in self.senders.values() if s.done)
        out["sender.receivers-failed"] = sum(len(s.failed) for s in self.senders.values())
        if self.receiver is not None:
            out.update({f"receiver.{k}": v for k, v in self.receiver.counters.items()})
        out.update({f"agg.{k}": v for k, v in self.aggregator.counters.items()})
        out["agg.entries"] = self.aggregator.entries
        if self.edge is not None:
            out.update({f"edge.{k}": v for k, v in self.edge.counters.items()})
            out["edge.entries"] = self.edge.entries
        return dict(out)
