"""The BFIR side of one reliable flow: send window, retransmission timer, who still owes an ACK.

Pure logic: the caller gives every event its time ``now`` (fabric seconds) and sends what
:meth:`Sender.poll` returns, imposing BIER with the :class:`Transmission`'s ``bfers`` as BitString.

Receivers are named by BFR-id; sets of them are *id-masks*, ints with bit ``BFR-id − 1`` set (the
concatenation of the SIs' BitStrings, RFC 8279 §3), so one int covers any number of SIs.

For every sequence in flight the sender keeps the id-mask of receivers that still owe it (``owing``).
ACKs, NACKs and AGG-ACKs (cumulative, or selective for the range they name) clear bits; a sequence
leaves the window when nobody owes it.  Two things
retransmit, both to the owing subset only (the retransmission's BitString is the missing set):

* a NACK (or a partial AGG-ACK) asks for sequences for named receivers: retransmitted ``nack_gather``
  × RTO after the first request for that sequence, merged over every request that arrived meanwhile
  (one drop above several receivers makes each of them ask, a few milliseconds apart), unless that
  receiver was sent a retransmission of it less than ``nack_holdoff`` × a round trip ago (SRTT + 2
  RTTVAR, :meth:`Sender.round_trip_of`; it may still be on
  the way);
* the retransmission timer: ``RTO × 2**attempt`` after the last transmission (exponential backoff,
  capped at ``2**max_backoff``, and the timer itself at ``max_rto`` when set: RFC 6298 §5.5 lets the
  maximum RTO bound the doubling), and at least one RTO after the receiver last acknowledged new data
  (RFC 6298 §5.3 restarts the timer on such an ACK: a receiver whose answers keep coming is not timed
  out because a queue made its round trip longer than the RTO).  For each receiver only the oldest
  sequence it owes times out, as RFC 6298 §5.4 retransmits only the earliest unacknowledged segment, and
  it holds back that receiver's later timers for two RTOs after its last transmission (see
  :meth:`Sender._timeouts`);
* an AGG-NACK (a BFR's NACKs merged per repair round) names who asked and who below that BFR holds the
  sequences: the holders are cleared and the askers repaired at once (the BFR gathered them already).

The RTO is per *branch*: the neighbor feedback comes from (a first-hop BFR when BFRs aggregate, the
receiver itself end to end), one estimator each in a :class:`BranchRto` shared by a node's flows, so a new
flow starts from the round trips its node measured, and each branch gives one sample per sequence: when
the last of its receivers that owed the sequence is cleared.  A timer waits the longest RTO among the
branches of the receivers it is for.

The sequences a node's flows have in flight together may be bounded by a :class:`SendBudget` shared by
its senders (in payload bytes): without it, a source with several flows fills its link's shaper queue
and every timer fires for data that is only queued.

A receiver that owes something and has not been heard from for ``fail_after`` seconds is declared
failed: its bits are cleared everywhere and the flow completes for the others (the seed's "minimized
failure domain").  The RTO itself comes from an injected :class:`RtoPolicy`.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Protocol

from aidcnet.reliable import serial
from aidcnet.reliable.header import Ack, AggAck, AggNack, Data


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


class BranchRto:
    """One RTO estimator per branch (the neighbor, or the end-to-end receiver, a flow's feedback comes
    from), shared by the flows of one node.  ``make`` builds one; ``first`` is the guess for receivers
    not heard from yet (RFC 6298 §2.1's initial RTO).  RFC 6298 expects about one sample per round trip:
    fed every receiver's ACK of every sequence end to end (63 per packet on the superpod), one estimator's
    RTTVAR shrank to the spread between the receivers and its RTO to the mean round trip plus a few
    milliseconds, so a queue that grew a little timed out packets that were not lost."""

    KEEP = 4096  # branches remembered per node: unicast has one per receiver

    def __init__(self, make: Callable[[], RtoPolicy]) -> None:
        self._make = make
        self.first = make()
        self.branches: dict[Hashable, RtoPolicy] = {}

    @classmethod
    def single(cls, policy: RtoPolicy) -> BranchRto:
        """Every branch shares ``policy`` (one estimator for the node, or a fixed RTO)."""
        book = cls(lambda: policy)
        return book

    def policy(self, branch: Hashable) -> RtoPolicy:
        rto = self.branches.get(branch)
        if rto is None:
            rto = self.branches[branch] = self._make()
            if len(self.branches) > self.KEEP:
                del self.branches[next(iter(self.branches))]
        return rto


@dataclass(frozen=True)
class SenderConfig:
    window: int = 64  # sequences in flight (sent, owed by someone)
    max_backoff: int = 6  # cap of the exponent of the RTO backoff
    # Bound of the backed-off timer (None: only max_backoff). A receiver is declared failed after
    # fail_after without a word: without a bound, four lost round trips (2+4+8+16 s at a 2 s RTO) were
    # all the probes it got in 30 s, and at 5% loss per link a live receiver was declared failed.
    max_rto: float | None = None
    fail_after: float = 5.0  # seconds without feedback from a receiver that owes something
    # Fraction of the RTO during which a repeated request is not answered again. A whole RTO: the
    # retransmission and the answer to it take a round trip, and a receiver repeats its NACK sooner.
    nack_holdoff: float = 1.0
    # Fraction of the RTO a first request for a sequence waits for the others (0: the next poll).
    nack_gather: float = 0.0
    # Congestion window (None: only ``window`` limits what is in flight). Sequences in flight are at most
    # min(window, cwnd); cwnd starts here, grows by one per sequence every receiver acknowledged (slow
    # start) up to ssthresh and by 1/cwnd each above it, and halves (a timeout: drops to 1) once per loss
    # event, i.e. per window of sequences sent after the loss was seen (RFC 5681 §3.1, RFC 6582's
    # "recover"). A fixed window larger than a shaped path's queue keeps packets queued past the RTO.
    initial_cwnd: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.window <= serial.MAX_SPAN:
            raise ValueError(f"window {self.window} must be 1..{serial.MAX_SPAN}")
        if self.initial_cwnd is not None and not 1 <= self.initial_cwnd <= self.window:
            raise ValueError(f"initial_cwnd {self.initial_cwnd} must be 1..window ({self.window})")
        if self.fail_after <= 0 or self.nack_holdoff < 0 or self.max_backoff < 0:
            raise ValueError("fail_after must be > 0, nack_holdoff and max_backoff >= 0")
        if not 0 <= self.nack_gather < 1:
            raise ValueError(f"nack_gather {self.nack_gather} must be in [0, 1): a fraction of the RTO")
        if self.max_rto is not None and not 0 < self.max_rto < self.fail_after:
            raise ValueError(f"max_rto {self.max_rto} must be above 0 and below fail_after {self.fail_after}")


@dataclass(frozen=True)
class Transmission:
    """One DATA to send: impose BIER with BitString(s) ``bfers`` (an id-mask)."""

    data: Data
    bfers: int


class SendBudget:
    """Payload bytes the flows of one node may have in flight together (sent, owed by someone).

    Shared by the node's :class:`Sender` s: a flow takes from it when it sends a sequence for the first
    time and gives back when nobody owes that sequence any more.  One sequence may always be sent when
    nothing is in flight, so a message larger than the budget still goes."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"send budget {limit} must be at least one byte")
        self.limit = limit
        self.used = 0

    def room(self, size: int) -> bool:
        return self.used == 0 or self.used + size <= self.limit

    def take(self, size: int) -> None:
        self.used += size

    def give(self, size: int) -> None:
        self.used -= size


class _Slot:
    __slots__ = (
        "attempts", "charged", "deadline", "fin", "first_sent", "last_bits", "last_sent", "owing", "payload",
        "rto",
    )  # fmt: skip

    def __init__(self, payload: bytes, fin: bool) -> None:
        self.payload = payload
        self.fin = fin
        self.charged = False  # its bytes are in the SendBudget
        self.owing = 0
        self.attempts = 0
        self.first_sent = 0.0
        self.last_sent = 0.0
        self.last_bits = 0
        self.deadline = 0.0
        self.rto = 0.0  # the RTO its last transmission was timed by


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
        rto: RtoPolicy | BranchRto,
        config: SenderConfig | None = None,
        isn: int = 0,
        budget: SendBudget | None = None,
    ) -> None:
        self.bfir_id = bfir_id
        self.budget = budget
        self.flow_id = flow_id
        self.config = config or SenderConfig()
        self.rtos = rto if isinstance(rto, BranchRto) else BranchRto.single(rto)
        self._branch_bits: dict[Hashable, int] = {}  # receivers last heard through each branch
        self._branch: Hashable | None = None  # the branch of the feedback at hand
        self.alive = id_mask(receivers)
        if not self.alive:
            raise ValueError(f"flow {flow_id}: no receivers")
        self.failed: dict[int, float] = {}
        self.base = isn & serial.MASK  # oldest sequence someone may still owe
        self.next_seq = self.base  # next sequence to send for the first time
        self._slots: dict[int, _Slot] = {}
        self._queue: deque[tuple[bytes, bool]] = deque()
        self._queued_fin = False
        # seq -> (receivers that asked for it, when the gathered request is answered)
        self._pending: dict[int, tuple[int, float]] = {}
        self._wake = float("inf")  # when a retransmission timer can next run out (set by poll)
        # The newest sequence the feedback at hand speaks of, and its round trip if the feedback cleared it.
        self._answered: int | None = None
        self._sample: float | None = None
        self._heard: dict[int, float] = {}  # receiver bit -> last feedback (or first send) time
        self._progress: dict[int, float] = {}  # receiver bit -> when it last acknowledged new data
        # receiver bit -> (the sequence a timer last resent to it, when): once it answers, what it still
        # owes from before that repair goes again at once (_go_back).
        self._timed_out: dict[int, tuple[int, float]] = {}
        self.completed_at: float | None = None
        self.counters: Counter[str] = Counter()
        self.cwnd = float(self.config.initial_cwnd or self.config.window)
        self.ssthresh = float(self.config.window)
        self._recover = self.base  # loss signals for sequences before this belong to a loss event already met

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
        self._declare_failures(now)
        out: list[Transmission] = []
        due = [seq for seq, (_asked, t) in self._pending.items() if t <= now]
        for seq in sorted(due, key=lambda q: serial.distance(self.base, q)):
            asked, _t = self._pending.pop(seq)
            slot = self._slots.get(seq)
            if slot is not None and asked & slot.owing:
                out.append(self._send(seq, slot, asked & slot.owing, now))
        out.extend(self._timeouts(now))
        while self._queue and self._may_send_new():
            payload, fin = self._queue.popleft()
            if self.budget is not None:
                self.budget.take(len(payload))
            slot = _Slot(payload, fin)
            slot.owing = self.alive
            slot.charged = self.budget is not None
            self._slots[self.next_seq] = slot
            out.append(self._send(self.next_seq, slot, self.alive, now))
            self.next_seq = serial.add(self.next_seq, 1)
        self._advance(now)
        self._timeouts(now, fire=False)  # the new sequences' timers
        return out

    def round_trip_of(self, bits: int) -> float:
        """How long a repair to ``bits`` and its answer may take: the longest of their branches' smoothed
        round trip plus twice its variation (RFC 6298's SRTT and RTTVAR; the RTO until a branch has
        them). Not the RTO: its floor and its four variations are there so that a timer never fires for
        what is only late, and a lost repair waited that long before it was asked for again."""
        rtt = 0.0
        left = bits
        for branch, mask in self._branch_bits.items():
            if mask & left:
                rtt = max(rtt, _round_trip(self.rtos.policy(branch)))
                left &= ~mask
                if not left:
                    return rtt
        return max(rtt, _round_trip(self.rtos.first))

    def rto_of(self, bits: int) -> float:
        """The RTO for the receivers ``bits``: the longest of their branches' (the first guess for a
        receiver not heard from yet)."""
        rto = 0.0
        left = bits
        for branch, mask in self._branch_bits.items():
            if mask & left:
                rto = max(rto, self.rtos.policy(branch).current())
                left &= ~mask
                if not left:
                    return rto
        return max(rto, self.rtos.first.current())

    def next_deadline(self) -> float | None:
        """Earliest time :meth:`poll` has work (None: only feedback can change anything)."""
        if self._queue and self._may_send_new():
            return 0.0
        times = [t for _asked, t in self._pending.values()]
        if self._slots and self._wake < float("inf"):
            times.append(self._wake)
        # Only a receiver that owes something can be declared failed (_declare_failures): a caught-up
        # one's silence is no deadline, and once past it would wake the timer at once, again and again.
        owing = self._owing() & self.alive
        times.extend(t + self.config.fail_after for b, t in self._heard.items() if b & owing)
        return min(times) if times else None

    def _owing(self) -> int:
        """The receivers that owe an acknowledgment of some sequence in flight."""
        owing = 0
        for slot in self._slots.values():
            owing |= slot.owing
        return owing

    @property
    def can_send_new(self) -> bool:
        """A queued message the window and the send budget have room for (a poll would send it)."""
        return bool(self._queue) and self._may_send_new()

    def _may_send_new(self) -> bool:
        """The window, and the node's send budget, have room for the next queued message."""
        if serial.distance(self.base, self.next_seq) >= self.window:
            return False
        return self.budget is None or self.budget.room(len(self._queue[0][0]))

    def _timeouts(self, now: float, fire: bool = True) -> list[Transmission]:
        """Retransmissions whose timer ran out (none unless ``fire``); sets ``_wake`` to when a timer can
        next run out, which :meth:`next_deadline` reports until the next poll or feedback.

        For each receiver only the oldest sequence it owes may time out (RFC 6298 §5.4 retransmits the
        earliest unacknowledged segment), not before one RTO after the receiver last acknowledged new data
        (§5.3's restart), and that sequence holds back the receiver's later timers for two RTOs after its
        last transmission, or while a NACK's retransmission of it is pending: its acknowledgments of what
        follows may wait on the repair (a BFR whose aggregation window spans several sequences absorbs
        ACKs inside the window). A repair that stays unanswered longer no longer explains the silence, and
        the next sequence's timer may fire too (the simulation found a flow that never completed
        otherwise). One receiver's repairs never hold back another's timers: BFRs acknowledge what their
        BFERs hold above a hole selectively, so its siblings' ACKs do not wait on it, and a receiver that
        lost the flow's last packets (it sees no hole and sends nothing) had waited behind the others'
        repairs until it was declared failed."""
        out = []
        wake = float("inf")
        blocked = 0  # receivers whose older sequence is under repair
        for seq in self._in_flight():
            slot = self._slots.get(seq)
            if slot is None or not slot.owing & ~blocked:
                continue
            if seq in self._pending:
                # Asked for: its retransmission is due soon (a timer would double it).
                blocked |= slot.owing
            else:
                due, later = self._due(slot, slot.owing & ~blocked, now)
                if fire and due and slot.last_sent != now:
                    self.counters["timeouts"] += 1
                    if slot.attempts > 1:
                        self.counters["timeouts-of-retransmissions"] += 1
                    self._congestion(seq, timeout=True)
                    out.append(self._send(seq, slot, due, now))
                    for bit in _bits(due):
                        self._timed_out[bit] = (seq, now)
                    due, later = 0, slot.deadline
                wake = min(wake, later if not due else now)
                hold_until = slot.last_sent + 2 * slot.rto
                if now < hold_until:
                    wake = min(wake, hold_until)
                    blocked |= slot.owing
            if self.alive & ~blocked == 0:
                break
        self._wake = wake
        return out

    def _due(self, slot: _Slot, bits: int, now: float) -> tuple[int, float]:
        """Of the receivers ``bits`` whose oldest owed sequence is ``slot``: those whose timer ran out, and
        when the next of the others' runs out. A receiver's timer runs from the slot's deadline, or one RTO
        after it last acknowledged new data when that is later (RFC 6298 §5.3)."""
        if now < slot.deadline:
            later = slot.deadline
            due = 0
        else:
            later = float("inf")
            due = bits
        if not self._progress or not due:
            return due, later
        restarted = 0
        for bit in _bits(due):
            progress = self._progress.get(bit)
            if progress is not None and now < progress + slot.rto:
                restarted |= bit
                later = min(later, progress + slot.rto)
        return due & ~restarted, later

    def on_feedback(self, msg: Ack | AggAck | AggNack, now: float, branch: Hashable | None = None) -> None:
        """Apply an ACK, NACK, AGG-ACK or AGG-NACK for this flow (the caller matched BFIR-id and Flow ID)
        that came from ``branch`` (the neighbor, or the receiver end to end; None: one branch for all).

        At most one round-trip sample per feedback: from the newest sequence it speaks of (an ACK's
        Highest − 1, an AGG-ACK's Cumulative − 1), when that one was sent once (Karn's rule) and this
        feedback clears the last of the branch's receivers that owed it, i.e. the feedback answers that
        sequence's arrival at the whole branch.  The older ones it clears waited, for a hole's repair or
        for an acknowledgment lost and said again, and would feed the estimator that wait; a NACK (its
        cumulative point moved with a repair), an AGG-NACK and a partial AGG-ACK (sent when a BFR's timer
        ran out) give none."""
        partial = isinstance(msg, AggAck) and msg.partial
        if isinstance(msg, AggNack) or partial:
            self._answered = None
        else:
            self._answered = serial.add(msg.highest if isinstance(msg, Ack) else msg.cum, -1)
        self._sample = None
        self._branch = branch
        if isinstance(msg, AggNack):
            self._left(msg.last)
            self._on_agg_nack(msg, now)
        elif isinstance(msg, AggAck):
            if msg.acked:
                self._left(serial.add(msg.cum, -1))
            self.counters["agg-ack-partial" if msg.partial else "agg-ack"] += 1
            acked = msg.acked_mask() & self.alive
            self._route(acked | msg.missing_mask() & self.alive)
            self._hear(acked, now)
            if msg.first is not None:
                self._clear_span(msg.first, msg.cum, acked, now)
            else:
                self._clear_before(msg.cum, acked, now)
            if msg.partial:
                self._request_oldest(msg.cum, msg.missing_mask() & self.alive, now)
        elif not self._on_ack(msg, now):
            return
        if self._sample is not None:
            self.rtos.policy(branch).observe(self._sample)
        self._go_back(now)
        self._advance(now)
        self._timeouts(now, fire=False)  # which timer is the oldest now

    def _go_back(self, now: float) -> None:
        """After a timeout, as TCP does (RFC 5681 §3.1, RFC 6675 §5.1): once a receiver has acknowledged
        the sequence a timer resent to it, whatever it still owes that was last sent before that repair
        is lost too, since a flow's packets keep to one path in order and would have arrived first. It
        goes again at once, instead of waiting for a timer of its own: a tail that no receiver saw a hole
        in (a BFR restarted with it in flight) took one RTO per sequence."""
        for bit, (seq, at) in list(self._timed_out.items()):
            slot = self._slots.get(seq)
            if slot is not None and slot.owing & bit:
                continue  # the repair not answered yet
            del self._timed_out[bit]
            if not bit & self.alive:
                continue
            for q in self._in_flight():
                owed = self._slots.get(q)
                # Only what no receiver acknowledged since it was last sent: lost before the flow's paths
                # part (the tail a failed link or BFR took). A sequence some receivers hold went through,
                # and the others' NACKs name it; resent on this evidence it was mostly sent for nothing,
                # and its own timer backed off the further.
                if (
                    owed is not None
                    and owed.owing & bit
                    and owed.last_sent < at
                    and owed.owing & owed.last_bits == owed.last_bits & self.alive
                ):
                    self.counters["gone-back"] += 1
                    self._request(q, bit, now, at_once=True)

    def _on_ack(self, msg: Ack, now: float) -> bool:
        """A receiver's ACK or NACK; False when it is not one of ours."""
        self.counters["nack" if msg.nack else "ack"] += 1
        bit = 1 << (msg.reporter - 1)
        if not bit & self.alive:
            self.counters["feedback-unknown-receiver"] += 1
            return False
        self._hear(bit, now)
        self._left(serial.add(msg.highest, -1))
        self._clear_before(msg.cum, bit, now)
        if not msg.nack:
            # A NACK's ranges are the gaps it asks for now, not all of them: no selective ACK in it.
            self._clear_selective(msg, bit, now)
        else:
            for seq in self._in_flight():
                if _in_ranges(seq, msg.ranges):
                    self._request(seq, bit, now)
        return True

    def _on_agg_nack(self, msg: AggNack, now: float) -> None:
        """A BFR's merged NACKs: its holders hold the sequences, its askers are repaired at once (the BFR
        gathered its siblings' NACKs already); ``again`` (the last repair passed that BFR and missed them)
        skips the holdoff."""
        self.counters["agg-nack"] += 1
        askers, holders = msg.askers_mask() & self.alive, msg.holders_mask() & self.alive
        self._hear(askers | holders, now)
        end = serial.add(msg.last, 1)
        for seq in self._in_flight():
            if not serial.lt(seq, end):
                break
            if serial.le(msg.first, seq):
                self._clear(seq, holders, now)
                self._request(seq, askers, now, at_once=True, again=msg.again)

    # -- internals ---------------------------------------------------------------------------------

    @property
    def window(self) -> int:
        """Sequences that may be in flight now."""
        return max(1, min(self.config.window, int(self.cwnd)))

    def _congestion(self, seq: int, timeout: bool = False) -> None:
        if self.config.initial_cwnd is None or serial.lt(seq, self._recover):
            return
        self._recover = self.next_seq
        self.counters["cwnd-reductions"] += 1
        self.ssthresh = max(2.0, self.cwnd / 2)
        self.cwnd = 1.0 if timeout else self.ssthresh

    def _send(self, seq: int, slot: _Slot, bits: int, now: float) -> Transmission:
        retransmit = slot.attempts > 0
        rto = slot.rto = self.rto_of(bits)
        if slot.attempts == 1:
            self.counters["repaired-sequences"] += 1  # sent again at least once: some receiver lost it
        if retransmit:
            self.counters["retransmitted"] += 1
            self.counters["retransmitted-bytes"] += len(slot.payload)
        else:
            slot.first_sent = now
            self.counters["sent"] += 1
            self.counters["sent-bytes"] += len(slot.payload)
        slot.attempts += 1
        slot.last_sent = now
        slot.last_bits = bits
        wait = rto * (1 << min(slot.attempts - 1, self.config.max_backoff))
        if self.config.max_rto is not None:
            wait = min(wait, max(rto, self.config.max_rto))
        slot.deadline = now + wait
        for bit in _bits(bits & ~self._heard_mask()):
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
        for bit in _bits(bits):
            self._heard[bit] = now
        self._route(bits)

    def _route(self, bits: int) -> None:
        """The receivers ``bits`` are behind the branch the feedback at hand came from."""
        branch = self._branch
        if branch is None or not bits or self._branch_bits.get(branch, 0) & bits == bits:
            return
        for other, mask in list(self._branch_bits.items()):
            if mask & bits and other != branch:
                if mask & ~bits:
                    self._branch_bits[other] = mask & ~bits
                else:
                    del self._branch_bits[other]
        self._branch_bits[branch] = self._branch_bits.get(branch, 0) | bits

    def _in_flight(self) -> list[int]:
        return serial.span(self.base, self.next_seq)

    def _clear(self, seq: int, bits: int, now: float, progress: bool = False) -> None:
        """``bits`` hold ``seq``; ``progress``: a cumulative acknowledgment said so (it restarts their
        timers, RFC 6298 §5.3: a selective one does not, as TCP's SACK blocks do not, so a receiver stuck
        at a hole whose NACKs are lost is still repaired by its timer)."""
        slot = self._slots.get(seq)
        if slot is None or not slot.owing & bits:
            return
        if progress:
            for bit in _bits(slot.owing & bits):
                self._progress[bit] = now
        slot.owing &= ~bits
        self._release(slot)  # someone holds it: it has left this node's link (:meth:`_left`)
        branch = self._branch_bits.get(self._branch, 0) if self._branch is not None else 0
        if slot.attempts == 1 and seq == self._answered and not slot.owing & branch:
            self._sample = now - slot.first_sent
        if not slot.owing and self.config.initial_cwnd is not None:
            self.cwnd += 1.0 if self.cwnd < self.ssthresh else 1.0 / self.cwnd
            self.cwnd = min(self.cwnd, float(self.config.window))

    def _clear_before(self, cum: int, bits: int, now: float) -> None:
        self._clear_span(self.base, cum, bits, now, progress=True)

    def _clear_span(self, first: int, end: int, bits: int, now: float, progress: bool = False) -> None:
        """``bits`` hold [first, end), whatever they lack before it (a selective AGG-ACK)."""
        if not bits:
            return
        for seq in self._in_flight():
            if not serial.lt(seq, end):
                break
            if serial.le(first, seq):
                self._clear(seq, bits, now, progress)

    def _clear_selective(self, ack: Ack, bit: int, now: float) -> None:
        # Sequences in [cum, highest) outside every gap were received (selective acknowledgment).
        for seq in self._in_flight():
            if serial.le(ack.cum, seq) and serial.lt(seq, ack.highest) and not _in_ranges(seq, ack.ranges):
                self._clear(seq, bit, now)

    def _request(self, seq: int, bits: int, now: float, at_once: bool = False, again: bool = False) -> None:
        slot = self._slots.get(seq)
        if slot is None:
            return
        bits &= slot.owing
        if not bits:
            return
        holdoff = 0.0 if again else self.config.nack_holdoff * self.round_trip_of(bits)
        due = now + (0.0 if at_once else self.config.nack_gather * self.rto_of(bits))
        # Only a retransmission can still be on its way: a request for a first transmission means a
        # later sequence overtook it, so it is lost. A repeated request within the holdoff waits for its
        # end (answered then unless the receiver acknowledged meanwhile): dropped, it waited for the
        # receiver's next NACK, whose interval doubles.
        if slot.attempts > 1 and bits & slot.last_bits and now - slot.last_sent < holdoff:
            self.counters["request-held-off"] += 1
            if not bits & ~slot.last_bits:
                due = max(due, slot.last_sent + holdoff)
        self._congestion(seq)
        if seq in self._pending:
            self.counters["requests-gathered"] += 1
            asked, first_due = self._pending[seq]
            self._pending[seq] = (asked | bits, min(first_due, due))
        else:
            self._pending[seq] = (bits, due)

    def _request_oldest(self, cum: int, bits: int, now: float) -> None:
        # A partial AGG-ACK only says these receivers have not confirmed everything before ``cum``; their
        # exact gaps were absorbed below.  Resending the oldest sequence each owes is enough to move a
        # receiver whose NACK was lost; its own NACKs name any further gap.
        for seq in self._in_flight():
            if not bits or not serial.lt(seq, cum):
                break
            slot = self._slots[seq]
            if slot.owing & bits:
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
        for bit in _bits(self._owing() & self.alive):
            heard = self._heard.get(bit)
            if heard is not None and now - heard > self.config.fail_after:
                self.alive &= ~bit
                self.failed[bit.bit_length()] = now
                self.counters["receivers-failed"] += 1
                for slot in self._slots.values():
                    slot.owing &= ~bit
                    if not slot.owing:
                        self._release(slot)
        self._advance(now)

    def _left(self, seq: int) -> None:
        """Someone holds ``seq``: it and every sequence before it have left this node's link (one path
        per flow, in order), so their bytes no longer count against the send budget, whatever the receivers
        still owe: the budget bounds what may wait behind the link, and a repair is not charged."""
        if self.budget is None:
            return
        for q in self._in_flight():
            if serial.lt(seq, q):
                break
            slot = self._slots.get(q)
            if slot is not None:
                self._release(slot)

    def _release(self, slot: _Slot) -> None:
        if slot.charged and self.budget is not None:
            self.budget.give(len(slot.payload))
            slot.charged = False


def _round_trip(rto: RtoPolicy) -> float:
    srtt, rttvar = getattr(rto, "srtt", None), getattr(rto, "rttvar", None)
    if srtt is None or rttvar is None:
        return rto.current()
    return min(rto.current(), srtt + 2 * rttvar)


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low)
        mask ^= low
    return out


def _in_ranges(seq: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(serial.le(first, seq) and serial.le(seq, last) for first, last in ranges)
