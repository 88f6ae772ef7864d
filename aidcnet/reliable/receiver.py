"""The BFER side: in-order, exactly-once delivery per flow, cumulative ACKs with gaps, NACKs.

Pure logic: the caller passes each decoded DATA with the time ``now`` and sends the feedback returned
toward the flow's BFIR (the reverse of the path the DATA came on, so BFRs can aggregate it).

Per flow (BFIR-id, Flow ID) the receiver holds the cumulative point (the next sequence to deliver), the
out-of-order sequences above it (at most ``window``), and for each missing sequence when to ask again.

* A sequence before the cumulative point, or already buffered, is a duplicate: counted, never
  delivered, and answered with an ACK at once (a duplicate means the sender has not heard our ACK).
* In-order data is delivered together with the buffered run behind it; an ACK goes out when
  ``ack_every`` new sequences have arrived (in order or above a hole: the ACK's gaps then say what is
  held) or the cumulative point reached the FIN, else after ``ack_delay``.
* A sequence that leaves a hole makes the hole's sequences missing: a NACK names them at once, and
  again after ``nack_interval``, doubling up to ``nack_max_interval``, while they stay missing.

The first sequence of a flow is ``isn`` (agreed out of band; the replay load tells both ends).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from aidcnet.reliable import serial
from aidcnet.reliable.header import Ack, Data

# An ACK names at most this many gaps; its Highest is cut back so the gaps it names stay exact.
MAX_ACK_RANGES = 64


@dataclass(frozen=True)
class ReceiverConfig:
    window: int = 1024  # sequences accepted ahead of the cumulative point
    ack_every: int = 1
    ack_delay: float = 0.001
    nack_interval: float = 0.002
    nack_max_interval: float = 0.064

    def __post_init__(self) -> None:
        if not 1 <= self.window <= serial.MAX_SPAN or self.ack_every < 1:
            raise ValueError(f"window must be 1..{serial.MAX_SPAN} and ack_every >= 1")
        if self.ack_delay < 0 or self.nack_interval <= 0 or self.nack_max_interval < self.nack_interval:
            raise ValueError("need ack_delay >= 0 and 0 < nack_interval <= nack_max_interval")


@dataclass(frozen=True)
class Delivery:
    bfir_id: int
    flow_id: int
    seq: int
    payload: bytes


class _Flow:
    __slots__ = ("ack_due", "advanced", "buffer", "cum", "fin", "highest", "missing")

    def __init__(self, isn: int) -> None:
        self.cum = isn
        self.highest = isn  # the sequence after the highest received
        self.buffer: dict[int, bytes] = {}
        self.fin: int | None = None
        self.missing: dict[int, tuple[float, float]] = {}  # seq -> (next NACK time, interval)
        self.advanced = 0
        self.ack_due: float | None = None

    @property
    def complete(self) -> bool:
        return self.fin is not None and self.cum == serial.add(self.fin, 1)


class Receiver:
    """All flows arriving at one BFER (``bfr_id`` is what its feedback says as reporter)."""

    def __init__(self, bfr_id: int, config: ReceiverConfig | None = None, isn: int = 0) -> None:
        if not 1 <= bfr_id <= 0xFFFF:
            raise ValueError(f"receiver BFR-id {bfr_id!r} must be 1..65535")
        self.bfr_id = bfr_id
        self.config = config or ReceiverConfig()
        self.isn = isn & serial.MASK
        self.flows: dict[tuple[int, int], _Flow] = {}
        self.counters: Counter[str] = Counter()

    def complete(self, bfir_id: int, flow_id: int) -> bool:
        flow = self.flows.get((bfir_id, flow_id))
        return flow is not None and flow.complete

    def on_data(self, data: Data, now: float) -> tuple[list[Delivery], list[Ack]]:
        """Accept one DATA: what to deliver to the application (in order) and what feedback to send."""
        key = (data.bfir_id, data.flow_id)
        flow = self.flows.get(key)
        if flow is None:
            flow = self.flows[key] = _Flow(self.isn)
        ahead = serial.distance(flow.cum, data.seq)
        if ahead < 0 or data.seq in flow.buffer:
            self.counters["duplicates"] += 1
            return [], [self._ack(key, flow)]
        if ahead >= self.config.window:
            self.counters["beyond-window"] += 1
            return [], [self._ack(key, flow)]
        self.counters["accepted"] += 1
        # Out-of-order arrivals count too: their ACK's gaps tell the BFRs what is held above a hole (a BFR
        # acknowledges those windows selectively), where a count of delivered ones would stay silent
        # until the hole is repaired.
        flow.advanced += 1
        flow.buffer[data.seq] = bytes(data.payload)
        flow.missing.pop(data.seq, None)
        if data.fin:
            flow.fin = data.seq
        feedback: list[Ack] = []
        if serial.lt(flow.highest, data.seq):
            # A hole opened: its sequences are missing from now on, and we ask for them at once.
            for seq in serial.span(flow.highest, data.seq):
                flow.missing[seq] = (now, self.config.nack_interval)
        if serial.le(flow.highest, data.seq):
            flow.highest = serial.add(data.seq, 1)
        deliveries = self._deliver(key, flow)
        nack = self._nack(key, flow, now)
        if nack is not None:
            feedback.append(nack)
        if flow.advanced >= self.config.ack_every or (deliveries and flow.complete):
            feedback.append(self._ack(key, flow))
        elif flow.advanced and flow.ack_due is None:
            flow.ack_due = now + self.config.ack_delay
        return deliveries, feedback

    def poll(self, now: float) -> list[Ack]:
        """Delayed ACKs and repeated NACKs due at ``now``."""
        out: list[Ack] = []
        for key, flow in self.flows.items():
            if flow.ack_due is not None and now >= flow.ack_due:
                out.append(self._ack(key, flow))
            nack = self._nack(key, flow, now)
            if nack is not None:
                out.append(nack)
        return out

    def next_deadline(self) -> float | None:
        times = [f.ack_due for f in self.flows.values() if f.ack_due is not None]
        times.extend(due for f in self.flows.values() for due, _ in f.missing.values())
        return min(times) if times else None

    # -- internals ---------------------------------------------------------------------------------

    def _deliver(self, key: tuple[int, int], flow: _Flow) -> list[Delivery]:
        out = []
        while flow.cum in flow.buffer:
            out.append(Delivery(key[0], key[1], flow.cum, flow.buffer.pop(flow.cum)))
            flow.cum = serial.add(flow.cum, 1)
        self.counters["delivered"] += len(out)
        return out

    def _ack(self, key: tuple[int, int], flow: _Flow) -> Ack:
        flow.advanced = 0
        flow.ack_due = None
        gaps = _ranges(sorted(flow.missing, key=lambda s: serial.distance(flow.cum, s)))
        highest = flow.highest
        if len(gaps) > MAX_ACK_RANGES:
            highest = gaps[MAX_ACK_RANGES][0]
            gaps = gaps[:MAX_ACK_RANGES]
        self.counters["acks-sent"] += 1
        return Ack(
            bfir_id=key[0],
            flow_id=key[1],
            cum=flow.cum,
            reporter=self.bfr_id,
            highest=highest,
            ranges=tuple(gaps),
        )

    def _nack(self, key: tuple[int, int], flow: _Flow, now: float) -> Ack | None:
        due = sorted(
            (s for s, (t, _) in flow.missing.items() if t <= now), key=lambda s: serial.distance(flow.cum, s)
        )
        if not due:
            return None
        for seq in due:
            interval = flow.missing[seq][1]
            flow.missing[seq] = (now + interval, min(2 * interval, self.config.nack_max_interval))
        ranges = _ranges(due)[:MAX_ACK_RANGES]
        self.counters["nacks-sent"] += 1
        return Ack(
            bfir_id=key[0],
            flow_id=key[1],
            cum=flow.cum,
            reporter=self.bfr_id,
            highest=flow.highest,
            ranges=tuple(ranges),
            nack=True,
        )


def _ranges(seqs: list[int]) -> list[tuple[int, int]]:
    """Ascending sequence numbers (serial order) as maximal inclusive ranges."""
    out: list[tuple[int, int]] = []
    for seq in seqs:
        if out and serial.add(out[-1][1], 1) == seq:
            out[-1] = (out[-1][0], seq)
        else:
            out.append((seq, seq))
    return out
