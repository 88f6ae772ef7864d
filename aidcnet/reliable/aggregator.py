"""In-network ACK aggregation at a BFR (seed 000, draft-zzhang-bier-optimized-use-in-aidc; ours).

A BFR that forwards DATA of a flow remembers, per (BFIR-id, Flow ID, sequence window), the id-mask of
the downstream BFERs it sent that window to (the BitStrings of its copies, i.e. BitString AND F-BM for
each BFR-NBR, RFC 8279 §6.5, plus its own bit when it delivered locally) and which of them have
acknowledged the whole window.  Feedback travels toward the BFIR on the reverse of the DATA's path,
so every ACK and AGG-ACK from below passes this BFR:

* when every expected BFER has acknowledged a window, one AGG-ACK (cumulative = the window's end,
  acked = the expected set) goes upstream and the entry is freed;
* when every expected BFER holds a window but some still lack an earlier sequence (their ACKs say so
  selectively: received runs above the cumulative point, or a selective AGG-ACK from below), one
  *selective* AGG-ACK for the window (First = its start) goes upstream at once and the entry stays for
  the cumulative one.  Without it one receiver's hole held everyone's acknowledgments of everything
  after it until the repair came back, and with them the BFIR's send budget and its timers;
* ``partial_after`` seconds after the entry was made (and again after 2, 4, ... times that, capped
  at ``2**max_backoff``), a partial AGG-ACK names who acknowledged and who is missing, so the BFIR
  can retransmit to the missing BFERs only, before its own timer would resend to everyone; a partial
  from below whose missing BFERs are all that is left here is passed on at once instead of waiting
  for this BFR's own timer;
* with ``adaptive`` (the default) ``partial_after`` is only the first guess (and ``partial_floor`` the
  floor): each flow's timer then follows the time its windows take from first DATA to last ACK here, as
  RFC 6298 makes an RTO follow round trips (SRTT + 4 RTTVAR, at most ``lifetime`` / 2). A fixed timer
  shorter than a queue's delay sends a partial for windows that are only queued, and the BFIR answers it
  with retransmissions and its own extra ACK (the lab's 1.038 ACKs per packet for 1 branch). Karn's rule:
  a window that got DATA again after its first partial (a repair) gives no sample;
* an ACK this BFR cannot account for (no entry of its flow expects the reporter at that point: the
  entry was never made because the budget was full, expired, or the ACK is stale) is passed upstream
  unchanged: end-to-end acknowledgment is the fallback, so losing state here never loses data. The
  exception is an ACK that says nothing the flow's last cumulative AGG-ACK from here did not, within
  one partial wait of it (counted ``absorbed-reported``): the answer to a retransmission that crossed
  that AGG-ACK;
* NACKs are merged (``merge_nacks``, the default; PGM's NAK suppression in the routers, RFC 3208
  §7): the first NACK of a sequence opens a *repair round*, which gathers its siblings' NACKs for a
  moment (:meth:`AckAggregator.gather_wait`) and then says them upstream as one AGG-NACK: the
  sequences, the BFERs that asked (the repair's BitString) and the BFERs below that hold them (the BFIR
  need not wait for those). Until the repair passes this BFR (or a round trip upstream, measured per
  upstream neighbor, :meth:`AckAggregator.round_wait`, runs out) further NACKs of the sequence are
  absorbed; askers the repair passing here did not cover open the next round at once, flagged
  ``again``. So the BFIR hears one NACK per flow, sequence and repair round per branch, not one per
  receiver. Their cumulative point is still used like an ACK's, and a window whose missing BFERs have
  all asked for it themselves since its last partial sends no partial (the BFIR knows; partials are for
  BFERs that stay silent, such as one that lost the flow's last packets and sees no hole);
* entries expire ``lifetime`` seconds after the last DATA or feedback of their flow passed this BFR
  (a window whose hole outlived a lifetime counted from its first DATA lost its state while the flow
  was still running, and its BFERs' later ACKs reached the BFIR end to end); at most ``budget``
  entries exist, and DATA that would need one more is counted ``over-budget`` and forwarded without
  state.

``window`` sequences share one entry (a power of two, so windows line up across the 2**32 wrap).
Every decision bumps one counter.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass

from aidcnet.bier.bitstring import BSL_CODES
from aidcnet.reliable import serial
from aidcnet.reliable.header import Ack, AggAck, AggNack, Data, Feedback, agg_acks, agg_nacks
from aidcnet.rto import RtoEstimator

FlowKey = tuple[int, int]
Out = tuple[Hashable | None, Feedback]
"""Feedback to send: (upstream neighbor, message); neighbor None = route toward the BFIR by unicast."""


@dataclass(frozen=True)
class AggregatorConfig:
    window: int = 1  # sequences per entry
    partial_after: float = 0.004
    lifetime: float = 1.0
    budget: int = 4096  # entries
    max_backoff: int = 5  # partials of one entry come after partial_after × 2**k, k capped here
    bsl: int = 64  # BitString length of the AGG-ACKs it sends
    adaptive: bool = True  # per-flow partial timer from window completion times (first guess partial_after)
    # The least a learned partial timer may be (None: partial_after). A BFR's window completes within a
    # round trip below it, shorter than the BFIR's RTO: a floor at the BFIR's first RTO made its timer fire
    # before the partial could say who was missing, and it resent to every BFER the window was owed by.
    partial_floor: float | None = None
    # Windows acknowledged below whose AGG-ACK waits for the next one, as a receiver delays its ACK for a
    # second segment: with one AGG-ACK per window the BFIR hears one per packet per branch already
    # without loss, and every repair and partial puts it over that. The wait is report_delay, or with
    # ``adaptive`` twice the flow's DATA inter-arrival time here when that is longer (at most
    # partial_after / 2): a fixed wait shorter than the gap between packets pairs none of them.
    report_every: int = 2
    report_delay: float = 0.002
    # The most that wait may be (None: partial_after / 2). Every BFR on the way back may hold a window's
    # AGG-ACK this long, and the BFIR's timer runs meanwhile: three levels of leaf-spine holding up to
    # partial_after / 2 each put the answer past the BFIR's RTO floor (timers fired at 0% loss while the
    # BFIR, its send budget full of windows that waited here, had nothing new to send).
    report_max: float | None = None
    # NACKs of one sequence are merged into one AGG-NACK per repair round (False: passed on unchanged).
    merge_nacks: bool = True
    # A NACK names at most this many sequences that open or join a repair round here (the rest wait for
    # the receiver's next NACK): a NACK may name 64 ranges of any length.
    max_nack_sequences: int = 1024

    def __post_init__(self) -> None:
        if self.window < 1 or self.window & (self.window - 1) or self.window > 1 << 16:
            raise ValueError(f"window {self.window} must be a power of two, 1..65536")
        if not 0 < self.partial_after < self.lifetime:
            raise ValueError("need 0 < partial_after < lifetime")
        if self.partial_floor is not None and not 0 < self.partial_floor <= self.partial_after:
            raise ValueError("need 0 < partial_floor <= partial_after")
        if self.budget < 0:
            raise ValueError("budget must be >= 0")
        if self.bsl not in BSL_CODES:
            raise ValueError(f"bsl {self.bsl} must be one of {sorted(BSL_CODES)}")
        if self.report_every < 1 or not 0 <= self.report_delay < self.partial_after:
            raise ValueError("need report_every >= 1 and 0 <= report_delay < partial_after")
        if self.report_max is not None and not self.report_delay <= self.report_max < self.partial_after:
            raise ValueError("need report_delay <= report_max < partial_after")


class _Entry:
    __slots__ = (
        "acked",
        "again",
        "asked",
        "born",
        "deadline",
        "end",
        "expected",
        "fin",
        "held",
        "partials",
        "repaired",
        "reported_missing",
        "selective_sent",
        "start",
        "upstream",
    )

    def __init__(self, start: int, end: int, upstream: Hashable | None, now: float, wait: float):
        self.start = start
        self.born = now
        self.repaired = False
        self.end = end
        self.expected = 0
        self.acked = 0  # BFERs that hold every sequence before ``end``
        self.held = 0  # BFERs that hold [start, end): ``acked`` and those that said so selectively
        self.selective_sent = False  # its selective AGG-ACK went upstream; the cumulative one is owed
        self.fin = False  # it holds the flow's last sequence
        self.asked = 0  # BFERs whose NACK for a sequence of it passed here since its last partial
        self.again = False  # a repair came for BFERs that acknowledged it here: say what it knows at once
        self.reported_missing = 0
        self.partials = 0
        self.upstream = upstream
        self.deadline = now + wait

    def covers(self, cum: int) -> bool:
        """The receiver with cumulative point ``cum`` is inside this window."""
        return serial.le(self.start, cum) and serial.lt(cum, self.end)

    def within(self, first: int, end: int) -> bool:
        """Every sequence of this window is in ``[first, end)``."""
        return serial.le(first, self.start) and serial.le(self.end, end)


class _Round:
    """One sequence's repair round at this BFR: who asked, who is not said upstream yet, when."""

    __slots__ = ("again", "askers", "due", "passed_at", "pending", "sent_at", "upstream")

    def __init__(self, askers: int, due: float, upstream: Hashable | None, again: bool = False) -> None:
        self.askers = askers  # every BFER that asked in this round
        self.pending = askers  # askers not yet said upstream
        self.due: float | None = due  # when the pending askers go up (the gather ends)
        self.sent_at: float | None = None  # when the round's AGG-NACK went
        self.passed_at: float | None = None  # when its repair passed here (the round is over)
        self.upstream = upstream
        self.again = again


class AckAggregator:
    """The aggregation state of one BFR (``bfr_id``: its BFR-id, or 0 for a BFR without one)."""

    def __init__(self, bfr_id: int = 0, config: AggregatorConfig | None = None) -> None:
        self.bfr_id = bfr_id
        self.config = config or AggregatorConfig()
        self.flows: dict[FlowKey, dict[int, _Entry]] = {}
        self.entries = 0
        self.counters: Counter[str] = Counter()
        self.timers: dict[FlowKey, RtoEstimator] = {}
        self.report_due: dict[FlowKey, float] = {}  # when a flow's waiting AGG-ACK goes at the latest
        self.seen: dict[FlowKey, float] = {}  # the flow's last DATA or feedback here: its entries live on
        # The flow's last cumulative AGG-ACK from here: its Cumulative, the BFERs it named, when it went.
        self.reported: dict[FlowKey, tuple[int, int, float]] = {}
        self.arrivals: dict[FlowKey, tuple[float, float | None]] = {}  # last DATA, smoothed gap between
        self.rounds: dict[FlowKey, dict[int, _Round]] = {}  # repair rounds per flow and sequence
        # Per flow, per BFER bit below: the sequence after the highest it is known to have received.
        self.ahead: dict[FlowKey, dict[int, int]] = {}
        # The round trip from an AGG-NACK to its repair passing here, per upstream neighbor (the branch
        # toward the BFIR): how long a round stays open without its repair.
        self.upstream_rtt: dict[Hashable | None, RtoEstimator] = {}

    def partial_wait(self, key: FlowKey) -> float:
        """How long a new window of flow ``key`` waits before its first partial AGG-ACK."""
        timer = self.timers.get(key)
        return timer.current() if timer is not None else self.config.partial_after

    def report_wait(self, key: FlowKey) -> float:
        """How long a window of flow ``key`` acknowledged below waits for the next one's AGG-ACK."""
        cfg = self.config
        _last, gap = self.arrivals.get(key, (0.0, None))
        if not cfg.adaptive or gap is None:
            return cfg.report_delay
        most = cfg.partial_after / 2 if cfg.report_max is None else cfg.report_max
        return max(cfg.report_delay, min(2 * gap, most))

    def gather_wait(self, key: FlowKey) -> float:
        """How long the first NACK of a sequence waits for its siblings' before going upstream. Receivers see
        a hole when the next DATA arrives, which reaches them about together: their NACKs come within the
        spread of the round trip below, a fraction of it. A quarter of the flow's smoothed window completion
        time here (first DATA to last ACK), at most the wait of a window's AGG-ACK for the next
        (:meth:`report_wait`), which is also the guess before a window completed."""
        wait = self.report_wait(key)
        timer = self.timers.get(key)
        if timer is not None and timer.srtt is not None:
            wait = min(wait, timer.srtt / 4)
        return wait

    def round_wait(self, upstream: Hashable | None) -> float:
        """How long a repair round stays open after its AGG-NACK went, without the repair passing here."""
        rtt = self.upstream_rtt.get(upstream)
        return rtt.current() if rtt is not None else self.config.partial_after

    def forget(self) -> int:
        """Drop every entry and every learned timer, keeping the counters; returns the entries dropped.
        Before a new run: a window the last run left open would otherwise go on sending partial
        AGG-ACKs toward its BFIR for the aggregator's lifetime."""
        dropped = self.entries
        self.flows.clear()
        self.timers.clear()
        self.report_due.clear()
        self.seen.clear()
        self.arrivals.clear()
        self.reported.clear()
        self.rounds.clear()
        self.ahead.clear()
        self.upstream_rtt.clear()
        self.entries = 0
        self.counters["forgotten"] += dropped
        return dropped

    def _drop_flow(self, key: FlowKey) -> None:
        """The flow has no entry left here."""
        self.flows.pop(key, None)
        self.report_due.pop(key, None)
        self.seen.pop(key, None)
        self.ahead.pop(key, None)

    def _arrival(self, key: FlowKey, now: float) -> None:
        """Smooth the gap between the flow's DATA here (RFC 6298's SRTT gain, 1/8)."""
        last, gap = self.arrivals.pop(key, (None, None))
        if last is not None:
            sample = now - last
            gap = sample if gap is None else gap + (sample - gap) / 8
        self.arrivals[key] = (now, gap)  # most recent last, so the oldest flow is dropped first
        if len(self.arrivals) > max(1, self.config.budget):
            del self.arrivals[next(iter(self.arrivals))]

    def _timer(self, key: FlowKey) -> RtoEstimator:
        timer = self.timers.get(key)
        if timer is None:
            cfg = self.config
            timer = RtoEstimator(
                initial=cfg.partial_after,
                min_rto=cfg.partial_after if cfg.partial_floor is None else cfg.partial_floor,
                max_rto=max(cfg.partial_after, cfg.lifetime / 2),
            )
            self.timers[key] = timer
            if len(self.timers) > max(1, self.config.budget):
                # Every op is a flow in the lab: forget the flow heard of longest ago, not grow forever.
                del self.timers[next(iter(self.timers))]
        return timer

    def on_data(self, data: Data, downstream: int, upstream: Hashable | None, now: float) -> None:
        """DATA this BFR forwarded (or delivered) to the BFERs of id-mask ``downstream``.

        ``upstream`` is where the DATA came from: the neighbor feedback for this flow goes back to.
        """
        if not downstream:
            return
        key = (data.bfir_id, data.flow_id)
        if data.retransmit:
            self._repair_passed(key, data.seq, downstream, now)
        self._arrival(key, now)
        start = data.seq & ~(self.config.window - 1)
        flow = self.flows.get(key)
        entry = flow.get(start) if flow else None
        if entry is None:
            if self.entries >= self.config.budget:
                self.counters["over-budget"] += 1
                if flow:
                    self.seen[key] = now
                return
            end = serial.add(data.seq, 1) if data.fin else serial.add(start, self.config.window)
            entry = _Entry(start, end, upstream, now, self.partial_wait(key))
            self.flows.setdefault(key, {})[start] = entry
            self.entries += 1
            self.counters["entries-made"] += 1
        else:
            if entry.partials:
                entry.repaired = True
            if data.retransmit and entry.selective_sent:
                # The BFIR resends what every BFER below holds: it has not heard our selective AGG-ACK
                # (lost, or nothing came after it to say it again). The answer to the repair says it again.
                entry.selective_sent = False
                self.counters["selective-again"] += 1
            elif data.retransmit and downstream & entry.acked and entry.held != entry.expected:
                # A repair for BFERs that acknowledged the window here while others still lack it: the
                # BFIR has not heard them (their AGG-ACK waits for the others, who may never answer here:
                # an ACK of theirs was lost, and what they hold reached the BFIR another way). A partial at
                # once says who acknowledged; before, their answers to each repair were absorbed here and
                # the BFIR resent until it declared one of them failed.
                entry.again = True
                entry.deadline = now
            if data.fin:
                entry.end = serial.add(data.seq, 1)
        entry.fin |= data.fin
        self.seen[key] = now
        entry.expected |= downstream
        entry.upstream = upstream

    def on_feedback(self, msg: Feedback, now: float) -> list[Out]:
        """An ACK, NACK, AGG-ACK or AGG-NACK from below: absorbed, aggregated, merged or passed upstream."""
        key = (msg.bfir_id, msg.flow_id)
        flow = self.flows.get(key, {})
        if flow:
            self.seen[key] = now
        if isinstance(msg, AggNack):
            if flow:
                self._saw(key, msg.askers_mask(), serial.add(msg.last, 1))
            return self._on_agg_nack(key, flow, msg, now)
        if isinstance(msg, AggAck):
            reporters, missing = msg.acked_mask(), msg.missing_mask()
        else:
            reporters, missing = 1 << (msg.reporter - 1), 0
        if flow:
            self._saw(key, reporters, msg.highest if isinstance(msg, Ack) else msg.cum)
        if isinstance(msg, AggAck) and msg.first is not None:
            claimed = self._apply_held(flow, [(msg.first, msg.cum)], reporters, missing, msg.cum)
        else:
            claimed = self._apply(flow, msg.cum, reporters, missing)
            if isinstance(msg, Ack) and not msg.nack and msg.ranges:
                # A NACK's ranges are the gaps asked for now, not all of them: only an ACK's say what is held.
                claimed |= self._apply_held(flow, _received_runs(msg), reporters, 0, None)
        out = self._finished(key, flow, now)
        if isinstance(msg, Ack) and msg.nack:
            self._asked(flow, msg.ranges, reporters)
            if self.config.merge_nacks:
                self._merge(key, flow, msg.missing()[: self.config.max_nack_sequences], reporters, now)
            else:
                self.counters["nack-passed"] += 1
                out.append((self._upstream(flow), msg))
        elif claimed == reporters | missing:
            self.counters["absorbed"] += 1
        elif isinstance(msg, Ack) and self._just_reported(key, msg, reporters, now):
            self.counters["absorbed-reported"] += 1
        else:
            self.counters["passed-no-entry"] += 1
            out.append((self._upstream(flow), msg))
        return out

    def _on_agg_nack(self, key: FlowKey, flow: dict[int, _Entry], msg: AggNack, now: float) -> list[Out]:
        """A BFR below merged its BFERs' NACKs: its holders hold the sequences, its askers join our round."""
        askers, holders = msg.askers_mask(), msg.holders_mask()
        if holders:
            self._apply_held(flow, [(msg.first, serial.add(msg.last, 1))], holders, 0, None)
        out = self._finished(key, flow, now)
        self._asked(flow, ((msg.first, msg.last),), askers)
        if not self.config.merge_nacks:
            self.counters["nack-passed"] += 1
            return [*out, (self._upstream(flow), msg)]
        seqs = msg.sequences()[: self.config.max_nack_sequences]
        self._merge(key, flow, seqs, askers, now, again=msg.again)
        return out

    def _saw(self, key: FlowKey, bfers: int, highest: int) -> None:
        """The BFERs ``bfers`` have received something before ``highest`` (an ACK's Highest, an AGG-ACK's
        Cumulative): a hole before it they see, and ask for themselves."""
        ahead = self.ahead.setdefault(key, {})
        while bfers:
            bit = bfers & -bfers
            bfers ^= bit
            if serial.lt(ahead.get(bit, highest), highest) or bit not in ahead:
                ahead[bit] = highest

    def _ahead_of(self, key: FlowKey, end: int) -> int:
        """The BFERs known to have received a sequence at or after ``end``."""
        mask = 0
        for bit, highest in self.ahead.get(key, {}).items():
            if serial.lt(end, highest):
                mask |= bit
        return mask

    def _asked(self, flow: dict[int, _Entry], ranges: tuple[tuple[int, int], ...], askers: int) -> None:
        """The BFERs ``askers`` asked for these ranges themselves: no partial need name them."""
        for entry in flow.values():
            if any(serial.le(entry.start, last) and serial.lt(first, entry.end) for first, last in ranges):
                entry.asked |= askers & entry.expected

    def _merge(
        self,
        key: FlowKey,
        flow: dict[int, _Entry],
        seqs: list[int],
        askers: int,
        now: float,
        again: bool = False,
    ) -> None:
        """``askers`` asked for ``seqs``: each joins its sequence's open round or opens one, which goes
        upstream when its gather wait ends."""
        rounds = self.rounds.setdefault(key, {})
        upstream = self._upstream(flow)
        for seq in seqs:
            r = rounds.get(seq)
            if r is not None and r.passed_at is not None:
                # Its repair passed here and missed them, or was lost below: ask again, and say so (the
                # BFIR's holdoff is for a repair that may still be on its way).
                again, r = True, None
                self.counters["round-again"] += 1
            elif r is not None and r.sent_at is not None and now >= r.sent_at + self.round_wait(r.upstream):
                self.counters["round-expired"] += 1
                r = None  # its repair never passed here: a new round
            if r is None:
                rounds[seq] = _Round(askers, now + self.gather_wait(key), upstream, again)
                self.counters["round-opened"] += 1
                continue
            self.counters["nack-merged"] += 1
            if r.sent_at is None:
                r.pending |= askers  # still gathering: they go up with the first
                r.again |= again
            r.askers |= askers

    def _repair_passed(self, key: FlowKey, seq: int, downstream: int, now: float) -> None:
        """A retransmission of ``seq`` went down to ``downstream`` from here: its round is over for the askers
        it reaches; those it misses (they asked after the round's AGG-NACK, or the BFIR held them off) ask
        again at once."""
        rounds = self.rounds.get(key)
        r = rounds.get(seq) if rounds else None
        if r is None or rounds is None or r.sent_at is None or r.passed_at is not None:
            return
        rtt = self.upstream_rtt.get(r.upstream)
        if rtt is None:
            cfg = self.config
            rtt = RtoEstimator(initial=cfg.partial_after, min_rto=cfg.report_delay or cfg.partial_after,
                               max_rto=max(cfg.partial_after, cfg.lifetime / 2))  # fmt: skip
            self.upstream_rtt[r.upstream] = rtt
            if len(self.upstream_rtt) > max(1, cfg.budget):
                del self.upstream_rtt[next(iter(self.upstream_rtt))]
        rtt.sample(now - r.sent_at, retransmitted=r.again)
        missed = r.askers & ~downstream
        self.counters["round-repaired"] += 1
        if missed:
            self.counters["round-again"] += 1
            rounds[seq] = _Round(missed, now, r.upstream, again=True)
        else:
            r.passed_at = now  # a NACK of it from now on asks again at once

    def _rounds_due(self, now: float) -> list[Out]:
        """The AGG-NACKs of the rounds whose gather ended: one per run of consecutive sequences with the
        same askers, holders and upstream; rounds whose repair never came are closed."""
        out: list[Out] = []
        for key, rounds in list(self.rounds.items()):
            flow = self.flows.get(key, {})
            due = []
            for seq, r in list(rounds.items()):
                if r.due is not None and now >= r.due:
                    due.append((seq, r, self._holders(flow, seq) & ~r.askers))
                elif r.sent_at is not None and now >= (r.passed_at or r.sent_at) + 2 * self.round_wait(
                    r.upstream
                ):
                    del rounds[seq]  # nobody asked again meanwhile: their next NACK opens a new round
                    if r.passed_at is None:
                        self.counters["round-expired"] += 1
            if due:
                oldest = due[0][0]
                due.sort(key=lambda d: serial.distance(oldest, d[0]))
            run: list[tuple[int, _Round, int]] = []
            for item in [*due, None]:
                if run and (item is None or not _same_round(run[-1], item)):
                    first, last, r, holders = run[0][0], run[-1][0], run[0][1], run[0][2]
                    msgs = agg_nacks(key[0], key[1], first, last, self.bfr_id, r.pending, holders,
                                     self.config.bsl, r.again)  # fmt: skip
                    self.counters["agg-nack-sent"] += len(msgs)
                    out.extend((r.upstream, m) for m in msgs)
                    for _seq, done, _h in run:
                        done.pending, done.due, done.sent_at = 0, None, now
                    run = []
                if item is not None:
                    run.append(item)
            if not rounds:
                del self.rounds[key]
        return out

    def _holders(self, flow: dict[int, _Entry], seq: int) -> int:
        """The BFERs below that hold ``seq`` (its window's entry says so), 0 when no entry says."""
        entry = flow.get(seq & ~(self.config.window - 1))
        return entry.held & entry.expected if entry is not None else 0

    def poll(self, now: float) -> list[Out]:
        """AGG-ACKs that waited long enough, AGG-NACKs whose gather ended, partial AGG-ACKs and expiries
        due at ``now``."""
        out: list[Out] = self._rounds_due(now)
        for key, due in list(self.report_due.items()):
            if now >= due:
                out.extend(self._finished(key, self.flows.get(key, {}), now))
        for key, flow in list(self.flows.items()):
            if now >= self.seen[key] + self.config.lifetime:
                self.entries -= len(flow)
                self.counters["expired"] += len(flow)
                self._drop_flow(key)
                continue
            out.extend(self._partials(key, flow, now))
        return out

    def _partials(self, key: FlowKey, flow: dict[int, _Entry], now: float) -> list[Out]:
        """The partial AGG-ACKs of the flow's windows whose timer ran out."""
        out: list[Out] = []
        due = []
        for entry in flow.values():
            if now >= entry.deadline and entry.held != entry.expected:
                entry.partials += 1
                backoff = 1 << min(entry.partials, self.config.max_backoff)
                entry.deadline = now + self.partial_wait(key) * backoff
                # BFERs that received past the window see its hole and ask: no partial the first time (an
                # ACK of one that holds it may have been lost, so the next says it).
                ahead = self._ahead_of(key, entry.end) if entry.partials == 1 else 0
                if entry.again or entry.expected & ~entry.held & ~entry.asked & ~ahead:
                    entry.again = False
                    due.append(entry)
                else:
                    # Every BFER that lacks it has asked for itself since, or received a later sequence (it
                    # sees the hole and asks): the BFIR knows, or will. Partials are for the silent.
                    self.counters["partial-suppressed"] += 1
                entry.asked = 0
        for entry in due:
            # The latest due window's partial speaks for the earlier ones with no other BFERs: its
            # acked BFERs hold those windows too, and its missing ones are the earlier ones' (or
            # ahead of them), which the BFIR resends from the oldest sequence they owe.
            if any(serial.lt(entry.end, o.end) and entry.expected & ~o.expected == 0 for o in due):
                self.counters["partial-coalesced"] += 1
                continue
            out.extend(self._agg(key, entry, entry.expected & ~entry.acked, "partial-sent"))
        return out

    def next_deadline(self) -> float | None:
        times = [*self.report_due.values()]
        for rounds in self.rounds.values():
            for r in rounds.values():
                if r.due is not None:
                    times.append(r.due)
                elif r.sent_at is not None:
                    times.append((r.passed_at or r.sent_at) + 2 * self.round_wait(r.upstream))
        times += [seen + self.config.lifetime for seen in self.seen.values()]
        times += [e.deadline for flow in self.flows.values() for e in flow.values() if e.held != e.expected]
        return min(times) if times else None

    # -- internals ---------------------------------------------------------------------------------

    def _apply(self, flow: dict[int, _Entry], cum: int, reporters: int, missing: int) -> int:
        """Record ``reporters`` as holding everything before ``cum``; return the bits accounted for."""
        claimed = 0
        for entry in flow.values():
            mine = reporters & entry.expected
            if serial.le(entry.end, cum):
                entry.acked |= mine
                entry.held |= mine
                entry.reported_missing &= ~entry.held
                claimed |= mine
                if entry.end == cum:
                    # A partial from below speaks for its own window only: marking older windows too
                    # would re-send a partial for each of them on every partial from below.
                    entry.reported_missing = (
                        entry.reported_missing | (missing & entry.expected)
                    ) & ~entry.acked
                    claimed |= missing & entry.expected
            elif entry.covers(cum):
                claimed |= mine
        return claimed

    def _apply_held(
        self,
        flow: dict[int, _Entry],
        spans: list[tuple[int, int]],
        reporters: int,
        missing: int,
        cum: int | None,
    ) -> int:
        """Record ``reporters`` as holding the windows inside ``spans`` ([first, end) pairs), whatever they
        lack before; ``missing`` (a selective partial from below, ending at ``cum``) as for :meth:`_apply`.
        Returns the bits accounted for."""
        claimed = 0
        for entry in flow.values():
            mine = reporters & entry.expected
            if mine and any(entry.within(first, end) for first, end in spans):
                entry.held |= mine
                entry.reported_missing &= ~entry.held
                claimed |= mine
            if cum is not None and entry.end == cum and missing & entry.expected:
                entry.reported_missing = (entry.reported_missing | (missing & entry.expected)) & ~entry.held
                claimed |= missing & entry.expected
        return claimed

    def _finished(self, key: FlowKey, flow: dict[int, _Entry], now: float) -> list[Out]:
        """The AGG-ACKs the windows acknowledged below call for: at once when ``report_every`` of them wait
        (or the FIN's window is among them, or their ``report_delay`` ran out), later otherwise."""
        out: list[Out] = []
        # Acknowledged, or held above a hole and not yet said so (``held`` includes ``acked``).
        fresh = [
            e
            for e in flow.values()
            if e.acked == e.expected or (e.held == e.expected and not e.selective_sent)
        ]
        if not fresh:
            self.report_due.pop(key, None)
        elif (
            len(fresh) >= self.config.report_every
            or any(e.fin for e in fresh)
            or now >= self.report_due.get(key, float("inf"))
        ):
            self.report_due.pop(key, None)
            out = self._report(key, flow, now)
        else:
            self.report_due.setdefault(key, now + self.report_wait(key))
        for entry in flow.values():
            if entry.reported_missing and entry.held | entry.reported_missing == entry.expected:
                # Everyone below has answered or been reported missing by a BFR below: no point waiting.
                out.extend(self._agg(key, entry, entry.reported_missing, "partial-sent"))
                entry.reported_missing = 0
                entry.deadline = now + self.partial_wait(key)
        if not flow:
            self._drop_flow(key)
        return out

    def _report(self, key: FlowKey, flow: dict[int, _Entry], now: float) -> list[Out]:
        """Selective AGG-ACKs for the windows held below, and one cumulative AGG-ACK for those acknowledged
        (which are freed)."""
        out = self._selective(key, flow, now)
        done = [(start, e) for start, e in flow.items() if e.acked == e.expected]
        for start, entry in done:
            del flow[start]
            self.entries -= 1
            if self.config.adaptive and not entry.selective_sent:
                self._timer(key).sample(now - entry.born, retransmitted=entry.repaired)
            # One AGG-ACK with a later cumulative point for a superset of BFERs says all this one says.
            if any(serial.lt(entry.end, o.end) and entry.expected & ~o.expected == 0 for _, o in done):
                self.counters["agg-coalesced"] += 1
                continue
            self._remember_report(key, entry, now)
            out.extend(self._agg(key, entry, 0, "agg-sent"))
        return out

    def _selective(self, key: FlowKey, flow: dict[int, _Entry], now: float) -> list[Out]:
        """Selective AGG-ACKs for the windows every expected BFER now holds while some lack an earlier
        sequence: one per run of adjacent windows with the same BFERs and upstream.  Each names the
        whole run of held windows it extends (First goes back over those already reported), so one that
        is lost is said again by the next instead of waiting for the cumulative AGG-ACK."""
        ready = [e for e in flow.values() if not e.selective_sent and e.held == e.expected != e.acked]
        if not ready:
            return []
        oldest = ready[0].start
        ready.sort(key=lambda e: serial.distance(oldest, e.start))
        out: list[Out] = []
        run: list[_Entry] = []
        for entry in [*ready, None]:
            if run and (entry is None or not _extends(run[-1], entry)):
                first = self._held_since(flow, run[0])
                msgs = agg_acks(
                    key[0], key[1], run[-1].end, self.bfr_id, run[0].expected, 0, self.config.bsl, first
                )
                self.counters["selective-sent"] += len(msgs)
                self.counters["selective-coalesced"] += len(run) - 1
                out.extend((run[0].upstream, m) for m in msgs)
                run = []
            if entry is not None:
                entry.selective_sent = True
                if self.config.adaptive:
                    self._timer(key).sample(now - entry.born, retransmitted=entry.repaired)
                run.append(entry)
        return out

    def _held_since(self, flow: dict[int, _Entry], entry: _Entry) -> int:
        """Start of the run of adjacent windows before ``entry`` whose selective AGG-ACK already went."""
        first = entry.start
        for _ in range(len(flow)):
            before = flow.get(serial.add(first, -self.config.window) & serial.MASK)
            if before is None or not before.selective_sent or not _extends(before, entry, first):
                break
            first = before.start
        return first

    def _just_reported(self, key: FlowKey, ack: Ack, reporter: int, now: float) -> bool:
        """``ack`` says nothing the flow's last cumulative AGG-ACK from here did not (that AGG-ACK named its
        reporter and went past its Highest) and comes within one partial wait of it: the answer to a
        retransmission that crossed the AGG-ACK, whose window's entry that AGG-ACK freed. A retransmission
        to everyone (the BFIR's timer, before any partial told it who was missing) makes every BFER below
        answer at once, and the source heard each of those ACKs end to end: on the superpod at 5 % loss,
        41 to 75 a run, which put it over one ACK per packet. Later, or for a BFER the AGG-ACK did not
        name, the ACK goes on: if that AGG-ACK was lost, the BFIR's next retransmission makes a new entry
        here, which absorbs the answers and says them again."""
        last = self.reported.get(key)
        if last is None:
            return False
        cum, bfers, sent = last
        recent = now - sent <= self.partial_wait(key)
        return recent and reporter & bfers == reporter and serial.le(ack.highest, cum)

    def _remember_report(self, key: FlowKey, entry: _Entry, now: float) -> None:
        """A cumulative AGG-ACK for ``entry`` goes upstream: what it said (:meth:`_just_reported`)."""
        cum, bfers = entry.end, entry.acked
        last = self.reported.pop(key, None)
        if last is not None and last[0] == cum:
            bfers |= last[1]
        elif last is not None and serial.lt(cum, last[0]):
            cum, bfers = last[0], last[1]
        self.reported[key] = (cum, bfers, now)  # most recent last, so the oldest flow is dropped first
        if len(self.reported) > max(1, self.config.budget):
            del self.reported[next(iter(self.reported))]

    def _agg(self, key: FlowKey, entry: _Entry, missing: int, counter: str) -> list[Out]:
        msgs = agg_acks(key[0], key[1], entry.end, self.bfr_id, entry.acked, missing, self.config.bsl)
        self.counters[counter] += len(msgs)
        return [(entry.upstream, m) for m in msgs]

    @staticmethod
    def _upstream(flow: dict[int, _Entry]) -> Hashable | None:
        for entry in flow.values():
            return entry.upstream
        return None


def _extends(before: _Entry, entry: _Entry, start: int | None = None) -> bool:
    """``entry`` (or the run starting at ``start``) follows ``before`` directly, for the same BFERs and
    upstream, so one selective AGG-ACK may speak for both."""
    return (
        before.end == (entry.start if start is None else start)
        and before.held == before.expected == entry.expected
        and before.upstream == entry.upstream
    )


def _same_round(before: tuple[int, _Round, int], item: tuple[int, _Round, int]) -> bool:
    """``item``'s sequence follows ``before``'s and one AGG-NACK may say both."""
    (seq_a, a, holders_a), (seq_b, b, holders_b) = before, item
    return seq_b == serial.add(seq_a, 1) and (a.pending, a.upstream, a.again, holders_a) == (
        b.pending,
        b.upstream,
        b.again,
        holders_b,
    )


def _received_runs(ack: Ack) -> list[tuple[int, int]]:
    """The [first, end) runs an ACK's ranges say were received between its cumulative point and Highest."""
    runs = []
    low = ack.cum
    for first, last in ack.ranges:
        if low != first:
            runs.append((low, first))
        low = serial.add(last, 1)
    if low != ack.highest:
        runs.append((low, ack.highest))
    return runs
