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
* ``e2e`` (any other source port; we use 4796): a receiver sends its feedback straight to the BFIR's
  loopback (the inner IPv4 source of the DATA); BFR agents never see it (the kernel routes it) and
  keep no state for its DATA: the implosion baseline, and unicast's way.

The DATA itself says which (its inner UDP source port), so BFRs and receivers need no per-run
configuration, and a BFR never waits for feedback that will not pass it.  A node that is a BFER and
forwards the flow to BFERs below it (a BFR with its own bit) aggregates its own ACKs with theirs.

Host-BIER DATA travels as the BIER payload IPv4/UDP loopback -> 232.1.0.1, port 4795; unicast DATA as
UDP from the sender's loopback to each receiver's loopback, port 4795, one flow per receiver.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aidcnet.ipv4 import Ipv4DecodeError, UdpDatagram, parse_udp
from aidcnet.reliable import serial
from aidcnet.reliable.aggregator import AckAggregator, AggregatorConfig
from aidcnet.reliable.header import (
    RELIABLE_UDP_PORT,
    Ack,
    AggAck,
    Data,
    ReliableDecodeError,
    decode,
)
from aidcnet.reliable.receiver import Receiver, ReceiverConfig
from aidcnet.reliable.sender import SendBudget, Sender, SenderConfig, mask_ids
from aidcnet.rto import RtoEstimator

FEEDBACK_MODES = ("hop", "e2e")
# A BFR remembers where each flow's DATA came from; past this many flows it forgets them all (the
# BIFT then routes feedback toward the BFIR, which is right, only not always the reverse path).
RPF_KEEP = 65536
HOP_SPORT = RELIABLE_UDP_PORT
E2E_SPORT = RELIABLE_UDP_PORT + 1
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
GAUGES = frozenset({"agg.entries", "sender.flows", "sender.flows-done", "sender.receivers-failed"})


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


def _kind(msg: Ack | AggAck) -> str:
    if isinstance(msg, AggAck):
        return "agg-ack-partial" if msg.partial else "agg-ack"
    return "nack" if msg.nack else "ack"


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
    ) -> None:
        self.bfr_id = bfr_id
        self.send = send
        self.toward = toward
        self.impose = impose
        self.deliver = deliver
        self.settings = ReliableSettings()
        self.aggregator = AckAggregator(bfr_id or 0, aggregator or BFR_AGGREGATOR)
        self.receiver: Receiver | None = None
        # (flow id, receiver id for a unicast flow / 0 for a BIER flow) -> sender
        self.senders: dict[tuple[int, int], Sender] = {}
        self.budget: SendBudget | None = None  # shared by this run's senders
        self._active: dict[tuple[int, int], Sender] = {}  # the senders not done yet
        self._unicast_addr: dict[tuple[int, int], str] = {}
        self.rpf: dict[tuple[int, int], str] = {}
        # Where a flow's feedback goes from this receiver: the first hop back, or the BFIR itself.
        self.feedback_to: dict[tuple[int, int], str | None] = {}
        self.counters: Counter[str] = Counter()

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
        self._active = {}
        self._unicast_addr = {}
        self.feedback_to = {}
        self.receiver = Receiver(self_id, settings.receiver, settings.isn) if self_id is not None else None
        self.counters = Counter()

    def forget_flows(self) -> int:
        """Before a run, on every node: forget what earlier runs left here (open aggregation windows,
        learned partial timers, reverse paths). A window left open would go on sending partial AGG-ACKs
        during the new run. Returns the aggregation entries dropped."""
        self.rpf.clear()
        return self.aggregator.forget()

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
            self._rto(),
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
        key = (flow_id, 0)
        if key in self.senders:
            raise ValueError(f"reliable: flow {flow_id} is already open")
        self.senders[key] = self._active[key] = self._sender(flow_id, receivers, payloads)
        self._poll_sender(key, self.senders[key], now)

    def open_unicast_flows(
        self, flow_id: int, receivers: dict[int, str], payloads: list[bytes], now: float
    ) -> None:
        """One flow per receiver (id -> loopback address), each acknowledged end to end."""
        for rid, addr in receivers.items():
            key = (flow_id, rid)
            if key in self.senders:
                raise ValueError(f"reliable: flow {flow_id} to {rid} is already open")
            self.senders[key] = self._active[key] = self._sender(flow_id, [rid], payloads)
            self._unicast_addr[key] = addr
            self._poll_sender(key, self.senders[key], now)

    @property
    def sending_done(self) -> bool:
        return not self._active

    # -- events ------------------------------------------------------------------------------------
    def on_datagram(self, payload: bytes, src: str, now: float) -> None:
        """A UDP datagram to our port 4795: unicast DATA, or feedback (for our flows, or to aggregate)."""
        msg = self._decode(payload)
        if msg is None:
            return
        if isinstance(msg, Data):
            self._on_data(msg, src, src, now)
        elif self.receiver is not None and msg.bfir_id == self.bfr_id:
            self._on_source_feedback(msg, len(payload), now)
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
        try:
            datagram = parse_udp(inner)
        except Ipv4DecodeError:
            return
        if datagram.dport != RELIABLE_UDP_PORT or datagram.sport != HOP_SPORT:
            return  # not ours, or its feedback goes end to end and will not pass here
        msg = self._decode(datagram.payload)
        if not isinstance(msg, Data):
            return
        # The way back, for this node's own feedback too: with ECMP the BIFT's first choice toward
        # the BFIR need not be the neighbor this copy came from, whose aggregator waits for us.
        if len(self.rpf) >= RPF_KEEP:
            self.rpf.clear()
        self.rpf[(msg.bfir_id, msg.flow_id)] = upstream
        own = 1 << (self.bfr_id - 1) if self.bfr_id else 0
        if downstream & ~own:
            self.aggregator.on_data(msg, downstream, upstream, now)

    def poll(self, now: float) -> float | None:
        """Everything due at ``now``; returns when there is work next (None: only events can make some)."""
        for key, sender in list(self._active.items()):
            self._poll_sender(key, sender, now)
        if self.receiver is not None:
            for fb in self.receiver.poll(now):
                self._send_feedback(fb, now)
        for up, msg in self.aggregator.poll(now):
            self._upstream(msg, up)
        times = [self.aggregator.next_deadline()]
        if self.receiver is not None:
            times.append(self.receiver.next_deadline())
        times.extend(s.next_deadline() for s in self._active.values())
        due = [t for t in times if t is not None]
        return min(due) if due else None

    # -- internals ---------------------------------------------------------------------------------
    def _decode(self, payload: bytes) -> Data | Ack | AggAck | None:
        try:
            return decode(payload)
        except ReliableDecodeError as exc:
            self.counters["rx.malformed." + exc.reason] += 1
            return None

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
            self.counters["tx.own-" + _kind(fb)] += 1
            self._aggregate(fb, now)
            return
        to = self.feedback_to.get((fb.bfir_id, fb.flow_id))
        if to is None:
            to = self.toward(fb.bfir_id)
        if to is None:
            self.counters["tx.feedback-no-route"] += 1
            return
        self.counters["tx." + _kind(fb)] += 1
        self.send(fb.encode(), to)

    def _aggregates(self, fb: Ack) -> bool:
        """An entry of ours holds the window ``fb`` acknowledges into (we forwarded it below too)."""
        entries = self.aggregator.flows.get((fb.bfir_id, fb.flow_id), {})
        return any(serial.le(e.start, fb.cum) and serial.le(fb.cum, e.end) for e in entries.values())

    def _on_source_feedback(self, msg: Ack | AggAck, size: int, now: float) -> None:
        if self._other_run(msg.flow_id):
            return
        kind = _kind(msg)
        self.counters[f"source.rx.{kind}.packets"] += 1
        self.counters[f"source.rx.{kind}.bytes"] += size
        key = (msg.flow_id, msg.reporter if isinstance(msg, Ack) else 0)
        sender = self.senders.get(key) or self.senders.get((msg.flow_id, 0))
        if sender is None:
            self.counters["source.rx.unknown-flow"] += 1
            return
        sender.on_feedback(msg, now)
        key = (msg.flow_id, 0) if key not in self.senders else key
        self._poll_sender(key, sender, now)

    def _poll_sender(self, key: tuple[int, int], sender: Sender, now: float) -> None:
        for tx in sender.poll(now):
            wire = tx.data.encode()
            if key[1]:
                self.send(wire, self._unicast_addr[key])
            else:
                assert self.impose is not None
                sport = HOP_SPORT if self.settings.feedback == "hop" else E2E_SPORT
                self.impose(wire, mask_ids(tx.bfers), tx.data.flow_id & OP_MASK, sport)
        if sender.done:
            self._active.pop(key, None)

    def _aggregate(self, msg: Ack | AggAck, now: float) -> None:
        self.counters["agg.rx." + _kind(msg)] += 1
        for up, out in self.aggregator.on_feedback(msg, now):
            self._upstream(out, up)

    def _upstream(self, msg: Ack | AggAck, up: object) -> None:
        to = up if isinstance(up, str) else self.rpf.get((msg.bfir_id, msg.flow_id))
        if to is None:
            to = self.toward(msg.bfir_id)
        if to is None:
            self.counters["agg.tx.no-route"] += 1
            return
        self.counters["agg.tx." + _kind(msg)] += 1
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
        return dict(out)
