"""The BFIR side of one reliable flow: send window, retransmission timer, who still owes an ACK.

Pure logic: the caller gives every event its time ``now`` (fabric seconds) and sends what
:meth:`Sender.poll` returns, imposing BIER with the :class:`Transmission`'s ``bfers`` as BitString.

Receivers are named by BFR-id; sets of them are *id-masks*, ints with bit ``BFR-id − 1`` set (the
concatenation of the SIs' BitStrings, RFC 8279 §3), so one int covers any number of SIs.

For every sequence in flight the sender keeps the id-mask of receivers that still owe it (``owing``).
ACKs, NACKs and AGG-ACKs clear bits; a sequence leaves the window when nobody owes it.  Two things
retransmit, both to the owing subset only (the retransmission's BitString is the missing set):

* a NACK, an ACK's gaps (or a partial AGG-ACK) ask for sequences for named receivers: retransmitted
  after ``nack_gather`` round trips, merged per sequence, unless that receiver was sent a
  retransmission of it less than ``nack_holdoff`` smoothed round trips ago and has received nothing
  sent after that retransmission (RACK, RFC 8985: it may still be on the way);
* the retransmission timer: ``RTO × 2**attempt`` after the last transmission (exponential backoff,
  capped at ``2**max_backoff``), to the receivers for which the sequence is the oldest they owe and
  that were not heard from within an RTO.

A receiver that owes something and has not been heard from for ``fail_after`` seconds is declared
failed: its bits are cleared everywhere and the flow completes for the others (the seed's "minimized
failure domain").  The RTO itself comes from an injected :class:`RtoPolicy`.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from aidcnet.reliable import serial
from aidcnet.reliable.header import Ack, AggAck, Data


class RtoPolicy(Protocol):
    """Where the retransmission timeout comes from (e.g. an RFC 6298 estimator, injected)."""

    def current(self) -> float:
        """The timeout in seconds for a first transmission (the sender applies the backoff)."""
        ...

    def observe(self, rtt: float) -> None:
        """One round-trip sample in seconds, only from sequences sent once (Karn's rule)."""
        ...


@dataclass
class FixedRto:
    """A constant RTO that ignores samples: enough for tests and for a fabric with a known RTT."""

    rto: float

    def current(self) -> float:
        return self.rto

    def observe(self, rtt: float) -> None:
        del rtt


@dataclass(frozen=True)
class SenderConfig:
    window: int = 64  # sequences in flight (sent, owed by someone)
    max_backoff: int = 6  # cap of the exponent of the RTO backoff
    fail_after: float = 5.0  # seconds without feedback from a receiver that owes something
    # Smoothed round trips (``srtt``; the RTO before the first) during which a repeated request for a
    # retransmission is not answered again, unless the receiver has something sent after it (RACK).
    nack_holdoff: float = 2.0
    # Congestion window (None: only ``window`` limits what is in flight). Sequences in flight are at most
    # min(window, cwnd); cwnd starts here, grows by one per sequence every receiver acknowledged (slow
    # start) up to ssthresh and by 1/cwnd each above it, and halves (a timeout: drops to 1) once per loss
    # event, i.e. per window of sequences sent after the loss was seen (RFC 5681 §3.1, RFC 6582's
    # "recover"). A fixed window larger than a shaped path's queue keeps packets queued past the RTO.
    initial_cwnd: int | None = None
    # Delay signal (TCP Vegas, Brakmo & Peterson 1995): once per round of cwnd sequences, the packets this
    # flow keeps queued are estimated as cwnd × (1 − base RTT / last round's smallest RTT), the base RTT
    # being the smallest completion time seen. Above ``queue_target`` cwnd shrinks by one, below half of
    # it cwnd grows, in between it holds; slow start ends at the first round above half. A window that
    # grows until a queue drops lets the queue delay outrun every timer (partials, RTOs) on the way.
    # None: loss alone steers cwnd (RFC 5681). Only with ``initial_cwnd``.
    queue_target: float | None = 3.0
    # A NACK-driven resend waits this many round trips (``rtt_estimate``) for the NACKs of the receivers
    # that lost the same copy (a drop above a branch point opens the same hole under every BFER below
    # it), so one retransmission with their union as BitString repairs them all.
    nack_gather: float = 1.0

    def __post_init__(self) -> None:
        if not 1 <= self.window <= serial.MAX_SPAN:
            raise ValueError(f"window {self.window} must be 1..{serial.MAX_SPAN}")
        if self.initial_cwnd is not None and not 1 <= self.initial_cwnd <= self.window:
            raise ValueError(f"initial_cwnd {self.initial_cwnd} must be 1..window ({self.window})")
        if self.fail_after <= 0 or self.nack_holdoff < 0 or self.max_backoff < 0:
            raise ValueError("fail_after must be > 0, nack_holdoff and max_backoff >= 0")
        if self.queue_target is not None and self.queue_target <= 0:
            raise ValueError(f"queue_target {self.queue_target} must be > 0 packets (or None: off)")
        if not 0 <= self.nack_gather <= 4:
            raise ValueError(f"nack_gather {self.nack_gather} must be 0..4 (round trips)")


@dataclass(frozen=True)
class Transmission:
    """One DATA to send: impose BIER with BitString(s) ``bfers`` (an id-mask)."""

    data: Data
    bfers: int


class _Slot:
    __slots__ = (
        "attempts",
        "deadline",
        "fin",
        "first_sent",
        "last_next",
        "last_sent",
        "owing",
        "payload",
        "resent",
    )

    def __init__(self, payload: bytes, fin: bool) -> None:
        self.payload = payload
        self.fin = fin
        self.owing = 0
        self.attempts = 0
        self.first_sent = 0.0
        self.last_sent = 0.0
        self.last_next = 0  # the sender's next new sequence when this one was last sent
        # receiver bit -> (time, next new sequence then) of the last retransmission that went to it: with
        # many receivers one sequence is resent to several subsets, and each has its own copy on the way
        self.resent: dict[int, tuple[float, int]] = {}
        self.deadline = 0.0


def id_mask(bfr_ids: Iterable[int]) -> int:
    """Id-mask of BFR-ids (bit BFR-id − 1)."""
    mask = 0
    for bfr_id in bfr_ids:
        if not 1 <= bfr_id <= 0xFFFF:
            raise ValueError(f"invalid BFR-id {bfr_id!r}: must be 1..65535")
        mask |= 1 << (bfr_id - 1)
    return mask


def mask_ids(mask: int) -> list[int]:
    """BFR-ids of an id-mask, ascending."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length())
        mask ^= low
    return out


class Sender:
    """One flow (BFIR-id, Flow ID) at its BFIR.  Feed it feedback, poll it for DATA to send."""

    def __init__(
        self,
        bfir_id: int,
        flow_id: int,
        receivers: Iterable[int],
        rto: RtoPolicy,
        config: SenderConfig | None = None,
        isn: int = 0,
    ) -> None:
        self.bfir_id = bfir_id
        self.flow_id = flow_id
        self.config = config or SenderConfig()
        self.rto = rto
        self.alive = id_mask(receivers)
        if not self.alive:
            raise ValueError(f"flow {flow_id}: no receivers")
        self.failed: dict[int, float] = {}
        self.base = isn & serial.MASK  # oldest sequence someone may still owe
        self.next_seq = self.base  # next sequence to send for the first time
        self._slots: dict[int, _Slot] = {}
        self._queue: deque[tuple[bytes, bool]] = deque()
        self._queued_fin = False
        self._pending: dict[int, int] = {}  # seq -> receivers that asked for it
        self._pending_due: dict[int, float] = {}  # seq -> when its gathered request is sent
        self._heard: dict[int, float] = {}  # receiver bit -> last feedback (or first send) time
        self.completed_at: float | None = None
        self.counters: Counter[str] = Counter()
        self.cwnd = float(self.config.initial_cwnd or self.config.window)
        self.ssthresh = float(self.config.window)
        self._recover = self.base  # loss signals for sequences before this belong to a loss event already met
        # Completion times (first send to the last receiver's acknowledgment) of sequences sent once.
        self.srtt: float | None = None
        self.base_rtt: float | None = None
        self._round_end = self.base  # the delay signal is read once per round: when this sequence completes
        self._round_min: float | None = None
        self._last_resend = -math.inf
        self._clock = 0.0  # the last poll's time (next_deadline has none of its own)
        self._recent: deque[float] = deque(maxlen=16)  # the last clean completion times
        self._queued: float | None = None  # the last round's estimate of this flow's packets in queues

    # -- application side -------------------------------------------------------------------------

    def offer(self, payload: bytes, fin: bool = False) -> None:
        """Queue one message (one sequence).  ``fin`` marks the last one of the flow."""
        if self._queued_fin:
            raise ValueError(f"flow {self.flow_id}: data offered after the FIN")
        self._queue.append((bytes(payload), fin))
        self._queued_fin = fin

    @property
    def done(self) -> bool:
        """FIN queued and sent, and every alive receiver has acknowledged everything."""
        return self._queued_fin and not self._queue and not self._slots

    # -- network side ------------------------------------------------------------------------------

    def poll(self, now: float) -> list[Transmission]:
        """Everything due at ``now``: failures declared, requested and timed-out retransmissions, new data."""
        self._clock = now
        self._declare_failures(now)
        out: list[Transmission] = []
        rto = self.rto.current()
        due: dict[int, int] = {}
        for seq in [q for q, t in self._pending_due.items() if now >= t]:
            del self._pending_due[seq]
            due[seq] = self._pending.pop(seq)
            self.counters["retransmitted-requested"] += 1
        older = 0  # receivers owing a sequence before this one
        for seq in self._in_flight():
            slot = self._slots.get(seq)
            if slot is None:
                continue
            oldest, older = slot.owing & ~older, older | slot.owing
            if slot.owing and now >= slot.deadline and slot.last_sent != now:
                # RFC 6298 §5 per receiver: the timer covers the oldest sequence it owes (a later one
                # waits behind that hole's repair, and its NACKs name what else it lost); and one heard
                # from within an RTO is still moving (a queue, not a loss), so only silent ones time out.
                silent = self._silent(oldest, now - rto)
                if not silent:
                    slot.deadline = now + rto
                    self.counters["timeout-deferred"] += 1
                    continue
                self.counters["timeouts"] += 1
                self._congestion(seq, timeout=True)
                due[seq] = due.get(seq, 0) | silent
        for seq in sorted(due, key=lambda q: serial.distance(self.base, q)):
            slot = self._slots.get(seq)
            if slot is not None and due[seq] & slot.owing:
                out.append(self._send(seq, slot, due[seq] & slot.owing, now, rto))
        while self._queue and self._may_send(now):
            payload, fin = self._queue.popleft()
            slot = _Slot(payload, fin)
            slot.owing = self.alive
            self._slots[self.next_seq] = slot
            out.append(self._send(self.next_seq, slot, self.alive, now, rto))
            self.next_seq = serial.add(self.next_seq, 1)
        self._advance(now)
        return out

    def next_deadline(self) -> float | None:
        """Earliest time :meth:`poll` has work (None: only feedback can change anything)."""
        if self._queue and self._may_send(self._clock):
            return 0.0
        times = list(self._pending_due.values())
        if self._queue and self.config.initial_cwnd is not None:
            times.extend(t + self._left_after() for t in self._pipe_sent(self._clock))
        times.extend(s.deadline for s in self._slots.values() if s.owing)
        times.extend(t + self.config.fail_after for b, t in self._heard.items() if b & self.alive)
        return min(times) if times else None

    def on_feedback(self, msg: Ack | AggAck, now: float) -> None:
        """Apply an ACK, NACK or AGG-ACK for this flow (the caller matched BFIR-id and Flow ID)."""
        if isinstance(msg, AggAck):
            self.counters["agg-ack-partial" if msg.partial else "agg-ack"] += 1
            acked = msg.acked_mask() & self.alive
            self._hear(acked, now)
            self._clear_before(msg.cum, acked, now)
            if msg.partial:
                self._request_oldest(msg.cum, msg.missing_mask() & self.alive, now)
        else:
            self.counters["nack" if msg.nack else "ack"] += 1
            bit = 1 << (msg.reporter - 1)
            if not bit & self.alive:
                self.counters["feedback-unknown-receiver"] += 1
                return
            self._hear(bit, now)
            self._clear_before(msg.cum, bit, now)
            if not msg.nack:
                # A NACK's ranges are the gaps it asks for now, not all of them: no selective ACK in it.
                self._clear_selective(msg, bit, now)
            # An ACK's gaps and a NACK's ranges were overtaken by ``highest``: loss evidence either way.
            for seq in self._in_flight():
                if _in_ranges(seq, msg.ranges):
                    self._request(seq, bit, now, msg.highest)
        self._advance(now)

    # -- internals ---------------------------------------------------------------------------------

    @property
    def window(self) -> int:
        """Sequences that may be in flight now."""
        return max(1, min(self.config.window, int(self.cwnd)))

    def _may_send(self, now: float) -> bool:
        """A new sequence may go: the window from the oldest owed one has room, and fewer than cwnd
        copies are still in the network (RFC 6675's "pipe", by time: a copy sent more than two smoothed
        round trips ago has arrived or was dropped, even while a receiver's cumulative point holds it)."""
        if serial.distance(self.base, self.next_seq) >= self.config.window:
            return False
        if self.config.initial_cwnd is None:
            return True
        return len(self._pipe_sent(now)) < max(1, int(self.cwnd))

    def _left_after(self) -> float:
        return math.inf if self.srtt is None else 2 * self.srtt

    def _pipe_sent(self, now: float) -> list[float]:
        gone = now - self._left_after()
        return [s.last_sent for s in self._slots.values() if s.owing and s.last_sent > gone]

    def _congestion(self, seq: int, timeout: bool = False) -> None:
        if self.config.initial_cwnd is None or serial.lt(seq, self._recover):
            return
        self._recover = self.next_seq
        self.counters["cwnd-reductions"] += 1
        target = self.config.queue_target
        if not timeout and target is not None and (self._queued or 0.0) <= target / 2:
            # A loss while our queues are short is not ours to answer by halving (TCP Veno, Fu & Liew
            # 2003): link loss at 5% would keep cwnd at 1-2 and every loss a tail loss.
            self.counters["cwnd-random-loss"] += 1
            self.ssthresh = max(2.0, self.cwnd * 0.8)
        else:
            self.ssthresh = max(2.0, self.cwnd / 2)
        self.cwnd = 1.0 if timeout else self.ssthresh

    def rtt_estimate(self) -> float | None:
        """A round trip without head-of-line waits: the smallest of the last 16 clean completion times.

        Completion times run long whenever an AGG-ACK or ACK was lost and a later cumulative one
        covered the sequence, so SRTT and the RTO overestimate; gathering NACKs and holding off
        repeated ones need the path's round trip now (its queue included), not the repair time."""
        return min(self._recent) if self._recent else None

    def _send(self, seq: int, slot: _Slot, bits: int, now: float, rto: float) -> Transmission:
        retransmit = slot.attempts > 0
        if retransmit:
            self._last_resend = now
            self.counters["retransmitted"] += 1
            self.counters["retransmitted-bytes"] += len(slot.payload)
        else:
            slot.first_sent = now
            self.counters["sent"] += 1
            self.counters["sent-bytes"] += len(slot.payload)
        slot.attempts += 1
        slot.last_sent = now
        slot.last_next = self.next_seq if retransmit else serial.add(seq, 1)
        if retransmit:
            for bit in mask_bits(bits):
                slot.resent[bit] = (now, slot.last_next)
        slot.deadline = now + rto * (1 << min(slot.attempts - 1, self.config.max_backoff))
        for bit in mask_bits(bits & ~self._heard_mask()):
            self._heard[bit] = now
        data = Data(
            bfir_id=self.bfir_id,
            flow_id=self.flow_id,
            seq=seq,
            payload=slot.payload,
            retransmit=retransmit,
            fin=slot.fin,
        )
        return Transmission(data, bits)

    def _heard_mask(self) -> int:
        mask = 0
        for bit in self._heard:
            mask |= bit
        return mask

    def _hear(self, bits: int, now: float) -> None:
        for bit in mask_bits(bits):
            self._heard[bit] = now

    def _silent(self, bits: int, since: float) -> int:
        """The receivers of ``bits`` not heard from since ``since``."""
        return sum(bit for bit in mask_bits(bits) if self._heard.get(bit, -math.inf) <= since)

    def _in_flight(self) -> list[int]:
        return serial.span(self.base, self.next_seq)

    def _clear(self, seq: int, bits: int, now: float) -> None:
        """``bits`` hold ``seq``."""
        slot = self._slots.get(seq)
        if slot is None or not slot.owing & bits:
            return
        slot.owing &= ~bits
        # Karn: a resent sequence's round trip is ambiguous; and one sent before a resend of an earlier
        # sequence may have waited for that repair at the receivers (cumulative points stop at holes).
        clean = slot.attempts == 1 and self._last_resend < slot.first_sent
        if clean:
            self.rto.observe(now - slot.first_sent)
        else:
            self.counters["rtt-samples-skipped"] += 1
        if not slot.owing:
            self._completed(seq, slot, now, clean)

    def _completed(self, seq: int, slot: _Slot, now: float, clean: bool) -> None:
        """``seq`` has no receiver owing it any more: RTT bookkeeping and the congestion window."""
        if clean:
            rtt = now - slot.first_sent
            self.srtt = rtt if self.srtt is None else 0.875 * self.srtt + 0.125 * rtt
            self.base_rtt = rtt if self.base_rtt is None else min(self.base_rtt, rtt)
            self._round_min = rtt if self._round_min is None else min(self._round_min, rtt)
            self._recent.append(rtt)
        round_ended = serial.le(self._round_end, seq)
        if round_ended:
            self._round_end = self.next_seq
            if self._round_min is not None and self.base_rtt and self._round_min > 0:
                self._queued = self.cwnd * (1.0 - self.base_rtt / self._round_min)
            self._round_min = None
        if self.config.initial_cwnd is None:
            return
        target = self.config.queue_target
        # Slow start doubles cwnd per round, too fast to wait for the round's end: it ends at the first
        # sample that shows a queue.
        if (
            target is not None
            and clean
            and self.cwnd < self.ssthresh
            and self.base_rtt
            and self.cwnd * (1.0 - self.base_rtt / (now - slot.first_sent)) > target / 2
        ):
            self.ssthresh = self.cwnd
            return
        if target is not None and self._queued is not None and self._queued > target / 2:
            self.ssthresh = min(self.ssthresh, self.cwnd)  # slow start ends at the first queue
            if self._queued > target and round_ended:
                self.counters["cwnd-delay-reductions"] += 1
                self.cwnd = max(2.0, self.cwnd - 1.0)
            return
        self.cwnd += 1.0 if self.cwnd < self.ssthresh else 1.0 / self.cwnd
        self.cwnd = min(self.cwnd, float(self.config.window))

    def _clear_before(self, cum: int, bits: int, now: float) -> None:
        if not bits:
            return
        for seq in self._in_flight():
            if not serial.lt(seq, cum):
                break
            self._clear(seq, bits, now)

    def _clear_selective(self, ack: Ack, bit: int, now: float) -> None:
        # Sequences in [cum, highest) outside every gap were received (selective acknowledgment).
        for seq in self._in_flight():
            if serial.le(ack.cum, seq) and serial.lt(seq, ack.highest) and not _in_ranges(seq, ack.ranges):
                self._clear(seq, bit, now)

    def _request(self, seq: int, bits: int, now: float, highest: int | None = None) -> None:
        slot = self._slots.get(seq)
        if slot is None:
            return
        bits &= slot.owing
        # a resend waits in the same queues as new data: the smoothed completion time, not the smallest
        holdoff = self.rto.current() if self.srtt is None else self.config.nack_holdoff * self.srtt
        # Loss by send order (RACK, RFC 8985): paths keep order, so a copy is lost only when the receiver
        # has something sent after it (``highest`` beyond the next sequence at the copy's send). A
        # request for a first transmission says exactly that; for a retransmission that may still be on
        # its way (a queue), only the holdoff answers a repeated request without that evidence.
        waiting = 0
        for bit in mask_bits(bits):
            sent = slot.resent.get(bit)
            if sent is None or now - sent[0] >= holdoff:
                continue
            if highest is None or not serial.lt(sent[1], highest):  # not overtaken: may be on its way
                waiting |= bit
        if waiting:
            self.counters["request-held-off"] += 1
            bits &= ~waiting
        if bits:
            self._congestion(seq)
            if seq not in self._pending:
                self._pending_due[seq] = now + self.config.nack_gather * (self.rtt_estimate() or 0.0)
            self._pending[seq] = self._pending.get(seq, 0) | bits

    def _request_oldest(self, cum: int, bits: int, now: float) -> None:
        # A partial AGG-ACK only says these receivers have not confirmed everything before ``cum``; their
        # exact gaps were absorbed below.  Resending the oldest sequence each owes is enough to move a
        # receiver whose NACK was lost; its own NACKs name any further gap. A receiver whose own
        # feedback reached us within a round trip needs no guess: its NACKs drive its repairs.
        if self.srtt is not None:
            heard = bits & ~self._silent(bits, now - self.srtt)
            if heard:
                self.counters["partial-receiver-heard"] += 1
                bits &= ~heard
        for seq in self._in_flight():
            if not bits or not serial.lt(seq, cum):
                break
            slot = self._slots[seq]
            if slot.owing & bits:
                if self.srtt is not None and now - slot.last_sent < self.srtt:
                    # Sent less than a round trip ago: no answer could have come yet.
                    self.counters["partial-too-early"] += 1
                else:
                    self._request(seq, slot.owing & bits, now)
                bits &= ~slot.owing

    def _advance(self, now: float) -> None:
        while self.base != self.next_seq:
            slot = self._slots.get(self.base)
            if slot is not None and slot.owing:
                break
            self._slots.pop(self.base, None)
            self.base = serial.add(self.base, 1)
        if self.completed_at is None and self.done:
            self.completed_at = now

    def _declare_failures(self, now: float) -> None:
        owing = 0
        for slot in self._slots.values():
            owing |= slot.owing
        for bit in mask_bits(owing & self.alive):
            heard = self._heard.get(bit)
            if heard is not None and now - heard > self.config.fail_after:
                self.alive &= ~bit
                self.failed[bit.bit_length()] = now
                self.counters["receivers-failed"] += 1
                for slot in self._slots.values():
                    slot.owing &= ~bit
        self._advance(now)


def mask_bits(mask: int) -> list[int]:
    """The single-bit masks of an id-mask, lowest first."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low)
        mask ^= low
    return out


def _in_ranges(seq: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(serial.le(first, seq) and serial.le(seq, last) for first, last in ranges)
